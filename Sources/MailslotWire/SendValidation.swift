/// The checks the fields of every create pass — `PUT /v1/users/{uid}/messages/{id}` and the
/// socket's `send` frame alike — in the relay's order and with its limits, each refusal with its
/// problem code (spec/protocol.md §Messages). One definition, used by the relay and by the fuzz
/// target that explores what the relay accepts.
public struct SendValidation: Sendable, Equatable {
    /// The largest envelope taken, in bytes (at most ``Envelope/maximumSize``).
    public var maxEnvelopeBytes: Int
    /// The lifetime given to a message sent without `ttl_seconds`.
    public var defaultTTL: Int64
    /// The longest lifetime a sender may ask for.
    public var maxTTL: Int64

    /// Fields that passed every check.
    public struct Checked: Sendable, Equatable {
        /// The message's lifetime in seconds (the default when none was asked for).
        public let ttl: Int64
        /// The envelope's size in bytes: a size class.
        public let size: Int
    }

    /// Checks with the given limits; the defaults are the relay's.
    public init(maxEnvelopeBytes: Int = Defaults.maxEnvelopeBytes, defaultTTL: Int64 = Defaults.messageTTL,
                maxTTL: Int64 = Defaults.maxMessageTTL) {
        self.maxEnvelopeBytes = maxEnvelopeBytes
        self.defaultTTL = defaultTTL
        self.maxTTL = maxTTL
    }

    /// Checks a create of `envelope` (its unpadded base64url text) into `recipient`'s mailbox under
    /// `id`: ``checkAddress(to:id:)``, then ``checkContent(envelope:ttlSeconds:keyID:)``.
    public func check(to recipient: String, id: String, envelope base64: String, ttlSeconds: Int64?,
                      keyID: String?) throws(Problem) -> Checked {
        try checkAddress(to: recipient, id: id)
        return try checkContent(envelope: base64, ttlSeconds: ttlSeconds, keyID: keyID)
    }

    /// Checks where a create goes: the recipient's uid and the message id. (The relay asks its
    /// access rules between this and ``checkContent(envelope:ttlSeconds:keyID:)``.)
    public func checkAddress(to recipient: String, id: String) throws(Problem) {
        try Self.check(uid: recipient)
        try Self.check(messageID: id)
    }

    /// Refuses what is not a uid (spec/protocol.md §2) with `invalid_uid`.
    public static func check(uid: String) throws(Problem) {
        guard Identifier.isValidUID(uid) else { throw Problem(.invalidUID, "a uid is 1 to 128 of A-Z a-z 0-9 . _ -") }
    }

    /// Refuses what is not a message id with `invalid_message_id`.
    public static func check(messageID: String) throws(Problem) {
        guard Identifier.isValidMessageID(messageID) else { throw Problem(.invalidMessageID, "a message id is 16 to 64 of A-Z a-z 0-9 _ -") }
    }

    /// Checks what a create carries: the lifetime, the envelope's text and size class, the key id.
    /// The envelope is checked, not decoded: the relay stores and forwards the text as it came.
    public func checkContent(envelope base64: String, ttlSeconds: Int64?, keyID: String?) throws(Problem) -> Checked {
        let ttl = ttlSeconds ?? defaultTTL
        guard ttl >= 1, ttl <= maxTTL else { throw Problem(.invalidTTL, "ttl_seconds must be 1 to \(maxTTL)") }
        // The base64 text is 4/3 of the envelope: refuse an oversized one before reading it.
        guard base64.utf8.count <= (maxEnvelopeBytes * 4 + 2) / 3 else {
            throw Problem(.envelopeTooLarge, "envelopes are at most \(maxEnvelopeBytes) bytes")
        }
        guard let size = Base64URL.decodedCount(base64), size > 0 else {
            throw Problem(.invalidEnvelope, "envelope must be non-empty unpadded base64url")
        }
        guard size <= maxEnvelopeBytes else { throw Problem(.envelopeTooLarge, "envelopes are at most \(maxEnvelopeBytes) bytes") }
        // The relay cannot open an envelope, but it can insist on the size classes, so that it
        // never stores (or lets anyone observe) an exact length.
        guard size >= Envelope.minimumSize, size & (size - 1) == 0 else {
            throw Problem(.invalidEnvelope, "an envelope is a power of two from \(Envelope.minimumSize) bytes (spec/envelope.md)")
        }
        if let keyID, !KeyBundle.isValidKeyID(keyID) {
            throw Problem(.invalidKeyID, "key_id is 22 characters of unpadded base64url (spec/envelope.md)")
        }
        return Checked(ttl: ttl, size: size)
    }
}
