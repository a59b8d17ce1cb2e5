import Foundation
import MailslotTestSupport
import MailslotWire
import Testing
@testable import MailslotRelay

/// One send to many (spec/protocol.md §4.25): `POST /v1/messages` and the socket's `send_many`,
/// one result per entry in entry order, each what the single create would have answered.
@Suite struct BatchTests {
    /// The backends the HTTP-level limits and per-entry results run on: SQLite, and PostgreSQL
    /// when this run has a cluster (`tools/postgres run -- swift test --filter BatchTests`).
    static let stores: [TestStore] = TestDatabase.unavailable == nil ? [.sqlite, .postgres] : [.sqlite]

    static func entry(_ to: String, _ id: String, envelope: [UInt8]? = nil, keyID: String? = nil) -> [String: Any] {
        var entry: [String: Any] = ["to": to, "id": id, "envelope": Base64URL.encode(envelope ?? randomBytes(512))]
        if let keyID { entry["key_id"] = keyID }
        return entry
    }

    static func post(_ relay: TestRelay, _ session: String, _ entries: [[String: Any]], ttl: Int64? = nil) async throws -> TestRelay.Answer {
        var body: [String: Any] = ["entries": entries]
        if let ttl { body["ttl_seconds"] = ttl }
        return try await relay.call("POST", "/v1/messages", session: session, body: body)
    }

    static func results(_ answer: TestRelay.Answer) throws -> [BatchResult] {
        guard answer.status == 200 else { throw TestRelayError("send to many: \(answer.summary) \(answer.text)") }
        return try answer.decoded(BatchResponse.self).results
    }

    /// Publishes a fresh bundle for `uid`; its key id.
    static func publish(_ relay: TestRelay, _ uid: String, session: String) async throws -> String {
        let bundle = KeyBundle(uid: uid, identity: IdentityKeyPair(), mailboxKey: MailboxKeyPair().publicKey)
        #expect(try await relay.call("PUT", "/v1/users/\(uid)/keys", session: session, body: Data(bundle.encoded())).status == 204)
        return bundle.keyID
    }

    @Test(arguments: stores) func eachEntryGetsTheSingleCreatesAnswerAndOneRefusalStopsNoOther(store: TestStore) async throws {
        try await withTestRelay(store: store, configure: { $0.maxPendingPerMailbox = 1 }) { relay in
            let alice = try await relay.signIn("alice").session, mallory = try await relay.signIn("mallory").session
            let carol = try await relay.signIn("carol").session, dave = try await relay.signIn("dave").session
            // carol blocked alice; dave's keys moved on; erin's mailbox is full; frank holds the
            // same message already (a retry); gina's id is taken by mallory.
            #expect(try await relay.call("PUT", "/v1/users/carol/blocked/alice", session: carol).status == 204)
            let old = try await Self.publish(relay, "dave", session: dave)
            _ = try await Self.publish(relay, "dave", session: dave)
            #expect(try await relay.send(mallory, to: "erin", id: messageID(1)).status == 201)
            let envelope = randomBytes(512)
            let id = messageID(7)
            #expect(try await relay.send(alice, to: "frank", id: id, envelope: envelope).status == 201)
            #expect(try await relay.send(mallory, to: "gina", id: id).status == 201)

            let entries = [
                Self.entry("bob", id, envelope: envelope), Self.entry("carol", id, envelope: envelope),
                Self.entry("dave", id, envelope: envelope, keyID: old), Self.entry("erin", id, envelope: envelope),
                Self.entry("frank", id, envelope: envelope), Self.entry("gina", id, envelope: envelope),
                Self.entry("harry", id, envelope: envelope), Self.entry("bad uid", id, envelope: envelope),
                Self.entry("ivan", "short"), Self.entry("judy", id, envelope: randomBytes(700)),
                Self.entry("kate", id, envelope: envelope, keyID: "not-a-key-id"), Self.entry("alice", id, envelope: envelope),
            ]
            let results = try Self.results(try await Self.post(relay, alice, entries))
            #expect(results.map(\.to) == entries.map { $0["to"] as! String }, "one result per entry, in entry order")
            #expect(results[0].created == true && results[0].message?.author == "alice" && results[0].message?.seq == nil)
            #expect(results[1].problem?.code == .blocked && results[1].problem?.status == 403)
            #expect(results[2].problem?.code == .staleKeys)
            #expect(results[3].problem?.code == .mailboxFull)
            #expect(results[4].created == false, "an identical retry")
            #expect(results[5].problem?.code == .conflict)
            #expect(results[6].created == true)
            #expect(results[7].problem?.code == .invalidUID)
            #expect(results[8].problem?.code == .invalidMessageID)
            #expect(results[9].problem?.code == .invalidEnvelope)
            #expect(results[10].problem?.code == .invalidKeyID)
            #expect(results[11].created == true && results[11].message?.seq != nil && results[11].message?.envelope != nil,
                    "to one's own mailbox: the owner's view, as the single create answers")
            for (uid, stored) in [("bob", true), ("carol", false), ("dave", false), ("harry", true)] {
                let session = try await relay.signIn(uid).session
                #expect((try await relay.call("GET", "/v1/users/\(uid)/messages/\(id)", session: session).status == 200) == stored, "\(uid)")
            }
        }
    }

    @Test(arguments: stores) func theWholeRequestIsRefusedOnlyForItsShape(store: TestStore) async throws {
        try await withTestRelay(store: store, configure: { $0.maxBatchEntries = 3; $0.createBurst = 3 }) { relay in
            let alice = try await relay.signIn("alice").session
            let id = messageID(1)
            let none = try await Self.post(relay, alice, [])
            #expect(none.status == 400 && none.problem == .invalidEntries)
            let many = try await Self.post(relay, alice, (0..<4).map { Self.entry("u\($0)", id) })
            #expect(many.status == 400 && many.problem == .invalidEntries)
            let repeated = try await Self.post(relay, alice, [Self.entry("bob", id), Self.entry("carol", id), Self.entry("bob", id)])
            #expect(repeated.status == 400 && repeated.problem == .invalidEntries)
            let ttl = try await Self.post(relay, alice, [Self.entry("bob", id)], ttl: 0)
            #expect(ttl.status == 400 && ttl.problem == .invalidTTL)
            for body: Any in [["entries": [["to": "bob", "id": id]]], ["entries": ["bob"]], ["entries": [["to": 5, "id": id, "envelope": "x"]]],
                              ["entries": "bob"], "[1]"] {
                let answer = try await relay.call("POST", "/v1/messages", session: alice, body: body)
                #expect(answer.status == 400 && answer.problem == .invalidJSON, "\(body)")
            }
            let text = try await relay.call("POST", "/v1/messages", session: alice, body: "{}", headers: ["Content-Type": "text/plain"])
            #expect(text.status == 415)
            #expect(try await relay.call("POST", "/v1/messages", body: ["entries": [Self.entry("bob", id)]]).status == 401)
            // Nothing of the refused requests was stored, and they took no token: the three go.
            let bob = try await relay.signIn("bob").session
            #expect(try await relay.call("GET", "/v1/users/bob/messages", session: bob).json["messages"].map { ($0 as? [Any])?.count } == 0)
            let results = try Self.results(try await Self.post(relay, alice, (0..<3).map { Self.entry("u\($0)", id) }))
            #expect(results.allSatisfy { $0.created == true })
        }
    }

    /// The default bound (`--max-batch-entries` 1,000): 1,001 entries are `invalid_entries` and
    /// nothing of them is stored; 1,000 go in one request.
    @Test(arguments: stores) func aThousandAndOneEntriesAreRefusedAThousandGo(store: TestStore) async throws {
        try await withTestRelay(store: store) { relay in
            let alice = try await relay.signIn("alice").session
            let id = messageID(1)
            let entries = (0..<1_001).map { Self.entry("u\($0)", id) }
            let over = try await Self.post(relay, alice, entries)
            #expect(over.status == 400 && over.problem == .invalidEntries)
            // The same entries again, but 1,000: all created (none an identical retry), so the
            // refused request stored nothing.
            let results = try Self.results(try await Self.post(relay, alice, Array(entries.prefix(1_000))))
            #expect(results.count == 1_000 && results.allSatisfy { $0.created == true }, "\(Set(results.compactMap { $0.problem?.code.rawValue }))")
        }
    }

    @Test(arguments: stores) func aBodyOverTheBatchLimitIs413(store: TestStore) async throws {
        try await withTestRelay(store: store, configure: { $0.maxBatchBytes = RelayConfiguration.minBatchBytes }) { relay in
            let alice = try await relay.signIn("alice").session
            // 64 KiB envelopes (87,382 characters each): 13 of them pass 1 MiB of body, 11 fit.
            let entries = (0..<13).map { Self.entry("u\($0)", messageID(1), envelope: randomBytes(64 * 1024)) }
            let answer = try await Self.post(relay, alice, entries)
            #expect(answer.status == 413 && answer.problem == .bodyTooLarge)
            let fits = try Self.results(try await Self.post(relay, alice, Array(entries.prefix(11))))
            #expect(fits.count == 11 && fits.allSatisfy { $0.created == true }, "a body within the limit, far over a single create's")
            #expect(relay.relay.mailboxes.batchBudget.available == relay.relay.mailboxes.batchBudget.capacity, "the budget is given back")
        }
    }

    @Test func limitsCountRecipientsAndTheTailIsRateLimited() async throws {
        // A slow refill: the bucket holds 5, and nothing comes back within the test.
        try await withTestRelay(configure: { $0.createRate = 0.01; $0.createBurst = 5 }) { relay in
            let alice = try await relay.signIn("alice").session
            let id = messageID(1)
            let entries = (0..<8).map { Self.entry("member-\($0)", id) }
            let first = try Self.results(try await Self.post(relay, alice, entries))
            #expect(first.prefix(5).allSatisfy { $0.created == true }, "the head is stored")
            let tail = first.suffix(3).compactMap(\.problem)
            #expect(tail.map(\.code) == [.rateLimited, .rateLimited, .rateLimited], "the tail is rate limited")
            // Each entry's wait covers it and the ones before it: 1, 2, 3 tokens at 0.01 a second.
            #expect(tail.compactMap(\.retryAfter) == [100, 200, 300])
            // The whole batch again: the stored head answers as identical retries (no token
            // taken: refunded), the tail is still limited.
            let again = try Self.results(try await Self.post(relay, alice, entries))
            #expect(again.prefix(5).allSatisfy { $0.created == false })
            #expect(again.suffix(3).allSatisfy { $0.problem?.code == .rateLimited })
            // A single create is limited by the same bucket.
            #expect(try await relay.send(alice, to: "bob", id: messageID(2)).problem == .rateLimited)
        }
    }

    @Test func theAuthorQuotaCountsTheEntriesInOrder() async throws {
        try await withTestRelay(configure: { $0.maxAuthorBytes = 3 * 1024; $0.maxEnvelopeBytes = 1024 }) { relay in
            let alice = try await relay.signIn("alice").session
            let results = try Self.results(try await Self.post(relay, alice, (0..<5).map { Self.entry("m\($0)", messageID(1), envelope: randomBytes(1024)) }))
            #expect(results.map { $0.created == true } == [true, true, true, false, false])
            #expect(results.suffix(2).allSatisfy { $0.problem?.code == .authorQuota && $0.problem?.retryAfter != nil })
        }
    }

    @Test func entriesToOneMailboxArriveInEntryOrderAndSubscribersGetThem() async throws {
        try await withTestRelay { relay in
            let alice = try await relay.signIn("alice").session, bob = try await relay.signIn("bob").session
            let socket = try await TestSocket.subscribed(relay, "bob", session: bob)
            defer { Task { await socket.close() } }
            let ids = (1...4).map { messageID($0) }
            let results = try Self.results(try await Self.post(relay, alice, ids.map { Self.entry("bob", $0) } + [Self.entry("carol", ids[0])]))
            #expect(results.allSatisfy { $0.created == true })
            var delivered: [String] = []
            while delivered.count < 4, let frame = try await socket.next(), case .message(let record) = frame { delivered.append(record.id) }
            #expect(delivered == ids, "delivered live, in entry order")
            let page = try await relay.call("GET", "/v1/users/bob/messages", session: bob).decoded(MessagePage.self)
            #expect(page.messages.map(\.id) == ids)
        }
    }

    @Test func sendManyOnTheSocketIsTheSameEntryPoint() async throws {
        try await withTestRelay { relay in
            let alice = try await relay.signIn("alice").session, carol = try await relay.signIn("carol").session
            #expect(try await relay.call("PUT", "/v1/users/carol/blocked/alice", session: carol).status == 204)
            let socket = try await TestSocket.subscribed(relay, "alice", session: alice)
            defer { Task { await socket.close() } }
            let id = messageID(3)
            let entries = [BatchEntry(to: "bob", id: id, envelope: randomBytes(512)), BatchEntry(to: "carol", id: id, envelope: randomBytes(512))]
            try await socket.send(.sendMany(SendManyFrame(ref: "r1", entries: entries, ttlSeconds: 60, wake: false)))
            guard case .sentMany(let ref, let results) = try await socket.next() else { Issue.record("no sent_many"); return }
            #expect(ref == "r1" && BatchResponse.results(results, answer: entries))
            #expect(results[0].created == true && results[1].problem?.code == .blocked)
            // The whole frame refused: an error with its ref.
            try await socket.send(.sendMany(SendManyFrame(ref: "r2", entries: [])))
            guard case .error(let problem, let errorRef, _) = try await socket.next() else { Issue.record("no error"); return }
            #expect(problem.code == .invalidEntries && errorRef == "r2")
            try await socket.send(.sendMany(SendManyFrame(ref: nil, entries: entries)))
            #expect(try await socket.next()?.problem?.code == .badRequest, "a send_many needs a ref")
        }
    }

    @Test func theBatchBudgetMakesReadersWaitNeverFails() async throws {
        let budget = BatchBudget(capacity: 10)
        let first = try await budget.reserve(6)
        let second = try await budget.reserve(4)
        #expect(budget.available == 0)
        let waiting = Task { try await budget.reserve(5) }
        try await eventually("the third reader waits") { budget.waiting == 1 }
        #expect(budget.available == 0, "nothing is reserved for a reader that waits")
        first.release()
        let third = try await waiting.value
        #expect(budget.available == 1)
        // A waiter whose task is cancelled leaves the queue and holds nothing.
        let cancelled = Task { try await budget.reserve(10) }
        try await eventually("the reader waits") { budget.waiting == 1 }
        cancelled.cancel()
        await #expect(throws: CancellationError.self) { try await cancelled.value }
        #expect(budget.waiting == 0, "a cancelled reader leaves the queue")
        second.release()
        third.release()
        #expect(budget.available == 10)
        _ = try await budget.reserve(99)  // more than the whole budget takes the whole budget
        #expect(budget.available == 10, "a dropped reservation gives its bytes back")
    }
}
