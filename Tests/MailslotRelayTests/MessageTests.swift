import Foundation
import MailslotTestSupport
import Testing
@testable import MailslotRelay
import MailslotWire

/// Creating, reading, listing, leasing and expiring messages, and every limit on them.
@Suite struct MessageTests {
    @Test func createIsIdempotentAndConflictsAre409() async throws {
        try await withTestRelay { relay in
            let alice = try await relay.signIn("alice").session
            let carol = try await relay.signIn("carol").session
            let bob = try await relay.signIn("bob").session
            let envelope = randomBytes(512)
            let first = try await relay.send(alice, to: "bob", id: messageID(1), envelope: envelope)
            #expect(first.status == 201)
            #expect(first.json["size"] as? Int == 512)
            #expect(first.json["seq"] == nil && first.json["envelope"] == nil, "a sender learns nothing of the mailbox")
            let retry = try await relay.send(alice, to: "bob", id: messageID(1), envelope: envelope)
            #expect(retry.status == 200)
            #expect(retry.json["created_at"] as? String == first.json["created_at"] as? String)
            let otherBody = try await relay.send(alice, to: "bob", id: messageID(1), envelope: randomBytes(512))
            #expect(otherBody.status == 409)
            #expect(otherBody.problem == .conflict)
            #expect(try await relay.send(carol, to: "bob", id: messageID(1), envelope: envelope).status == 409, "same bytes, other author")
            // The same id in another mailbox is another message.
            #expect(try await relay.send(alice, to: "carol", id: messageID(1), envelope: envelope).status == 201)
            let stored = try await relay.call("GET", "/v1/users/bob/messages/\(messageID(1))", session: bob)
            #expect(stored.json["envelope"] as? String == Base64URL.encode(envelope), "nothing already stored was changed")
        }
    }

    @Test func badInputGetsItsOwnCode() async throws {
        try await withTestRelay { relay in
            let alice = try await relay.signIn("alice").session
            let path = "/v1/users/bob/messages/\(messageID(1))"
            let cases: [(String, Any, String, Int)] = [
                (path, ["envelope": "not base64!"], "invalid_envelope", 400),
                (path, ["envelope": ""], "invalid_envelope", 400),
                (path, ["envelope": Base64URL.encode(randomBytes(64)), "ttl_seconds": 0], "invalid_ttl", 400),
                (path, ["envelope": Base64URL.encode(randomBytes(64)), "ttl_seconds": 31 * 86400], "invalid_ttl", 400),
                (path, ["envelop": "AAAA"], "invalid_json", 400),
                (path, "[1,2", "invalid_json", 400),
                (path, #"{"envelope":"AAAA","envelope":"BBBB"}"#, "invalid_json", 400),
                (path, String(repeating: "[", count: 40) + String(repeating: "]", count: 40), "invalid_json", 400),
                // A number literal that traps Foundation's JSONDecoder: refused before it is parsed.
                (path, #"{"envelope":"AAAA","ttl_seconds":90071992547409930"# + String(repeating: "0", count: 150) + "e-151}", "invalid_json", 400),
                ("/v1/users/bob/messages/short", ["envelope": "AAAA"], "invalid_message_id", 400),
                ("/v1/users/b%2Fob/messages/\(messageID(1))", ["envelope": "AAAA"], "invalid_uid", 400),
                ("/v1/users/%2E%2E/messages/\(messageID(1))", ["envelope": "AAAA"], "invalid_uid", 400),
                ("/v1/users/\(String(repeating: "u", count: 129))/messages/\(messageID(1))", ["envelope": "AAAA"], "invalid_uid", 400),
                (path, ["envelope": Base64URL.encode(randomBytes(65 * 1024))], "envelope_too_large", 413),
                (path, ["envelope": Base64URL.encode(randomBytes(600))], "invalid_envelope", 400),
                (path, ["envelope": Base64URL.encode(randomBytes(256))], "invalid_envelope", 400),
            ]
            for (target, body, code, status) in cases {
                let answer = try await relay.call("PUT", target, session: alice, body: body)
                #expect(answer.status == status, "\(code): \(String(decoding: answer.body.prefix(200), as: UTF8.self))")
                #expect(answer.code == code, "\(target) \(code)")
                #expect(answer.headers["content-type"] == "application/problem+json")
            }
            let xml = try await relay.call("PUT", path, session: alice, body: "<envelope/>", headers: ["Content-Type": "application/xml"])
            #expect(xml.status == 415)
            #expect(xml.problem == .unsupportedMediaType)
            let huge = try await relay.call("PUT", path, session: alice, body: Data(repeating: 0x41, count: 200 * 1024))
            #expect(huge.status == 413)
            #expect(huge.problem == .bodyTooLarge)
            let bob = try await relay.signIn("bob").session
            let list = try await relay.call("GET", "/v1/users/bob/messages", session: bob)
            #expect((list.json["messages"] as? [Any])?.isEmpty == true, "no refused request stored anything")
        }
    }

    @Test func listingPagesOldestFirst() async throws {
        try await withTestRelay { relay in
            let alice = try await relay.signIn("alice").session
            let bob = try await relay.signIn("bob").session
            for n in 0..<7 { #expect(try await relay.send(alice, to: "bob", id: messageID(100 - n)).status == 201) }
            var ids: [String] = []
            var cursor: String?
            repeat {
                let page = try await relay.call("GET", "/v1/users/bob/messages?limit=3" + (cursor.map { "&after=\($0)" } ?? ""), session: bob)
                #expect(page.status == 200)
                let messages = try #require(page.json["messages"] as? [[String: Any]])
                #expect(messages.count <= 3)
                #expect(messages.allSatisfy { $0["envelope"] is String })
                ids += messages.compactMap { $0["id"] as? String }
                cursor = page.json["next"] as? String
            } while cursor != nil
            #expect(ids == (0..<7).map { messageID(100 - $0) }, "in the order they were stored")
            let last = try await relay.call("GET", "/v1/users/bob/messages?limit=100", session: bob)
            #expect(last.json.keys.contains("next") && last.json["next"] is NSNull, "next is null at the end")
            #expect(try await relay.call("GET", "/v1/users/bob/messages?after=x", session: bob).problem == .invalidCursor)
            #expect(try await relay.call("GET", "/v1/users/bob/messages?limit=0", session: bob).problem == .badRequest)
            #expect(try await relay.call("GET", "/v1/users/bob/messages?limit=501", session: bob).problem == .badRequest)
        }
    }

    @Test func ownerLeasesAMessageWithoutTouchingItsEnvelope() async throws {
        try await withTestRelay { relay in
            let alice = try await relay.signIn("alice").session
            let bob = try await relay.signIn("bob").session
            let envelope = randomBytes(512)
            try await relay.send(alice, to: "bob", id: messageID(1), envelope: envelope)
            let path = "/v1/users/bob/messages/\(messageID(1))"
            let leased = try await relay.call("PATCH", path, session: bob, body: ["lease_seconds": 60, "lease_holder": "worker-1"])
            #expect(leased.status == 200)
            #expect(leased.json["lease_holder"] as? String == "worker-1")
            #expect(leased.json["lease_until"] is String)
            #expect(leased.json["envelope"] as? String == Base64URL.encode(envelope))
            let taken = try await relay.call("PATCH", path, session: bob, body: ["lease_seconds": 60, "lease_holder": "worker-2"])
            #expect(taken.status == 409, "another worker cannot take a running lease")
            #expect(taken.problem == .conflict)
            let released = try await relay.call("PATCH", path, session: bob, body: ["lease_seconds": 0, "lease_holder": "worker-1"])
            #expect(released.json["lease_until"] == nil)
            #expect(try await relay.call("PATCH", path, session: bob, body: ["lease_seconds": 60, "lease_holder": "worker-2"]).status == 200,
                    "free again once released")
            #expect(try await relay.call("PATCH", path, session: bob, body: ["lease_seconds": 7200]).problem == .invalidLease)
            #expect(try await relay.call("PATCH", path, session: bob, body: ["envelope": "AAAA"]).problem == .invalidLease)
            #expect(try await relay.call("PATCH", "/v1/users/bob/messages/\(messageID(2))", session: bob, body: ["lease_seconds": 5]).status == 404)
        }
    }

    @Test func expiredMessagesVanishAndAreSwept() async throws {
        let clock = TestClock()
        try await withTestRelay(configure: { $0.sweepInterval = 0.2; $0.clock = clock.relayClock }) { relay in
            let alice = try await relay.signIn("alice").session
            let bob = try await relay.signIn("bob").session
            let created = try await relay.send(alice, to: "bob", id: messageID(1), ttl: 1)
            #expect(created.status == 201)
            #expect(created.json["expires_at"] as? String != nil)
            #expect(try await relay.send(alice, to: "bob", id: messageID(2)).status == 201)
            // Past the expiry; then a sweep after it, however busy the machine is.
            clock.advance(by: .seconds(1))
            try await eventually(within: .seconds(20), "the sweeper erased the expired row; the other stays") {
                try await relay.sqlite.pool.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM messages") } == 1
            }
            #expect(try await relay.call("GET", "/v1/users/bob/messages/\(messageID(1))", session: bob).status == 404)
            // An expired id can be used again.
            #expect(try await relay.send(alice, to: "bob", id: messageID(1)).status == 201)
        }
    }

    @Test func aFullMailboxRefusesAndLosesNothing() async throws {
        try await withTestRelay(configure: { $0.maxPendingPerMailbox = 3 }) { relay in
            let alice = try await relay.signIn("alice").session
            let bob = try await relay.signIn("bob").session
            for n in 0..<3 { #expect(try await relay.send(alice, to: "bob", id: messageID(n)).status == 201) }
            let full = try await relay.send(alice, to: "bob", id: messageID(3))
            #expect(full.status == 429)
            #expect(full.problem == .mailboxFull)
            #expect(try await relay.call("DELETE", "/v1/users/bob/messages/\(messageID(0))", session: bob).status == 204)
            #expect(try await relay.send(alice, to: "bob", id: messageID(3)).status == 201)
            #expect(try await relay.call("GET", "/v1/users/bob/messages", session: bob).json["messages"].map { ($0 as! [Any]).count } == 3)
        }
    }

    @Test func aFloodFromOneAuthorMeets429WithRetryAfter() async throws {
        // A small bucket, so the flood outruns the refill even on a slow, busy machine.
        try await withTestRelay(configure: { $0.createRate = 10; $0.createBurst = 100 }) { relay in
            let alice = try await relay.signIn("alice").session
            let carol = try await relay.signIn("carol").session
            var created = 0, limited = 0
            var retryAfter: String?
            let started = ContinuousClock.now
            try await withThrowingTaskGroup(of: TestRelay.Answer.self) { group in
                for n in 0..<400 {
                    if n >= 16 { let answer = try await group.next()!; if answer.status == 201 { created += 1 } else if answer.status == 429 { limited += 1; retryAfter = answer.headers["retry-after"] } }
                    group.addTask { try await relay.send(alice, to: "flood-\(n % 50)", id: messageID(n), envelope: randomBytes(512)) }
                }
                for try await answer in group {
                    if answer.status == 201 { created += 1 } else if answer.status == 429 { limited += 1; retryAfter = answer.headers["retry-after"] }
                }
            }
            let seconds = Double((ContinuousClock.now - started).components.seconds) + 1
            #expect(limited > 0, "the flood met the limit")
            #expect(created + limited == 400)
            #expect(Double(created) <= 100 + 10 * seconds, "no more than the burst plus the refill")
            #expect(Int(retryAfter ?? "") ?? 0 >= 1)
            // Another author is not affected.
            #expect(try await relay.send(carol, to: "bob", id: messageID(5000)).status == 201)
        }
    }

    @Test func blockedAuthorsAreRefusedAndUnblockingRestores() async throws {
        try await withTestRelay { relay in
            let alice = try await relay.signIn("alice").session
            let bob = try await relay.signIn("bob").session
            #expect(try await relay.send(alice, to: "bob", id: messageID(1)).status == 201)
            #expect(try await relay.call("PUT", "/v1/users/bob/blocked/alice", session: bob).status == 204)
            let refused = try await relay.send(alice, to: "bob", id: messageID(2))
            #expect(refused.status == 403)
            #expect(refused.problem == .blocked)
            #expect(try await relay.call("GET", "/v1/users/bob/messages/\(messageID(1))", session: bob).status == 200, "earlier messages stay")
            #expect(try await relay.call("GET", "/v1/users/bob/blocked", session: bob).json["blocked"] as? [String] == ["alice"])
            #expect(try await relay.call("GET", "/v1/users/bob/blocked", session: alice).status == 403)
            #expect(try await relay.call("DELETE", "/v1/users/bob/blocked/alice", session: bob).status == 204)
            #expect(try await relay.call("DELETE", "/v1/users/bob/blocked/alice", session: bob).status == 404)
            #expect(try await relay.send(alice, to: "bob", id: messageID(2)).status == 201)
        }
    }

    @Test func documentsAndKeyBundlesAreCheckedAndReturnedAsStored() async throws {
        try await withTestRelay { relay in
            let bob = try await relay.signIn("bob").session
            let alice = try await relay.signIn("alice").session
            #expect(try await relay.call("GET", "/v1/users/bob", session: bob).status == 404)
            #expect(try await relay.call("PUT", "/v1/users/bob", session: bob, body: "[1]").problem == .invalidDocument)
            #expect(try await relay.call("PUT", "/v1/users/bob", session: bob, body: Data(repeating: 0x20, count: 20_000)).problem == .bodyTooLarge)
            #expect(try await relay.call("PUT", "/v1/users/bob", session: bob, body: #"{"b":1,"a":[true]}"#).status == 204)
            #expect(String(decoding: try await relay.call("GET", "/v1/users/bob", session: bob).body, as: UTF8.self) == #"{"b":1,"a":[true]}"#)

            #expect(try await relay.call("GET", "/v1/users/bob/keys", session: alice).status == 404)
            let identity = IdentityKeyPair()
            let forAlice = KeyBundle(uid: "alice", identity: identity, mailboxKey: MailboxKeyPair().publicKey)
            let wrongUser = try await relay.call("PUT", "/v1/users/bob/keys", session: bob, body: Data(forAlice.encoded()))
            #expect(wrongUser.problem == .invalidKeyBundle)
            #expect((wrongUser.json["detail"] as? String)?.contains("bundle_wrong_user") == true)
            var tampered = try JSONSerialization.jsonObject(with: Data(KeyBundle(uid: "bob", identity: identity, mailboxKey: MailboxKeyPair().publicKey).encoded())) as! [String: Any]
            tampered["mailbox_key"] = Base64URL.encode(MailboxKeyPair().publicKey.bytes)
            #expect(try await relay.call("PUT", "/v1/users/bob/keys", session: bob, body: tampered).problem == .invalidKeyBundle)
            let bundle = KeyBundle(uid: "bob", identity: identity, mailboxKey: MailboxKeyPair().publicKey)
            #expect(try await relay.call("PUT", "/v1/users/bob/keys", session: bob, body: Data(bundle.encoded())).status == 204)
            let fetched = try await relay.call("GET", "/v1/users/bob/keys", session: alice)
            #expect(try KeyBundle.decode(Array(fetched.body), for: "bob") == bundle)
            #expect(try await relay.call("DELETE", "/v1/users/bob/keys", session: alice).status == 403)
            #expect(try await relay.call("DELETE", "/v1/users/bob/keys", session: bob).status == 204)
            #expect(try await relay.call("GET", "/v1/users/bob/keys", session: alice).status == 404)
            #expect(try await relay.call("DELETE", "/v1/users/bob", session: alice).status == 403)
            #expect(try await relay.call("DELETE", "/v1/users/bob", session: bob).status == 204)
            #expect(try await relay.call("GET", "/v1/users/bob", session: bob).status == 404)
        }
    }
}
