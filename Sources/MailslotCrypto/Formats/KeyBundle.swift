import Foundation

// The key-bundle format: a user's public keys, self-signed. What `/v1/users/{uid}/keys` holds.
// Specified in spec/envelope.md §Key bundles.
//
//   {"version":1, "uid":…, "identity_key": b64url(32), "mailbox_key": b64url(32),
//    "created_at": RFC 3339, "signature": b64url(64)}
//   signature = Ed25519(identity key, PAE("mailslot-key-bundle-v1", uid, identity_key, mailbox_key, created_at))
//
// Version 2 adds the signed prekey that starts ratchets (spec/ratchet.md §2):
//   {… , "version":2, "signed_prekey_id": 1…2³²−1, "signed_prekey": b64url(32)}
//   signature = Ed25519(identity key, PAE("mailslot-key-bundle-v2", uid, identity_key, mailbox_key, created_at,
//                                         u32be signed_prekey_id, signed_prekey))

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
    /// The format version: 1, or 2 with a signed prekey.
    public let version: Int
    /// Whose keys these are.
    public let uid: String
    /// The Ed25519 identity key that signs the bundle and every envelope the user sends.
    public let identityKey: IdentityPublicKey
    /// The X25519 key that envelopes to this user are sealed to.
    public let mailboxKey: MailboxPublicKey
    /// When the bundle was made (RFC 3339), exactly as signed.
    public let createdAt: String
    /// The signed prekey senders start ratchets with (version 2), covered by ``signature``.
    public let signedPrekey: PublishedPrekey?
    /// Ed25519 signature by `identityKey` (64 bytes).
    public let signature: [UInt8]

    static let label = Array("mailslot-key-bundle-v1".utf8)
    static let labelV2 = Array("mailslot-key-bundle-v2".utf8)
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

    /// Makes and signs the bundle of `uid`: version 2 with a signed prekey, version 1 without.
    public init(uid: String, identity: IdentityKeyPair, mailboxKey: MailboxPublicKey, signedPrekey: PublishedPrekey? = nil,
                createdAt: Date = Date()) {
        precondition(Identifier.isValidUID(uid), "KeyBundle: invalid uid")
        precondition(signedPrekey.map { $0.id != 0 } ?? true, "KeyBundle: a signed prekey id is 1 or more")
        self.version = signedPrekey == nil ? 1 : 2
        self.uid = uid
        self.identityKey = identity.publicKey
        self.mailboxKey = mailboxKey
        self.signedPrekey = signedPrekey
        self.createdAt = Timestamp.format(Int64(createdAt.timeIntervalSince1970.rounded(.down)))
        self.signature = identity.sign(Self.signedBytes(uid: uid, identityKey: identityKey, mailboxKey: mailboxKey,
                                                        createdAt: self.createdAt, signedPrekey: signedPrekey))
    }

    /// Checks the self-signature and, when given, that the bundle belongs to `expectedUID`.
    public func verify(for expectedUID: String? = nil) throws(KeyBundleError) {
        switch (version, signedPrekey) {
        case (1, nil): break
        case (1, _): throw .malformed("a version 1 bundle has no signed prekey")
        case (2, let prekey?):
            guard prekey.id != 0 else { throw .malformed("signed_prekey_id is 0") }
            guard prekey.key.isUsable else { throw .malformed("signed_prekey is a low-order point") }
        case (2, nil): throw .malformed("a version 2 bundle needs a signed prekey")
        default: throw .malformed("unknown version \(version)")
        }
        guard Identifier.isValidUID(uid) else { throw .invalidUID }
        if let expectedUID, expectedUID != uid { throw .wrongUser }
        guard Timestamp.parse(createdAt) != nil else { throw .malformed("created_at is not an RFC 3339 time") }
        guard mailboxKey.isUsable else { throw .malformed("mailbox_key is a low-order point") }
        let signed = Self.signedBytes(uid: uid, identityKey: identityKey, mailboxKey: mailboxKey, createdAt: createdAt,
                                      signedPrekey: signedPrekey)
        guard identityKey.verify(signature: signature, of: signed) else { throw .badSignature }
    }

    /// Decodes a bundle from its JSON and verifies it.
    ///
    /// - Parameters:
    ///   - json: The bundle as the relay served it (spec/envelope.md, key bundles).
    ///   - expectedUID: The uid it must belong to; nil accepts any.
    /// - Returns: The bundle, its signature verified under its own identity key.
    /// - Throws: ``KeyBundleError`` when it is not a bundle, names another uid, or fails verification.
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
                                    createdAt: String, signedPrekey: PublishedPrekey?) -> [UInt8] {
        guard let signedPrekey else {
            return preAuthenticationEncoding([label, Array(uid.utf8), identityKey.bytes, mailboxKey.bytes, Array(createdAt.utf8)])
        }
        var id: [UInt8] = []
        Envelope.appendUInt32(signedPrekey.id, to: &id)
        return preAuthenticationEncoding([labelV2, Array(uid.utf8), identityKey.bytes, mailboxKey.bytes, Array(createdAt.utf8),
                                          id, signedPrekey.key.bytes])
    }

    enum CodingKeys: String, CodingKey {
        case version, uid, signature
        case identityKey = "identity_key", mailboxKey = "mailbox_key", createdAt = "created_at"
        case signedPrekeyID = "signed_prekey_id", signedPrekey = "signed_prekey"
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
        // Both members or neither (and neither null); verify() then matches them with the version.
        for key in [CodingKeys.signedPrekeyID, .signedPrekey] where container.contains(key) {
            if try container.decodeNil(forKey: key) {
                throw DecodingError.dataCorruptedError(forKey: key, in: container, debugDescription: "null")
            }
        }
        switch (try container.decodeIfPresent(UInt32.self, forKey: .signedPrekeyID), container.contains(.signedPrekey)) {
        case (nil, false): signedPrekey = nil
        case (let id?, true):
            signedPrekey = PublishedPrekey(id: id, key: MailboxPublicKey(checkedBytes: try bytes(.signedPrekey, count: 32)))
        default:
            throw DecodingError.dataCorruptedError(forKey: .signedPrekey, in: container,
                                                   debugDescription: "signed_prekey and signed_prekey_id go together")
        }
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
        if let signedPrekey {
            try container.encode(signedPrekey.id, forKey: .signedPrekeyID)
            try container.encode(Base64URL.encode(signedPrekey.key.bytes), forKey: .signedPrekey)
        }
    }
}
