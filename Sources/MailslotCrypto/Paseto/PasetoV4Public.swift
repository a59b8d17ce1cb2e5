/// PASETO `v4.public`: Ed25519 signatures over `PAE(header, message, footer, implicit)`.
public enum PasetoV4Public {
    static let header = "v4.public."
    static let signatureBytes = 64

    /// Signs `message` into a `v4.public` token. `footer` travels in clear; `implicit` is
    /// authenticated but not carried (the verifier must supply the same bytes).
    public static func sign(_ message: [UInt8], with key: IdentityKeyPair,
                            footer: [UInt8] = [], implicit: [UInt8] = []) -> String {
        let signed = preAuthenticationEncoding([Array(header.utf8), message, footer, implicit])
        let signature = key.sign(signed)
        return PasetoToken.serialise(header: header, payload: message + signature, footer: footer)
    }

    /// Verifies `token` with `key` and returns its message. When `footer` is given, the token's
    /// footer must equal it.
    public static func verify(_ token: String, with key: IdentityPublicKey,
                              footer: [UInt8]? = nil, implicit: [UInt8] = []) throws(PasetoError) -> [UInt8] {
        try verify(PasetoToken(parsing: token), with: key, footer: footer, implicit: implicit)
    }

    /// Verifies an already parsed token (so a caller can read the footer first, e.g. to pick the key).
    public static func verify(_ token: PasetoToken, with key: IdentityPublicKey,
                              footer: [UInt8]? = nil, implicit: [UInt8] = []) throws(PasetoError) -> [UInt8] {
        try token.require(purpose: "public")
        try token.require(footer: footer)
        guard token.payload.count >= signatureBytes else {
            throw .malformed("the payload is shorter than a signature")
        }
        let message = Array(token.payload.dropLast(signatureBytes))
        let signature = Array(token.payload.suffix(signatureBytes))
        let signed = preAuthenticationEncoding([Array(header.utf8), message, token.footer, implicit])
        guard key.verify(signature: signature, of: signed) else { throw .invalid }
        return message
    }
}
