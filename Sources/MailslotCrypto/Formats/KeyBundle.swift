import Foundation

// The key-bundle format: a user's public keys, self-signed. What `/v1/users/{uid}/keys` holds.
// Specified in spec/envelope.md §Key bundles.
//
//   {"version":1, "uid":…, "identity_key": b64url(32), "mailbox_key": b64url(32),
//    "created_at": RFC 3339, "signature": b64url(64)}
//   signature = Ed25519(identity key, PAE("mailslot-key-bundle-v1", uid, identity_key, mailbox_key, created_at))

/// Why a key bundle was refused.
public enum KeyBundleError: Error, Equatable, Sendable {
    /// Not the bundle JSON, a field missing or of the wrong type or length, or an unknown version.
    case malformed(String)
    /// `uid` is not a valid uid.
    case invalidUID
    /// The bundle belongs to someone other than the user it was fetched for.
    case wrongUser
    /// The self-signature does not verify.
    case badSignature

    /// The stable, documented code of this failure.
    public var code: String {
        switch self {
        case .malformed: "bundle_malformed"
        case .invalidUID: "bundle_invalid_uid"
        case .wrongUser: "bundle_wrong_user"
        case .badSignature: "bundle_bad_signature"
        }
    }
}

/// A user's public keys, signed by their own identity key. Clients pin `identityKey` on first
/// use; the signature proves the mailbox key belongs to that identity.
public struct KeyBundle: Sendable, Equatable, Codable {
    /// The format version; 1.
    public let version: Int
    /// Whose keys these are.
    public let uid: String
    /// The Ed25519 identity key that signs the bundle and every envelope the user sends.
    public let identityKey: IdentityPublicKey
    /// The X25519 key that envelopes to this user are sealed to.
    public let mailboxKey: MailboxPublicKey
    /// When the bundle was made (RFC 3339), exactly as signed.
    public let createdAt: String
    /// Ed25519 signature by `identityKey` (64 bytes).
    public let signature: [UInt8]

    static let label = Array("mailslot-key-bundle-v1".utf8)
    static let keyIDLabel = Array("mailslot-key-id-v1".utf8)

    /// Names the keys an envelope is sealed to: a sender sends it with each message, and a relay
    /// whose recipient has published other keys since refuses the message (`409 stale_keys`), so
    /// the sender fetches the new ones instead of sealing to a key nobody holds any more.
    /// Unpadded base64url of BLAKE2b-128 over PAE("mailslot-key-id-v1", identity_key, mailbox_key)
    /// (spec/envelope.md §Key ids): re-publishing the same keys keeps it; the relay can compute it
    /// from the bundle it stores, so it learns nothing new.
    public var keyID: String { Self.keyID(identityKey: identityKey, mailboxKey: mailboxKey) }

    /// The key id of an identity key and a mailbox key (see ``keyID``).
    public static func keyID(identityKey: IdentityPublicKey, mailboxKey: MailboxPublicKey) -> String {
        Base64URL.encode(blake2b(preAuthenticationEncoding([keyIDLabel, identityKey.bytes, mailboxKey.bytes]), length: 16))
    }

    /// Whether `text` has the form of a key id: 22 characters of unpadded base64url (16 bytes).
    public static func isValidKeyID(_ text: String) -> Bool {
        text.utf8.count == 22 && Base64URL.decodedCount(text) == 16
    }

    /// Makes and signs the bundle of `uid`.
    public init(uid: String, identity: IdentityKeyPair, mailboxKey: MailboxPublicKey, createdAt: Date = Date()) {
        precondition(Identifier.isValidUID(uid), "KeyBundle: invalid uid")
        self.version = 1
        self.uid = uid
        self.identityKey = identity.publicKey
        self.mailboxKey = mailboxKey
        self.createdAt = Timestamp.format(Int64(createdAt.timeIntervalSince1970.rounded(.down)))
        self.signature = identity.sign(Self.signedBytes(uid: uid, identityKey: identityKey,
                                                        mailboxKey: mailboxKey, createdAt: self.createdAt))
    }

    /// Checks the self-signature and, when given, that the bundle belongs to `expectedUID`.
    public func verify(for expectedUID: String? = nil) throws(KeyBundleError) {
        guard version == 1 else { throw .malformed("unknown version \(version)") }
        guard Identifier.isValidUID(uid) else { throw .invalidUID }
        if let expectedUID, expectedUID != uid { throw .wrongUser }
        guard Timestamp.parse(createdAt) != nil else { throw .malformed("created_at is not an RFC 3339 time") }
        guard mailboxKey.isUsable else { throw .malformed("mailbox_key is a low-order point") }
        let signed = Self.signedBytes(uid: uid, identityKey: identityKey, mailboxKey: mailboxKey, createdAt: createdAt)
        guard identityKey.verify(signature: signature, of: signed) else { throw .badSignature }
    }

    /// Decodes a bundle from its JSON and verifies it.
    public static func decode(_ json: [UInt8], for expectedUID: String? = nil) throws(KeyBundleError) -> KeyBundle {
        let bundle: KeyBundle
        do {
            try StrictJSON.validate(json, maxDepth: 4)
            bundle = try JSONDecoder().decode(KeyBundle.self, from: Data(json))
        } catch {
            throw .malformed("not a key bundle in JSON")
        }
        try bundle.verify(for: expectedUID)
        return bundle
    }

    /// The bundle as compact JSON with sorted keys.
    public func encoded() -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Only strings and an integer: encoding cannot fail.
        return Array(try! encoder.encode(self))
    }

    private static func signedBytes(uid: String, identityKey: IdentityPublicKey, mailboxKey: MailboxPublicKey,
                                    createdAt: String) -> [UInt8] {
        preAuthenticationEncoding([label, Array(uid.utf8), identityKey.bytes, mailboxKey.bytes, Array(createdAt.utf8)])
    }

    enum CodingKeys: String, CodingKey {
        case version, uid, signature
        case identityKey = "identity_key", mailboxKey = "mailbox_key", createdAt = "created_at"
    }

    /// Decodes the JSON form (binary fields in unpadded base64url). Does not verify; see ``decode(_:for:)``.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        func bytes(_ key: CodingKeys, count: Int) throws -> [UInt8] {
            guard let value = Base64URL.decode(try container.decode(String.self, forKey: key)), value.count == count else {
                throw DecodingError.dataCorruptedError(forKey: key, in: container,
                                                       debugDescription: "expected \(count) bytes in base64url")
            }
            return value
        }
        version = try container.decode(Int.self, forKey: .version)
        uid = try container.decode(String.self, forKey: .uid)
        identityKey = IdentityPublicKey(checkedBytes: try bytes(.identityKey, count: IdentityPublicKey.byteCount))
        mailboxKey = MailboxPublicKey(checkedBytes: try bytes(.mailboxKey, count: MailboxPublicKey.byteCount))
        createdAt = try container.decode(String.self, forKey: .createdAt)
        signature = try bytes(.signature, count: 64)
    }

    /// Encodes the JSON form.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(version, forKey: .version)
        try container.encode(uid, forKey: .uid)
        try container.encode(Base64URL.encode(identityKey.bytes), forKey: .identityKey)
        try container.encode(Base64URL.encode(mailboxKey.bytes), forKey: .mailboxKey)
        try container.encode(createdAt, forKey: .createdAt)
        try container.encode(Base64URL.encode(signature), forKey: .signature)
    }
}
