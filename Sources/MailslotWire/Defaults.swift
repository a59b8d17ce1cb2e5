@_exported import MailslotCrypto

/// The defaults of spec/protocol.md §11 that several parts must agree on: the relay applies them, the
/// token minter and the clients assume them. Every one can be changed in the relay's
/// configuration; these are the values when nothing is configured.
public enum Defaults {
    /// The audience (`aud`) a relay accepts when none is configured, and tokens are minted for.
    /// Operators set their own, so that a token for one relay is useless at another.
    public static let audience = "mailslot"
    /// The lifetime of a minted custom token when none is given, in seconds.
    public static let tokenLifetime: Int64 = 300
    /// The largest envelope the relay accepts, in bytes (a size class of the envelope format).
    public static let maxEnvelopeBytes = 64 * 1024
    /// A message's lifetime on the relay when the sender gives none, in seconds (7 days).
    public static let messageTTL: Int64 = 7 * 24 * 3600
    /// The longest lifetime a sender may ask for, in seconds (30 days).
    public static let maxMessageTTL: Int64 = 30 * 24 * 3600
    /// The most messages waiting in one mailbox.
    public static let maxPendingPerMailbox = 10_000
    /// The most delivered-but-unacknowledged messages on one subscription.
    public static let deliveryWindow = 256
    /// The largest owner document (`/v1/users/{uid}`), in bytes.
    public static let maxDocumentBytes = 16 * 1024
    /// The largest frame a relay can send: a `message` frame holding the largest envelope any
    /// relay may accept (``Envelope/maximumSize``, as base64url) and its other members. Clients
    /// accept frames this large, whatever envelope limit their relay is configured with.
    public static let maxRelayFrameBytes = (Envelope.maximumSize * 4 + 2) / 3 + 4096
    /// The most messages one list request returns.
    public static let maxPageSize = 500
    /// The most blocked authors one page of the block list returns.
    public static let maxBlockPageSize = 1000
    /// The largest file a relay takes when none is configured, in plaintext bytes (100 MiB); a
    /// blob's ciphertext may be ``FileCipher/size(plainSize:)`` of it.
    public static let maxFileBytes: Int64 = 100 * 1024 * 1024
    /// The bytes per part of a blob upload (8 MiB): every part but the last has this length.
    public static let blobPartSize: Int64 = 8 * 1024 * 1024
    /// The most recipients one blob may name.
    public static let maxBlobRecipients = 1000
    /// The most entries of one send to many (`POST /v1/messages`, `send_many`): a client that
    /// sends to more recipients splits its send into several.
    public static let maxBatchEntries = 1000
    /// The largest body of one send to many, in bytes (8 MiB): a client splits a send whose
    /// entries would pass it.
    public static let maxBatchBytes = 8 * 1024 * 1024
    /// How long an unfinished upload is kept, in seconds (24 hours).
    public static let blobUploadTTL: Int64 = 24 * 3600
    /// The most blob bytes, finished and unfinished, one author may hold (2 GiB).
    public static let maxAuthorBlobBytes: Int64 = 2 * 1024 * 1024 * 1024
    /// The most unfinished uploads one author may have.
    public static let maxUploadsInProgress = 8
    /// The most part uploads and downloads running at once for one uid on one relay.
    public static let maxTransfersPerUID = 16
    /// The most blobs one list request returns.
    public static let maxBlobPageSize = 500
}
