import Foundation
import GRDB
import MailslotTestSupport
import MailslotWire
import Testing
@testable import MailslotRelay

/// A create may name the recipient keys its envelope was sealed to (`key_id`); the relay refuses
/// it with `409 stale_keys` once the recipient has published other keys (spec/protocol.md).
@Suite struct KeyChangeRelayTests {
    /// Publishes a fresh bundle for `uid` and returns it.
    func publish(_ relay: TestRelay, _ uid: String, session: String, identity: IdentityKeyPair = IdentityKeyPair()) async throws -> KeyBundle {
        let bundle = KeyBundle(uid: uid, identity: identity, mailboxKey: MailboxKeyPair().publicKey)
        #expect(try await relay.call("PUT", "/v1/users/\(uid)/keys", session: session, body: Data(bundle.encoded())).status == 204)
        return bundle
    }

    func send(_ relay: TestRelay, _ session: String, to recipient: String, id: String, envelope: [UInt8], keyID: Any?) async throws -> TestRelay.Answer {
        var body: [String: Any] = ["envelope": Base64URL.encode(envelope)]
        if let keyID { body["key_id"] = keyID }
        return try await relay.call("PUT", "/v1/users/\(recipient)/messages/\(id)", session: session, body: body)
    }

    @Test func aCreateNamingStaleKeysIsRefusedAndOneNamingTheCurrentOnesIsStored() async throws {
        try await withTestRelay { relay in
            let alice = try await relay.signIn("alice").session, bob = try await relay.signIn("bob").session
            let identity = IdentityKeyPair()
            let old = try await publish(relay, "bob", session: bob, identity: identity)
            let envelope = randomBytes(512)
            #expect(try await send(relay, alice, to: "bob", id: messageID(1), envelope: envelope, keyID: old.keyID).status == 201)

            // Bob rotates his mailbox key: the old key id is stale, the message already stored stays.
            let new = try await publish(relay, "bob", session: bob, identity: identity)
            let stale = try await send(relay, alice, to: "bob", id: messageID(2), envelope: randomBytes(512), keyID: old.keyID)
            #expect(stale.status == 409)
            #expect(stale.code == "stale_keys")
            #expect(try await send(relay, alice, to: "bob", id: messageID(2), envelope: randomBytes(512), keyID: new.keyID).status == 201)

            // An identical retry of what was stored under the old keys is still answered as stored.
            #expect(try await send(relay, alice, to: "bob", id: messageID(1), envelope: envelope, keyID: old.keyID).status == 200)
            // No key id: not checked (older clients, and senders that do not pin).
            #expect(try await send(relay, alice, to: "bob", id: messageID(3), envelope: randomBytes(512), keyID: nil).status == 201)
            // Re-publishing the same keys (a new created_at) keeps the key id.
            let republished = KeyBundle(uid: "bob", identity: identity, mailboxKey: new.mailboxKey,
                                        createdAt: Date().addingTimeInterval(60))
            #expect(try await relay.call("PUT", "/v1/users/bob/keys", session: bob, body: Data(republished.encoded())).status == 204)
            #expect(try await send(relay, alice, to: "bob", id: messageID(4), envelope: randomBytes(512), keyID: new.keyID).status == 201)

            // Keys withdrawn: every key id is stale.
            #expect(try await relay.call("DELETE", "/v1/users/bob/keys", session: bob).status == 204)
            #expect(try await send(relay, alice, to: "bob", id: messageID(5), envelope: randomBytes(512), keyID: new.keyID).code == "stale_keys")
            #expect(try await relay.call("GET", "/v1/users/bob/messages", session: bob).json["messages"].map { ($0 as? [Any])?.count } == 4)
        }
    }

    /// A version 2 bundle's `signed_prekey_id` is stored only in its one form, plain decimal
    /// digits: the same number as `4e9` or `4000000000.0` (which the signature cannot tell apart)
    /// is refused with `invalid_key_bundle`, ending in `bundle_malformed` (spec/envelope.md).
    @Test func aSignedPrekeyIDInAnyFormButPlainDigitsIsRefused() async throws {
        try await withTestRelay { relay in
            let bob = try await relay.signIn("bob").session
            let bundle = KeyBundle(uid: "bob", identity: IdentityKeyPair(), mailboxKey: MailboxKeyPair().publicKey,
                                   signedPrekey: PublishedPrekey(id: 4_000_000_000, key: MailboxKeyPair().publicKey))
            let text = String(decoding: bundle.encoded(), as: UTF8.self)
            #expect(text.contains(#""signed_prekey_id":4000000000,"#))
            func put(_ form: String) async throws -> TestRelay.Answer {
                let body = text.replacingOccurrences(of: #""signed_prekey_id":4000000000,"#, with: #""signed_prekey_id":\#(form),"#)
                return try await relay.call("PUT", "/v1/users/bob/keys", session: bob, body: Data(body.utf8))
            }
            for form in ["4e9", "4E9", "4e+9", "4000000000.0", "4.0e9", "40000000000e-1", "4000000000.000", "-0"] {
                let answer = try await put(form)
                #expect(answer.status == 400 && answer.problem == .invalidKeyBundle, "\(form): \(answer.summary)")
                #expect((answer.json["detail"] as? String)?.hasSuffix(": bundle_malformed") == true, "\(form)")
            }
            #expect(try await relay.call("GET", "/v1/users/bob/keys", session: bob).status == 404, "none of them was stored")
            #expect(try await put("4000000000").status == 204)
            #expect(try await relay.call("GET", "/v1/users/bob/keys", session: bob).text == text)
            #expect(MailboxService.isPlainInteger("0") && MailboxService.isPlainInteger("7") && !MailboxService.isPlainInteger("07")
                    && !MailboxService.isPlainInteger("") && !MailboxService.isPlainInteger(nil) && !MailboxService.isPlainInteger("-1"))
        }
    }

    @Test func aKeyIDOfAnotherFormIsABadRequest() async throws {
        try await withTestRelay { relay in
            let alice = try await relay.signIn("alice").session
            for keyID: Any in ["", "short", String(repeating: "A", count: 23), "AAAAAAAAAAAAAAAAAAAAA+", "AAAAAAAAAAAAAAAAAAAAAB", 7] {
                let answer = try await send(relay, alice, to: "bob", id: messageID(1), envelope: randomBytes(512), keyID: keyID)
                #expect(answer.status == 400, "key_id \(keyID)")
                #expect(answer.code == (keyID is String ? "invalid_key_id" : "invalid_json"), "key_id \(keyID)")
            }
        }
    }

    @Test func aSendFrameNamingStaleKeysIsAnsweredWithAnErrorFrame() async throws {
        try await withTestRelay { relay in
            let alice = try await relay.signIn("alice").session, bob = try await relay.signIn("bob").session
            let identity = IdentityKeyPair()
            let old = try await publish(relay, "bob", session: bob, identity: identity)
            let new = try await publish(relay, "bob", session: bob, identity: identity)
            let socket = try await TestSocket.subscribed(relay, "alice", session: alice)
            try await socket.send(.send(ref: "r1", to: "bob", id: messageID(1), envelope: randomBytes(512), keyID: old.keyID))
            let refused = try #require(try await socket.next())
            #expect(refused.type == "error")
            #expect(refused.ref == "r1")
            #expect(refused.problem?.code == .staleKeys)
            try await socket.send(.send(ref: "r2", to: "bob", id: messageID(1), envelope: randomBytes(512), keyID: new.keyID))
            let sent = try #require(try await socket.next())
            #expect(sent.type == "sent")
            #expect(sent.ref == "r2")
            await socket.close()
        }
    }

    @Test func theMigrationGivesStoredBundlesTheirKeyIDs() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("keyids-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let path = folder.appendingPathComponent("relay.sqlite").path
        let bundle = KeyBundle(uid: "bob", identity: IdentityKeyPair(), mailboxKey: MailboxKeyPair().publicKey)
        do {
            let queue = try DatabaseQueue(path: path)
            try Schema.migrator.migrate(queue, upTo: "v5: author sizes, sessions by uid")
            try await queue.write { db in
                try db.execute(sql: "INSERT INTO key_bundles (uid, bundle, updated_at) VALUES ('bob', ?, 1)", arguments: [Data(bundle.encoded())])
                // A row that does not decode (never stored by a relay, but a migration must not fail on it).
                try db.execute(sql: "INSERT INTO key_bundles (uid, bundle, updated_at) VALUES ('carol', ?, 1)", arguments: [Data("{}".utf8)])
            }
        }
        let store = try SQLiteStore(path: path)
        let limits = CreateLimits(maxPending: 10, maxAuthorBytes: 1 << 20)
        let envelope = Base64URL.encode(randomBytes(512))
        let created = try await store.createMessage(recipient: "bob", id: messageID(1), author: "alice", envelope: envelope, size: 512,
                                                    keyID: bundle.keyID, now: 1_000, expiresAt: 100_000, limits: limits).value
        #expect(created.message.id == messageID(1))
        await #expect(throws: StoreRefusal.staleKeys) {
            try await store.createMessage(recipient: "carol", id: messageID(2), author: "alice", envelope: envelope, size: 512,
                                          keyID: bundle.keyID, now: 1_000, expiresAt: 100_000, limits: limits).value
        }
    }
}
