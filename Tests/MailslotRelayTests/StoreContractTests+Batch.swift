import Foundation
import MailslotTestSupport
import MailslotWire
import Synchronization
import Testing
@testable import MailslotRelay

// The store's part of a send to many (spec/protocol.md §4.25, design groups §4.6), on both
// backends: a unit of creates decided one by one with the single create's refusals, in order, in
// one transaction, each created message published once.
extension StoreContractTests {
    /// Hears what a store publishes.
    final class Published: CommitObserver {
        let changes = Mutex<[CommittedChange]>([])
        func committed(_ change: CommittedChange) { changes.withLock { $0.append(change) } }
        var created: [StoredMessage] {
            changes.withLock { $0.compactMap { if case .created(let message, _) = $0 { message } else { nil } } }
        }
    }

    static func batchCreate(to recipient: String, id: String, author: String = "alice", envelope: String = "envelope", size: Int = 512,
                            keyID: String? = nil, ttl: Int64 = 3_600_000) -> MessageCreate {
        MessageCreate(recipient: recipient, id: id, author: author, envelope: envelope, size: size, keyID: keyID, expiresAt: now + ttl)
    }

    /// The outcomes of a unit of creates, a refusal as its ``StoreRefusal``.
    static func outcomes(_ tickets: [CommitTicket<CreateOutcome>]) async -> [Result<CreateOutcome, StoreRefusal>] {
        var results: [Result<CreateOutcome, StoreRefusal>] = []
        for ticket in tickets {
            do { results.append(.success(try await ticket.value)) } catch let refusal as StoreRefusal {
                results.append(.failure(refusal))
            } catch {
                Issue.record("a create failed: \(error)")
            }
        }
        return results
    }

    @Test(arguments: Backend.available)
    func aUnitOfCreatesDecidesEachAsALoneCreateWould(_ backend: Backend) async throws {
        try await backend.withStore { store in
            // The situation: carol blocked alice, dave's keys moved on, erin's mailbox is full,
            // frank already holds m1 from alice (an identical retry), gina holds m1 from mallory.
            try await store.block(owner: "carol", author: "alice", now: Self.now, limit: 10)
            try await store.putKeyBundle(uid: "dave", bundle: Data("{}".utf8), keyID: "new-key-id-new-key-id0", identityKey: "ik", now: Self.now)
            try await Self.create(store, to: "erin", id: "m0", author: "mallory")
            let retried = try await Self.create(store, to: "frank", id: "m1").message
            try await Self.create(store, to: "gina", id: "m1", author: "mallory")
            let published = Published()
            store.commits.add(published)

            let creates = [
                Self.batchCreate(to: "bob", id: "m1"),
                Self.batchCreate(to: "carol", id: "m1"),
                Self.batchCreate(to: "dave", id: "m1", keyID: "old-key-id-old-key-id0"),
                Self.batchCreate(to: "erin", id: "m1"),
                Self.batchCreate(to: "frank", id: "m1"),
                Self.batchCreate(to: "gina", id: "m1"),
                Self.batchCreate(to: "bob", id: "m2"),
                Self.batchCreate(to: "harry", id: "m1"),
                Self.batchCreate(to: "bob", id: "m3"),
                Self.batchCreate(to: "ivan", id: "m1"),
            ]
            let limits = CreateLimits(maxPending: 1, maxAuthorBytes: 1 << 40)
            let results = await Self.outcomes(store.createMessages(creates, now: Self.now, limits: limits, wake: true))
            try #require(results.count == 10)
            // bob: the first stored; m2 and m3 find the mailbox full (one pending at most).
            guard case .success(.created(let bob1, erasedExpired: false)) = results[0] else { Issue.record("bob m1: \(results[0])"); return }
            #expect(results[1] == .failure(.blocked))
            #expect(results[2] == .failure(.staleKeys))
            #expect(results[3] == .failure(.mailboxFull))
            #expect(results[4] == .success(.duplicate(retried)))
            #expect(results[5] == .failure(.conflict))
            #expect(results[6] == .failure(.mailboxFull), "the unit's own earlier create counts toward the limit")
            guard case .success(.created(let harry, _)) = results[7], case .success(.created(let ivan, _)) = results[9] else {
                Issue.record("harry, ivan: \(results[7]) \(results[9])"); return
            }
            #expect(results[8] == .failure(.mailboxFull))
            #expect(bob1.seq < harry.seq && harry.seq < ivan.seq, "creates are applied in entry order")
            #expect(published.created.map(\.id) == ["m1", "m1", "m1"] && published.created.map(\.recipient) == ["bob", "harry", "ivan"],
                    "each created message is published once, in order; the refused and the retry are not")
            for (recipient, stored) in [("bob", true), ("carol", false), ("dave", false), ("harry", true), ("ivan", true)] {
                #expect((try await store.message(recipient: recipient, id: "m1", now: Self.now) != nil) == stored, "\(recipient)")
            }
        }
    }

    @Test(arguments: Backend.available)
    func aUnitsCreatesToOneMailboxTakeSeqInOrderAndTheAuthorQuotaCountsInOrder(_ backend: Backend) async throws {
        try await backend.withStore { store in
            // Room for exactly three 512-byte envelopes of alice's: the fourth and fifth are over.
            let limits = CreateLimits(maxPending: 100, maxAuthorBytes: 3 * 512)
            let creates = (1...5).map { Self.batchCreate(to: $0 % 2 == 0 ? "carol" : "bob", id: "q\($0)") }
            let results = await Self.outcomes(store.createMessages(creates, now: Self.now, limits: limits, wake: false))
            let seqs = results.prefix(3).compactMap { if case .success(.created(let message, _)) = $0 { message.seq } else { nil } }
            #expect(seqs.count == 3 && seqs == seqs.sorted() && Set(seqs).count == 3, "\(results)")
            #expect(results[3] == .failure(.authorQuota) && results[4] == .failure(.authorQuota))
            let page = try await store.messages(recipient: "bob", after: 0, limit: 10, maxBytes: .max, now: Self.now).messages
            #expect(page.map(\.id) == ["q1", "q3"], "the mailbox holds its entries in entry order")
        }
    }

    /// Across relays (PostgreSQL): a unit's thousand mailboxes reach the other relay as `m`
    /// notifications naming every one of them, never as the `a` that makes it re-read every live
    /// subscription (design groups §4.6).
    @Test func aUnitsMailboxesReachTheOtherRelayByNameNotAsARecheckOfEverything() async throws {
        try await Backend.postgresql.withStores(2) { stores in
            let heard = Mutex<[ClusterEvent]>([])
            let listener = try #require(stores[1].cluster)
            listener.start { event in heard.withLock { $0.append(event) } }
            // Listening observed, not waited for: the other node announces a subscription until
            // the listener hears it (a notification sent before LISTEN took effect is lost).
            let announcer = try #require(stores[0].cluster)
            try await eventually("the listener hears the other node") {
                _ = try await announcer.announceSubscription(to: "listener-probe")
                return heard.withLock { $0 }.contains { if case .subscribed("listener-probe", _) = $0 { true } else { false } }
            }
            heard.withLock { $0.removeAll() }
            let members = (0..<1000).map { "member-\($0)-" + String(repeating: "z", count: 29) }
            let creates = members.map { Self.batchCreate(to: $0, id: "group-message-1") }
            let results = await Self.outcomes(stores[0].createMessages(creates, now: Self.now, limits: Self.roomy, wake: false))
            #expect(results.count == 1000 && results.allSatisfy { if case .success(.created) = $0 { true } else { false } })
            try await eventually("the other relay heard every mailbox") {
                Set(heard.withLock { $0 }.flatMap { event -> [String] in
                    if case .changed(let mailboxes) = event { mailboxes } else { [] }
                }) == Set(members)
            }
            #expect(!heard.withLock { $0 }.contains(.recheckAll), "no re-check of everything")
            await listener.stop()
        }
    }

    @Test(arguments: Backend.available)
    func anIdenticalRetryOfAWholeUnitStoresNothingNew(_ backend: Backend) async throws {
        try await backend.withStore { store throws in
            let creates = (0..<300).map { Self.batchCreate(to: "member-\($0)", id: "same-id", envelope: "envelope-\($0)") }
            let first = await Self.outcomes(store.createMessages(creates, now: Self.now, limits: Self.roomy, wake: true))
            #expect(first.allSatisfy { if case .success(.created) = $0 { true } else { false } }, "300 creates, more than one statement's 256")
            let again = await Self.outcomes(store.createMessages(creates, now: Self.now + 5, limits: Self.roomy, wake: true))
            for (before, after) in zip(first, again) {
                guard case .success(.created(let message, _)) = before else { continue }
                #expect(after == .success(.duplicate(message)))
            }
            let pending = try await store.pendingSummary(now: Self.now).count
            #expect(pending == 300)
        }
    }
}
