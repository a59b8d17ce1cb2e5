import Foundation
import Testing
@testable import MailslotCrypto

/// Checks `spec/vectors/key-ids.json` (spec/envelope.md §Key ids) against ``KeyBundle/keyID``.
///
/// Written by this file as the other vectors are by ``SpecVectorTests``: run once with
/// `MAILSLOT_WRITE_VECTORS=1 swift test --filter KeyIDVectorTests` after a deliberate change, review
/// the diff, commit it. tools/interop/check.py checks the same file from the spec alone.
@Suite(.serialized) struct KeyIDVectorTests {
    static let file = "key-ids.json"

    /// One case's inputs: whose keys, derived from which seeds, published at which time.
    struct Input {
        let name: String
        let uid: String
        let identitySeed: UInt8
        let mailboxSeed: UInt8
        let createdAt: Int64
    }

    // The seeds of SpecVectorTests where they exist (bob's first case is the bundle of bundles.json).
    static let inputs: [Input] = [
        Input(name: "bob", uid: "bob", identitySeed: 0xB0, mailboxSeed: 0xB1, createdAt: SpecVectorTests.now),
        Input(name: "bob publishes the same keys again a day later (same key id)", uid: "bob", identitySeed: 0xB0, mailboxSeed: 0xB1,
              createdAt: SpecVectorTests.now + 86_400),
        Input(name: "bob after a mailbox key rotation", uid: "bob", identitySeed: 0xB0, mailboxSeed: 0xB2, createdAt: SpecVectorTests.now + 172_800),
        Input(name: "another identity key with bob's first mailbox key", uid: "bob", identitySeed: 0xB3, mailboxSeed: 0xB1,
              createdAt: SpecVectorTests.now + 259_200),
        Input(name: "carol", uid: "carol", identitySeed: 0xC0, mailboxSeed: 0xC1, createdAt: SpecVectorTests.now),
    ]

    /// Texts that are not key ids, each with why (spec/envelope.md §Key ids: the relay answers
    /// `400 invalid_key_id`).
    static let malformed: [(keyID: String, why: String)] = [
        ("", "empty"),
        ("AAAAAAAAAAAAAAAAAAAAA", "21 characters"),
        ("AAAAAAAAAAAAAAAAAAAAAAA", "23 characters"),
        ("AAAAAAAAAAAAAAAAAAAAAAAA", "24 characters (18 bytes)"),
        ("AAAAAAAAAAAAAAAAAAAAAB", "non-canonical: the last character's unused 4 bits are not zero"),
        ("AAAAAAAAAAAAAAAAAAAA==", "padded"),
        ("AAAAAAAAAAAAAAAAAAA+AA", "standard base64 alphabet (+)"),
        ("AAAAAAAAAAAAAAAAAAA/AA", "standard base64 alphabet (/)"),
        ("AAAAAAAAAAAAAAAAAAA AA", "a space"),
        ("AAAAAAAAAAAAAAAAAAAéA", "non-ASCII (22 bytes of UTF-8)"),
    ]

    static func seed(_ byte: UInt8) -> SecretBytes { SecretBytes(copying: [UInt8](repeating: byte, count: 32)) }
    static func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

    static func cases() -> [[String: Any]] {
        inputs.map { input in
            let identity = IdentityKeyPair(seed: seed(input.identitySeed))
            let mailbox = MailboxKeyPair(seed: seed(input.mailboxSeed))
            let bundle = KeyBundle(uid: input.uid, identity: identity, mailboxKey: mailbox.publicKey,
                                   createdAt: Date(timeIntervalSince1970: Double(input.createdAt)))
            return [
                "name": input.name,
                "uid": input.uid,
                "identity_seed": Base64URL.encode([UInt8](repeating: input.identitySeed, count: 32)),
                "mailbox_seed": Base64URL.encode([UInt8](repeating: input.mailboxSeed, count: 32)),
                "identity_key": Base64URL.encode(identity.publicKey.bytes),
                "mailbox_key": Base64URL.encode(mailbox.publicKey.bytes),
                "pae_hex": hex(preAuthenticationEncoding([KeyBundle.keyIDLabel, identity.publicKey.bytes, mailbox.publicKey.bytes])),
                "key_id": bundle.keyID,
                "bundle": String(decoding: bundle.encoded(), as: UTF8.self),
            ]
        }
    }

    @Test func vectors() throws {
        if SpecVectorTests.writing {
            try SpecVectorTests.write(Self.file, [
                "description": "Key ids (spec/envelope.md, Key ids): key_id = unpadded base64url of BLAKE2b-128 (libsodium crypto_generichash, 16-byte output, no key) over PAE(\"mailslot-key-id-v1\", identity_key, mailbox_key), the keys as 32 raw bytes each. Each case: the keys, derived from the seeds (identity: crypto_sign_seed_keypair; mailbox: crypto_box_seed_keypair), the PAE input in hex, the key id, and a bundle of those keys (verify it for `uid`) whose key id it is. `malformed`: texts that are not key ids.",
                "cases": Self.cases(),
                "malformed": Self.malformed.map { ["key_id": $0.keyID, "why": $0.why] },
            ])
        }
        let vectors = try SpecVectorTests.read(Self.file)
        let cases = try #require(vectors["cases"] as? [[String: String]])
        #expect(cases.count >= 5)
        var keysOfID: [String: String] = [:]
        for vector in cases {
            let name = try #require(vector["name"])
            func bytes(_ key: String) throws -> [UInt8] {
                let text = try #require(vector[key], "\(name): \(key)")
                return try #require(Base64URL.decode(text), "\(name): \(key)")
            }
            // The keys are the ones the published seeds give.
            let identity = IdentityKeyPair(seed: SecretBytes(copying: try bytes("identity_seed")))
            let mailbox = MailboxKeyPair(seed: SecretBytes(copying: try bytes("mailbox_seed")))
            #expect(identity.publicKey.bytes == (try bytes("identity_key")), "\(name)")
            #expect(mailbox.publicKey.bytes == (try bytes("mailbox_key")), "\(name)")
            let keyID = try #require(vector["key_id"])
            #expect(Self.hex(preAuthenticationEncoding([KeyBundle.keyIDLabel, identity.publicKey.bytes, mailbox.publicKey.bytes])) == vector["pae_hex"],
                    "\(name)")
            #expect(KeyBundle.keyID(identityKey: identity.publicKey, mailboxKey: mailbox.publicKey) == keyID, "\(name)")
            #expect(KeyBundle.isValidKeyID(keyID), "\(name)")
            // The bundle verifies for its uid, holds these keys, and has this key id.
            let uid = try #require(vector["uid"])
            let bundleText = try #require(vector["bundle"])
            let bundle = try KeyBundle.decode(Array(bundleText.utf8), for: uid)
            #expect(bundle.identityKey == identity.publicKey && bundle.mailboxKey == mailbox.publicKey, "\(name)")
            #expect(bundle.keyID == keyID, "\(name)")
            // Signing the same keys again at another time gives another bundle with the same key id.
            let resigned = KeyBundle(uid: uid, identity: identity, mailboxKey: mailbox.publicKey,
                                     createdAt: Date(timeIntervalSince1970: Double(SpecVectorTests.now - 3_600)))
            #expect(resigned.encoded() != bundle.encoded(), "\(name)")
            #expect(resigned.keyID == keyID, "\(name)")
            // One key id for each pair of keys, and another for every other pair.
            let keys = (try bytes("identity_key")) + (try bytes("mailbox_key"))
            if let earlier = keysOfID[keyID] {
                #expect(earlier == Base64URL.encode(keys), "\(name): a key id shared by other keys")
            } else {
                keysOfID[keyID] = Base64URL.encode(keys)
            }
        }
        #expect(Set(keysOfID.values).count == keysOfID.count, "two key ids for the same keys")
        #expect(keysOfID.count >= 4, "the cases cover distinct keys")
        let malformed = try #require(vectors["malformed"] as? [[String: String]])
        #expect(malformed.count >= 8)
        for vector in malformed {
            let keyID = try #require(vector["key_id"])
            #expect(!KeyBundle.isValidKeyID(keyID), "\(vector["why"] ?? "")")
        }
    }

    /// The key id changes with either key, and keeps the order of the two (they are not interchangeable).
    @Test func eitherKeyChangesTheKeyID() {
        let identity = IdentityKeyPair(seed: Self.seed(0xB0)).publicKey
        let mailbox = MailboxKeyPair(seed: Self.seed(0xB1)).publicKey
        let base = KeyBundle.keyID(identityKey: identity, mailboxKey: mailbox)
        #expect(KeyBundle.keyID(identityKey: identity, mailboxKey: MailboxKeyPair(seed: Self.seed(0xB2)).publicKey) != base)
        #expect(KeyBundle.keyID(identityKey: IdentityKeyPair(seed: Self.seed(0xB3)).publicKey, mailboxKey: mailbox) != base)
        let swapped = KeyBundle.keyID(identityKey: IdentityPublicKey(bytes: mailbox.bytes)!, mailboxKey: MailboxPublicKey(bytes: identity.bytes)!)
        #expect(swapped != base)
        #expect(base.utf8.count == 22 && Base64URL.decode(base)?.count == 16)
    }
}
