import Foundation
import Testing
@testable import MailslotCrypto

@Suite struct KeyBundleTests {
    let identity = IdentityKeyPair()
    let mailbox = MailboxKeyPair()

    @Test func roundTripAndVerify() throws {
        let bundle = KeyBundle(uid: "alice", identity: identity, mailboxKey: mailbox.publicKey,
                               createdAt: Date(timeIntervalSince1970: 1_800_000_000))
        #expect(bundle.createdAt == "2027-01-15T08:00:00+00:00")
        let decoded = try KeyBundle.decode(bundle.encoded(), for: "alice")
        #expect(decoded == bundle)
        #expect(decoded.mailboxKey == mailbox.publicKey)
    }

    @Test func refusesAnotherUsersBundle() throws {
        let bundle = KeyBundle(uid: "alice", identity: identity, mailboxKey: mailbox.publicKey)
        #expect(throws: KeyBundleError.wrongUser) { try KeyBundle.decode(bundle.encoded(), for: "bob") }
    }

    /// Rewrites one JSON field of a valid bundle.
    func altered(_ field: String, _ value: Any) throws -> [UInt8] {
        let bundle = KeyBundle(uid: "alice", identity: identity, mailboxKey: mailbox.publicKey)
        var object = try JSONSerialization.jsonObject(with: Data(bundle.encoded())) as! [String: Any]
        object[field] = value
        return Array(try JSONSerialization.data(withJSONObject: object))
    }

    @Test func refusesEveryAlteredField() throws {
        #expect(throws: KeyBundleError.badSignature) { try KeyBundle.decode(try altered("mailbox_key", Base64URL.encode(MailboxKeyPair().publicKey.bytes))) }
        #expect(throws: KeyBundleError.badSignature) { try KeyBundle.decode(try altered("identity_key", Base64URL.encode(IdentityKeyPair().publicKey.bytes))) }
        #expect(throws: KeyBundleError.badSignature) { try KeyBundle.decode(try altered("uid", "mallory")) }
        #expect(throws: KeyBundleError.badSignature) { try KeyBundle.decode(try altered("created_at", "2020-01-01T00:00:00Z")) }
        #expect(throws: KeyBundleError.invalidUID) { try KeyBundle.decode(try altered("uid", "a/b")) }
        #expect(throws: KeyBundleError.malformed("unknown version 3")) { try KeyBundle.decode(try altered("version", 3)) }
        #expect(throws: KeyBundleError.malformed("a version 2 bundle needs a signed prekey")) { try KeyBundle.decode(try altered("version", 2)) }
        #expect(throws: KeyBundleError.malformed("created_at is not an RFC 3339 time")) { try KeyBundle.decode(try altered("created_at", "yesterday")) }
        #expect(throws: KeyBundleError.malformed("not a key bundle in JSON")) { try KeyBundle.decode(try altered("signature", "AAAA")) }
        #expect(throws: KeyBundleError.malformed("not a key bundle in JSON")) { try KeyBundle.decode(try altered("mailbox_key", 5)) }
        #expect(throws: KeyBundleError.malformed("not a key bundle in JSON")) { try KeyBundle.decode(Array("[]".utf8)) }
    }

    @Test func refusesALowOrderMailboxKey() throws {
        let zero = try #require(MailboxPublicKey(bytes: [UInt8](repeating: 0, count: 32)))
        let bundle = KeyBundle(uid: "alice", identity: identity, mailboxKey: zero)
        #expect(throws: KeyBundleError.malformed("mailbox_key is a low-order point")) { try KeyBundle.decode(bundle.encoded()) }
    }

    @Test func aBundleSignedByAnotherKeyIsRefused() throws {
        let mallory = IdentityKeyPair()
        let forged = KeyBundle(uid: "alice", identity: mallory, mailboxKey: mailbox.publicKey)
        // Valid on its own (self-signed), so pinning is what protects a known contact…
        #expect(throws: Never.self) { try forged.verify(for: "alice") }
        #expect(forged.identityKey != identity.publicKey)
        // …and a signature swapped in from another bundle never verifies.
        var object = try JSONSerialization.jsonObject(with: Data(forged.encoded())) as! [String: Any]
        object["identity_key"] = Base64URL.encode(identity.publicKey.bytes)
        #expect(throws: KeyBundleError.badSignature) { try KeyBundle.decode(Array(try JSONSerialization.data(withJSONObject: object))) }
    }
}

@Suite struct SafetyNumberTests {
    @Test func bothSidesComputeTheSameNumber() {
        let a = (uid: "alice", identityKey: IdentityKeyPair().publicKey)
        let b = (uid: "bob", identityKey: IdentityKeyPair().publicKey)
        let number = SafetyNumber.of(a, b)
        #expect(number == SafetyNumber.of(b, a))
        #expect(number.count == 12)
        #expect(number.allSatisfy { $0.count == 5 && $0.allSatisfy(\.isNumber) })
        #expect(SafetyNumber.display(number).split(separator: "\n").count == 3)
    }

    @Test func changesWithEitherKeyOrUID() {
        let key = IdentityKeyPair().publicKey, other = IdentityKeyPair().publicKey
        let base = SafetyNumber.of(("alice", key), ("bob", other))
        #expect(SafetyNumber.of(("alice", IdentityKeyPair().publicKey), ("bob", other)) != base)
        #expect(SafetyNumber.of(("alice", key), ("bob", IdentityKeyPair().publicKey)) != base)
        #expect(SafetyNumber.of(("alice2", key), ("bob", other)) != base)
        #expect(SafetyNumber.fingerprint(uid: "alice", identityKey: key) == SafetyNumber.fingerprint(uid: "alice", identityKey: key))
    }
}
