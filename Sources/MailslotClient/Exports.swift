// One import for an app: `import MailslotClient` brings the message formats and keys the public API
// speaks in (ChatMessage, Payload, MessageType, Receipt, ProblemCode, Problem, IdentityPublicKey,
// TokenIssuer for a development bot, …), so no app imports MailslotWire or MailslotCrypto.
//
// Re-exported rather than wrapped in client-side types or typealiases: the client's API uses these
// types as they are (a received ChatMessage is the wire's ChatMessage), so wrappers would copy
// every field and typealiases would have to track each new wire type by hand — and a forgotten one
// would send the app back to `import MailslotWire`. `@_exported` is underscored but stable in
// practice and used by the server ecosystem the project builds on for the same purpose.
@_exported import MailslotWire
