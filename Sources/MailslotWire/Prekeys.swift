// One-time prekeys: X25519 public keys a recipient leaves with the relay for senders to start
// sessions with, each claimed by one sender and then gone. spec/protocol.md §4.14.

/// One one-time prekey: the id its owner chose, and the public key.
public struct Prekey: Sendable, Equatable, Codable {
    /// The owner's id for the key, 1…4294967295, unique among the owner's stored prekeys.
    public let id: UInt32
    /// The X25519 public key, unpadded base64url of 32 bytes.
    public let key: String

    /// A prekey as it goes on the wire; `key` is encoded here.
    public init(id: UInt32, key: MailboxPublicKey) {
        self.id = id
        self.key = Base64URL.encode(key.bytes)
    }

    /// A prekey from its wire text, as it came (the relay checks it; tests send wrong ones).
    public init(id: UInt32, keyText: String) {
        self.id = id
        self.key = keyText
    }

    /// The public key, when `key` is strict base64url of 32 bytes; nil otherwise.
    public var publicKey: MailboxPublicKey? {
        Base64URL.decode(key).flatMap { MailboxPublicKey(bytes: $0) }
    }
}

/// `POST /v1/users/{uid}/prekeys`: prekeys to add to the owner's supply, 1 to
/// ``maximumBatch`` of them with distinct ids.
public struct PrekeyUpload: Sendable, Equatable, Codable {
    /// The prekeys to add.
    public let prekeys: [Prekey]

    /// The most prekeys one upload may carry.
    public static let maximumBatch = 100

    /// An upload of `prekeys`.
    public init(prekeys: [Prekey]) { self.prekeys = prekeys }
}

/// The body of `POST /v1/users/{uid}/prekeys/claim`: an empty object (or no body at all).
public struct PrekeyClaimRequest: Sendable, Equatable, Codable {
    /// The empty request.
    public init() {}

    private struct NoMembers: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init?(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    /// Accepts any JSON object (members a later version may add are ignored), nothing else.
    public init(from decoder: any Decoder) throws {
        _ = try decoder.container(keyedBy: NoMembers.self)
    }

    /// Writes `{}`.
    public func encode(to encoder: any Encoder) throws {
        _ = encoder.container(keyedBy: NoMembers.self)
    }
}

/// The answer of an upload and of `GET /v1/users/{uid}/prekeys`: the prekeys the relay holds
/// for the owner.
public struct PrekeyCount: Sendable, Equatable, Codable {
    /// The number of unclaimed prekeys stored.
    public let count: Int

    /// A count.
    public init(count: Int) { self.count = count }

    enum CodingKeys: String, CodingKey { case count }

    /// Decodes a count, refusing (``OutOfRange``) one below 0 or above
    /// ``RelayAnswers/maxPrekeyCount`` (one prekey per id): no relay holds such a number.
    public init(from decoder: any Decoder) throws {
        count = try decoder.container(keyedBy: CodingKeys.self).decode(Int.self, forKey: .count, in: 0...RelayAnswers.maxPrekeyCount)
    }

    /// The low-water mark of spec/protocol.md §8.4: a claim that leaves the owner fewer than this
    /// many prekeys makes the relay send the owner's subscription a `prekeys` frame, once per
    /// crossing. Clients keep more than this on the relay.
    public static let lowWater = 25
}

/// The answer of `POST /v1/users/{uid}/prekeys/claim`: the claimed prekey, now gone from the
/// relay, or null when none is left (the sender then uses the bundle's signed prekey).
public struct PrekeyClaim: Sendable, Equatable, Codable {
    /// The claimed prekey; nil when the owner has none left.
    public let prekey: Prekey?

    /// An answer carrying `prekey`.
    public init(prekey: Prekey?) { self.prekey = prekey }

    enum CodingKeys: String, CodingKey { case prekey }

    /// Decodes a claim, refusing (``OutOfRange``) a prekey with id 0, which no upload stores.
    public init(from decoder: any Decoder) throws {
        prekey = try decoder.container(keyedBy: CodingKeys.self).decodeIfPresent(Prekey.self, forKey: .prekey)
        if let prekey, prekey.id == 0 { throw OutOfRange("id", "0", "1 … \(UInt32.max)") }
    }

    /// Writes `"prekey": null` when none is left, rather than leaving the member out.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(prekey, forKey: .prekey)
    }
}
