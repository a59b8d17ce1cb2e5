/// `PUT /v1/users/{uid}/messages/{id}`: drop a sealed envelope into a mailbox.
public struct SendRequest: Sendable, Equatable, Codable {
    /// The sealed envelope, unpadded base64url.
    public let envelope: String
    /// How long the relay keeps it if unacknowledged; default 7 days, at most 30.
    public let ttlSeconds: Int64?
    /// The key id (``KeyBundle/keyID``) of the recipient's bundle the envelope was sealed to.
    /// When present and no longer the recipient's, the relay answers `409 stale_keys`.
    public let keyID: String?
    /// Whether the message may wake the recipient's devices through their push registrations
    /// (spec/push.md §3); nil means true. `false` for what no one should be woken for: typing,
    /// receipts. An identical retry ignores it.
    public let wake: Bool?

    /// A request carrying `envelope` (raw bytes, encoded here), sealed to the keys `keyID` names.
    public init(envelope: [UInt8], ttlSeconds: Int64? = nil, keyID: String? = nil, wake: Bool? = nil) {
        self.envelope = Base64URL.encode(envelope)
        self.ttlSeconds = ttlSeconds
        self.keyID = keyID
        self.wake = wake
    }

    enum CodingKeys: String, CodingKey {
        case envelope, wake
        case ttlSeconds = "ttl_seconds"
        case keyID = "key_id"
    }
}

/// What the relay knows of a message: everything but the sealed content. `envelope` is present
/// only for the mailbox owner (reads and deliveries).
public struct MessageRecord: Sendable, Equatable, Codable {
    /// The sender-chosen id.
    public let id: String
    /// The uid of the session that created it, stamped by the relay.
    public let author: String
    /// When the relay stored it (RFC 3339).
    public let createdAt: String
    /// When the relay erases it if it is not acknowledged first (RFC 3339).
    public let expiresAt: String
    /// The envelope's size in bytes (a size class).
    public let size: Int
    /// The position in the mailbox: the list cursor, strictly increasing.
    public let seq: Int64?
    /// Owner-set processing lease: until when one worker holds the message (RFC 3339).
    public let leaseUntil: String?
    /// Owner-set small opaque label for the message (e.g. a worker name).
    public let leaseHolder: String?
    /// The sealed envelope, unpadded base64url; owner only.
    public let envelope: String?

    /// A record with all its fields.
    public init(id: String, author: String, createdAt: String, expiresAt: String, size: Int, seq: Int64?,
                leaseUntil: String? = nil, leaseHolder: String? = nil, envelope: String? = nil) {
        self.id = id
        self.author = author
        self.createdAt = createdAt
        self.expiresAt = expiresAt
        self.size = size
        self.seq = seq
        self.leaseUntil = leaseUntil
        self.leaseHolder = leaseHolder
        self.envelope = envelope
    }

    enum CodingKeys: String, CodingKey {
        case id, author, size, seq, envelope
        case createdAt = "created_at", expiresAt = "expires_at", leaseUntil = "lease_until", leaseHolder = "lease_holder"
    }

    /// Decodes a record, refusing (``OutOfRange``) what no relay sends: an id or author outside
    /// its grammar, a time that is not RFC 3339, a `size` that is not a size class
    /// (``Envelope/minimumSize`` … ``Envelope/maximumSize``, a power of two) or not the length of
    /// the envelope that comes with it, a `seq` below 1.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(String.self, forKey: .id, Grammar.messageID, Identifier.isValidMessageID)
        author = try container.decode(String.self, forKey: .author, Grammar.uid, Identifier.isValidUID)
        createdAt = try container.decode(String.self, forKey: .createdAt, Grammar.time, Grammar.isTime)
        expiresAt = try container.decode(String.self, forKey: .expiresAt, Grammar.time, Grammar.isTime)
        size = try container.decode(Int.self, forKey: .size, in: Envelope.minimumSize...Envelope.maximumSize)
        guard size & (size - 1) == 0 else { throw OutOfRange(CodingKeys.size.stringValue, "\(size)", "a size class (a power of two)") }
        seq = try container.decodeIfPresent(Int64.self, forKey: .seq, in: 1...Int64.max)
        leaseUntil = try container.decodeIfPresent(String.self, forKey: .leaseUntil, Grammar.time, Grammar.isTime)
        leaseHolder = try container.decodeIfPresent(String.self, forKey: .leaseHolder)
        envelope = try container.decodeIfPresent(String.self, forKey: .envelope)
        // `size` is the envelope's length: a record whose envelope says otherwise is not the relay's.
        if let envelope, Base64URL.decodedCount(envelope) != size {
            throw OutOfRange(CodingKeys.size.stringValue, "\(size)", "the length of the envelope it comes with")
        }
    }
}

/// `GET /v1/users/{uid}/messages`: one page, oldest first.
public struct MessagePage: Sendable, Equatable, Codable {
    /// The messages of this page, oldest first, with their envelopes.
    public let messages: [MessageRecord]
    /// The cursor for the next page (`after=`), or nil when this page reached the end.
    public let next: String?

    /// A page of messages and the cursor after it.
    public init(messages: [MessageRecord], next: String?) {
        self.messages = messages
        self.next = next
    }

    enum CodingKeys: String, CodingKey { case messages, next }

    /// Decodes a page, refusing (``OutOfRange``) one no relay sends: more than
    /// ``Defaults/maxPageSize`` messages, a `next` that is not a cursor, or a `next` after an
    /// empty page (a relay that says "there is more" and gives nothing would keep a reader
    /// asking for ever).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        messages = try container.decode([MessageRecord].self, forKey: .messages)
        guard messages.count <= Defaults.maxPageSize else {
            throw OutOfRange(CodingKeys.messages.stringValue, "\(messages.count) messages", "at most \(Defaults.maxPageSize)")
        }
        next = try container.decodeIfPresent(String.self, forKey: .next, Grammar.cursor, RelayAnswers.isValidCursor)
        if let next, messages.isEmpty { throw OutOfRange(CodingKeys.next.stringValue, next, "null after an empty page") }
    }

    /// Writes `next` as `null` at the end, rather than leaving it out.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(messages, forKey: .messages)
        try container.encode(next, forKey: .next)
    }
}

/// `PATCH /v1/users/{uid}/messages/{id}`: the owner's metadata. The sealed body never changes.
public struct MessagePatch: Sendable, Equatable, Codable {
    /// Take (seconds > 0) or release (0) a processing lease of that many seconds from now.
    public let leaseSeconds: Int64?
    /// Who holds the lease (opaque, at most 64 bytes).
    public let leaseHolder: String?

    /// A patch taking or releasing a lease.
    public init(leaseSeconds: Int64?, leaseHolder: String? = nil) {
        self.leaseSeconds = leaseSeconds
        self.leaseHolder = leaseHolder
    }

    enum CodingKeys: String, CodingKey {
        case leaseSeconds = "lease_seconds", leaseHolder = "lease_holder"
    }
}

/// A page of `GET /v1/users/{uid}/blocked`: blocked authors in byte order.
public struct BlockPage: Sendable, Equatable, Codable {
    /// The authors of this page.
    public let blocked: [String]
    /// The cursor for the next page (`after=`), or nil when this page reached the end.
    public let next: String?

    /// A page of blocked authors and the cursor after it.
    public init(blocked: [String], next: String?) {
        self.blocked = blocked
        self.next = next
    }

    enum CodingKeys: String, CodingKey { case blocked, next }

    /// `next` is always present, `null` on the last page (as in ``MessagePage``).
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(blocked, forKey: .blocked)
        try container.encode(next, forKey: .next)
    }
}
