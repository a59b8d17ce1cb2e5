import Foundation
import MailslotTestSupport
import MailslotWire
import PostgresNIO
import Testing
@testable import MailslotRelay

// The store's part of wake-ups (docs/design/wakeups.md §1.4–§2.4, §9.1), on both backends:
// registrations, the wake-up row a created message queues in its transaction, the claim and
// what it drops or postpones, requeues, verdicts, and removal with the sign-in.
extension StoreContractTests {
    static let interval: Int64 = 30_000
    static let presence: Int64 = 30_000

    static func registration(_ id: String, uid: String = "bob", provider: PushProviderKind = .webpush, route: String = "push.example.net",
                             tag: String = "tag1") -> NewPushRegistration {
        NewPushRegistration(uid: uid, id: id, provider: provider, target: #"{"endpoint":"https://\#(route)/\#(id)"}"#, route: route, tag: tag)
    }

    /// Registration ids of the suite's shape (16–64 characters).
    static func regID(_ n: Int) -> String { "registration-\(String(format: "%04d", n))" }

    @discardableResult
    static func put(_ store: any RelayStore, _ registration: NewPushRegistration, family: String = "f1", max: Int = 10,
                    now: Int64 = now) async throws -> PushPutOutcome {
        try await store.putRegistration(registration, family: Data(family.utf8), max: max, now: now)
    }

    static func claim(_ store: any RelayStore, now: Int64 = now, limit: Int = 16, excludedRoutes: [String] = [],
                      excludedProviders: [PushProviderKind] = [], live: Set<String> = []) async throws -> [ClaimedWakeup] {
        try await report(store, now: now, limit: limit, excludedRoutes: excludedRoutes, excludedProviders: excludedProviders, live: live).wakeups
    }

    /// The whole answer of a claim: the wake-ups and what it skipped.
    static func report(_ store: any RelayStore, now: Int64 = now, limit: Int = 16, excludedRoutes: [String] = [],
                       excludedProviders: [PushProviderKind] = [], live: Set<String> = []) async throws -> WakeupClaim {
        try await store.claimWakeups(now: now, limit: limit, excludedRoutes: excludedRoutes, excludedProviders: excludedProviders,
                                     interval: interval, presence: presence, isLiveHere: { live.contains($0) })
    }

    @Test(arguments: Backend.available)
    func registrationsArePutReplacedBoundedAndDeleted(_ backend: Backend) async throws {
        try await backend.withStore { store in
            for n in [3, 1, 2] {
                guard case .created(let row) = try await Self.put(store, Self.registration(Self.regID(n)), max: 3) else {
                    Issue.record("registration \(n) not created"); return
                }
                #expect(row.version == 1 && row.createdAt == Self.now && row.updatedAt == Self.now && row.wokenAt == 0 && row.failures == 0)
                #expect(row.provider == .webpush && row.tag == "tag1" && row.route == "push.example.net")
            }
            #expect(try await Self.put(store, Self.registration(Self.regID(4)), max: 3) == .tooMany, "the uid holds its most")
            #expect(try await store.registration(uid: "bob", id: Self.regID(4)) == nil, "nothing stored")
            // Another uid has its own count.
            guard case .created = try await Self.put(store, Self.registration(Self.regID(4), uid: "carol"), max: 3) else {
                Issue.record("carol's registration refused"); return
            }
            // A replacement of a held id is no new one: allowed at the limit, version + 1, created_at kept.
            let replacement = Self.registration(Self.regID(2), provider: .apns, route: "apns", tag: "tag2")
            guard case .replaced(let replaced) = try await Self.put(store, replacement, family: "f2", max: 3, now: Self.now + 5) else {
                Issue.record("not replaced"); return
            }
            #expect(replaced.version == 2 && replaced.createdAt == Self.now && replaced.updatedAt == Self.now + 5)
            #expect(replaced.provider == .apns && replaced.route == "apns" && replaced.tag == "tag2" && replaced.target == replacement.target)
            #expect(try await store.registrations(uid: "bob").map(\.id) == [1, 2, 3].map(Self.regID), "ordered by id")
            #expect(try await store.registration(uid: "bob", id: Self.regID(2)) == replaced)
            #expect(try await store.deleteRegistration(uid: "bob", id: Self.regID(2)))
            #expect(try await store.deleteRegistration(uid: "bob", id: Self.regID(2)) == false, "gone")
            #expect(try await store.deleteRegistration(uid: "carol", id: Self.regID(1)) == false, "ids are per uid")
            #expect(try await store.registrations(uid: "bob").map(\.id) == [1, 3].map(Self.regID))
            guard case .created = try await Self.put(store, Self.registration(Self.regID(5)), max: 3) else {
                Issue.record("a deleted registration's place was not freed"); return
            }
        }
    }

    /// A created message queues one wake-up per registration of its recipient, in its
    /// transaction; an identical retry, a `wake: false` create and a recipient without
    /// registrations queue none; further messages while one is pending add nothing, and one
    /// after a wake-up is due an interval after it.
    @Test(arguments: Backend.available)
    func aCreatedMessageQueuesItsWakeupsOnceAndTheyCoalesce(_ backend: Backend) async throws {
        try await backend.withStore { store in
            try await Self.put(store, Self.registration(Self.regID(1)))
            try await Self.put(store, Self.registration(Self.regID(2), provider: .apns, route: "apns", tag: "tag2"))
            try await Self.put(store, Self.registration(Self.regID(1), uid: "carol"))
            #expect(try await store.nextWakeupDue() == nil)
            let hooked = Hooked()
            store.commits.add(hooked)
            // Not waking: stored and delivered, but no row.
            _ = try await store.createMessage(recipient: "bob", id: "typing", author: "alice", envelope: "e", size: 1, keyID: nil,
                                              now: Self.now, expiresAt: Self.now + 3_600_000, limits: Self.roomy, wake: false).value
            try await Self.create(store, to: "dave", id: "m0")
            #expect(try await store.nextWakeupDue() == nil, "a wake: false create and a recipient without registrations queue nothing")
            guard case .created(let first, _) = try await Self.create(store, id: "m1") else { Issue.record("not created"); return }
            #expect(try await store.nextWakeupDue() == Self.now)
            // The commit observer hears which creates queued rows: the dispatcher's one nudge.
            let wakeups = hooked.changes.value.compactMap { change -> String? in
                guard case .created(let message, let wakeups) = change, message.recipient == "bob" else { return nil }
                return "\(message.id) \(wakeups)"
            }
            #expect(wakeups == ["typing false", "m1 true"])
            try await Self.create(store, id: "m2", now: Self.now + 1)
            let claimed = try await Self.claim(store, now: Self.now + 2)
            #expect(claimed.count == 2, "one row per registration, not per message")
            #expect(claimed.map(\.firstSeq) == [first.seq, first.seq], "the oldest message's")
            #expect(Set(claimed.map(\.registrationID)) == [Self.regID(1), Self.regID(2)])
            let apns = try #require(claimed.first { $0.provider == .apns })
            #expect(apns.uid == "bob" && apns.route == "apns" && apns.tag == "tag2" && apns.version == 1 && apns.attempt == 0 && apns.event == nil)
            #expect(try await store.registration(uid: "bob", id: Self.regID(1))?.wokenAt == Self.now + 2)
            #expect(try await store.nextWakeupDue() == nil, "claimed rows leave the table")
            // An identical retry of a created message queues nothing, whatever it says.
            #expect(try await Self.create(store, id: "m1") == .duplicate(first))
            #expect(try await store.nextWakeupDue() == nil, "an identical retry queues nothing")
            // Woken at now + 2: the next wake-up waits an interval, and further messages join it.
            guard case .created(let third, _) = try await Self.create(store, id: "m3", now: Self.now + 10) else { Issue.record("not created"); return }
            try await Self.create(store, id: "m4", now: Self.now + 11)
            #expect(try await store.nextWakeupDue() == Self.now + 2 + Self.interval)
            #expect(try await Self.claim(store, now: Self.now + 1 + Self.interval).isEmpty, "not due yet")
            let next = try await Self.claim(store, now: Self.now + 2 + Self.interval)
            #expect(next.count == 2 && next.allSatisfy { $0.firstSeq == third.seq })
        }
    }

    /// The claim drops a wake-up whose messages were all received, postpones one whose owner is
    /// connected, skips excluded routes and providers, and respects its limit.
    @Test(arguments: Backend.available)
    func aClaimSendsDropsOrPostpones(_ backend: Backend) async throws {
        try await backend.withStore { store in
            try await Self.put(store, Self.registration(Self.regID(1)))
            // Received: the owner acknowledged the message before the claim.
            try await Self.create(store, id: "m1")
            #expect(try await store.deleteMessage(recipient: "bob", id: "m1", author: nil, now: Self.now).value)
            #expect(try await Self.report(store) == WakeupClaim(received: 1), "dropped, and the claim says so")
            #expect(try await store.nextWakeupDue() == nil, "dropped, not kept")
            #expect(try await store.registration(uid: "bob", id: Self.regID(1))?.wokenAt == 0, "nothing was sent")
            // Expired messages count as received too.
            try await Self.create(store, id: "m2", ttl: 10)
            #expect(try await Self.report(store, now: Self.now + 10) == WakeupClaim(received: 1))
            #expect(try await store.nextWakeupDue() == nil)
            // Connected here: postponed by the interval, then sent.
            try await Self.create(store, id: "m3", now: Self.now + 20)
            #expect(try await Self.report(store, now: Self.now + 20, live: ["bob"]) == WakeupClaim(postponed: 1))
            #expect(try await store.nextWakeupDue() == Self.now + 20 + Self.interval, "postponed")
            // Excluded routes and providers stay in the table.
            let later = Self.now + 20 + Self.interval
            #expect(try await Self.report(store, now: later, excludedRoutes: ["push.example.net"]) == WakeupClaim(due: 1),
                    "excluded, not skipped: still due")
            #expect(try await Self.claim(store, now: later, excludedProviders: [.webpush]).isEmpty)
            #expect(try await store.nextWakeupDue() == later)
            #expect(try await Self.claim(store, now: later, limit: 0).isEmpty)
            let sent = try await Self.claim(store, now: later, excludedRoutes: ["apns"], excludedProviders: [.fcm])
            #expect(sent.map(\.registrationID) == [Self.regID(1)])
            // A limit takes the earliest due first.
            for n in 2...4 { try await Self.put(store, Self.registration(Self.regID(n), uid: "u\(n)")) }
            for n in [4, 2, 3] { try await Self.create(store, to: "u\(n)", id: "x", now: later + Int64(n)) }
            let first = try await Self.claim(store, now: later + 10, limit: 2)
            #expect(first.map(\.uid) == ["u2", "u3"])
            #expect(try await Self.claim(store, now: later + 10).map(\.uid) == ["u4"])
            // A wake-up whose registration went meanwhile is not sent.
            try await Self.create(store, to: "u2", id: "y", now: later + Self.interval + 10)
            #expect(try await store.deleteRegistration(uid: "u2", id: Self.regID(2)))
            #expect(try await Self.claim(store, now: later + 3 * Self.interval).isEmpty)
        }
    }

    /// A requeued wake-up comes back with its attempt one higher and its event id, and merges
    /// with a row a newer message queued meanwhile.
    @Test(arguments: Backend.available)
    func requeuesCountAttemptsKeepTheEventAndMerge(_ backend: Backend) async throws {
        try await backend.withStore { store in
            try await Self.put(store, Self.registration(Self.regID(1)))
            guard case .created(let first, _) = try await Self.create(store, id: "m1") else { Issue.record("not created"); return }
            let claimed = try #require(try await Self.claim(store).first)
            try await store.requeueWakeup(claimed, event: "msg_event1", dueAt: Self.now + 5_000)
            #expect(try await store.nextWakeupDue() == Self.now + 5_000)
            let again = try #require(try await Self.claim(store, now: Self.now + 5_000).first)
            #expect(again.attempt == 1 && again.event == "msg_event1" && again.firstSeq == first.seq)
            // A newer message queues a row (due an interval after the wake-up) while the call runs;
            // the requeue merges with it: the earlier due time and message, the requeue's attempt and event.
            try await Self.create(store, id: "m2", now: Self.now + 5_001)
            #expect(try await store.nextWakeupDue() == Self.now + 5_000 + Self.interval)
            try await store.requeueWakeup(again, event: "msg_event1", dueAt: Self.now + 35_000)
            #expect(try await store.nextWakeupDue() == Self.now + 35_000)
            let merged = try #require(try await Self.claim(store, now: Self.now + 35_000).first)
            #expect(merged.attempt == 2 && merged.event == "msg_event1" && merged.firstSeq == first.seq)
            // No registration, no requeue.
            #expect(try await store.deleteRegistration(uid: "bob", id: Self.regID(1)))
            try await store.requeueWakeup(merged, event: "msg_event1", dueAt: Self.now + 40_000)
            #expect(try await store.nextWakeupDue() == nil)
        }
    }

    /// Verdicts apply to the version they were made for: a replaced registration is not
    /// blamed or removed for its old body. Three blames in a row remove; an `ok` forgives.
    @Test(arguments: Backend.available)
    func verdictsHonourTheVersionAndRemoveAtThreeBlames(_ backend: Backend) async throws {
        try await backend.withStore { store in
            let id = Self.regID(1)
            try await Self.put(store, Self.registration(id))
            try await Self.create(store, id: "m1")
            let claimed = try #require(try await Self.claim(store).first)
            #expect(claimed.version == 1)
            try await Self.put(store, Self.registration(id, tag: "tag2"))
            #expect(try await store.recordWakeOutcome(uid: "bob", id: id, version: 1, .dead) == false, "an older version's verdict")
            #expect(try await store.recordWakeOutcome(uid: "bob", id: id, version: 1, .blamed) == false)
            #expect(try await store.registration(uid: "bob", id: id)?.failures == 0)
            #expect(try await store.recordWakeOutcome(uid: "bob", id: id, version: 2, .blamed) == false)
            #expect(try await store.recordWakeOutcome(uid: "bob", id: id, version: 2, .blamed) == false)
            #expect(try await store.registration(uid: "bob", id: id)?.failures == 2)
            #expect(try await store.recordWakeOutcome(uid: "bob", id: id, version: 2, .ok) == false)
            #expect(try await store.registration(uid: "bob", id: id)?.failures == 0, "a success forgives")
            // A replacement forgives too.
            #expect(try await store.recordWakeOutcome(uid: "bob", id: id, version: 2, .blamed) == false)
            try await Self.put(store, Self.registration(id, tag: "tag3"))
            #expect(try await store.registration(uid: "bob", id: id)?.failures == 0)
            for _ in 1...2 { #expect(try await store.recordWakeOutcome(uid: "bob", id: id, version: 3, .blamed) == false) }
            // A pending wake-up goes with its registration.
            try await Self.create(store, id: "m2", now: Self.now + Self.interval)
            #expect(try await store.recordWakeOutcome(uid: "bob", id: id, version: 3, .blamed), "removed at the third")
            #expect(try await store.registration(uid: "bob", id: id) == nil)
            #expect(try await store.nextWakeupDue() == nil)
            try await Self.put(store, Self.registration(id))
            #expect(try await store.recordWakeOutcome(uid: "bob", id: id, version: 1, .dead))
            #expect(try await store.registrations(uid: "bob").isEmpty)
        }
    }

    /// Signing out (and a refresh token's reuse) removes the registrations the sign-in wrote,
    /// with their wake-ups, in its transaction; the sweeper removes those of sign-ins that ran out.
    @Test(arguments: Backend.available)
    func registrationsGoWithTheirSignIn(_ backend: Backend) async throws {
        try await backend.withStore { store in
            func bytes(_ text: String) -> Data { Data(text.utf8) }
            for (family, expiry) in [("f1", Self.now + 10_000), ("f2", Self.now + 10_000), ("f3", Self.now + 1_000)] {
                try await store.insertSessionPair(uid: "bob", family: bytes(family), accessHash: bytes("a-\(family)"), accessExpiresAt: expiry,
                                                  refreshHash: bytes("r-\(family)"), refreshExpiresAt: expiry, maxFamilies: 10)
            }
            try await Self.put(store, Self.registration(Self.regID(1)), family: "f1")
            try await Self.put(store, Self.registration(Self.regID(2)), family: "f2")
            try await Self.put(store, Self.registration(Self.regID(3)), family: "f3")
            try await Self.put(store, Self.registration(Self.regID(4)), family: "f1")
            try await Self.create(store, id: "m1")
            try await store.revokeFamily(bytes("f1"))
            #expect(try await store.registrations(uid: "bob").map(\.id) == [2, 3].map(Self.regID), "sign-out removes its sign-in's")
            #expect(Set(try await Self.claim(store).map(\.registrationID)) == [Self.regID(2), Self.regID(3)], "and their wake-ups")
            // The reuse of a spent refresh token revokes its family, registrations included.
            #expect(try await store.rotateRefresh(hash: bytes("r-f2"), now: Self.now, accessHash: bytes("a-f2b"), accessExpiresAt: Self.now + 10_000,
                                                  refreshHash: bytes("r-f2b"), refreshExpiresAt: Self.now + 10_000) == .rotated(uid: "bob"))
            #expect(try await store.sweepPushRegistrations(now: Self.now, batch: 64) == 0, "every family still signed in")
            #expect(try await store.rotateRefresh(hash: bytes("r-f2"), now: Self.now, accessHash: bytes("x"), accessExpiresAt: Self.now,
                                                  refreshHash: bytes("y"), refreshExpiresAt: Self.now) == .reused)
            #expect(try await store.registrations(uid: "bob").map(\.id) == [Self.regID(3)])
            // f3 ran out without a sign-out: the sweeper finds it, in batches.
            #expect(try await store.sweepPushRegistrations(now: Self.now + 999, batch: 64) == 0)
            try await Self.put(store, Self.registration(Self.regID(5)), family: "f3")
            try await Self.create(store, id: "m2", now: Self.now + Self.interval)
            #expect(try await store.sweepPushRegistrations(now: Self.now + 1_000, batch: 1) == 1)
            #expect(try await store.sweepPushRegistrations(now: Self.now + 1_000, batch: 1) == 1)
            #expect(try await store.sweepPushRegistrations(now: Self.now + 1_000, batch: 1) == 0)
            #expect(try await store.registrations(uid: "bob").isEmpty)
            #expect(try await store.nextWakeupDue() == nil, "their wake-ups went with them")
            // The expiry sweep runs it too.
            try await Self.put(store, Self.registration(Self.regID(6)), family: "gone")
            _ = try await store.sweepExpired(now: Self.now + 2_000)
            #expect(try await store.registrations(uid: "bob").isEmpty)
        }
    }

    /// Creates submitted together (sharing a batch when the writer is busy, set-wise on
    /// PostgreSQL from three writes on) queue what the same creates one by one would: one row per
    /// registration, for the first waking message of each mailbox, none for `wake: false`.
    @Test(arguments: Backend.available)
    func createsSubmittedTogetherQueueTheirWakeups(_ backend: Backend) async throws {
        try await backend.withStore { store in
            for uid in ["bob", "carol", "dave"] { try await Self.put(store, Self.registration(Self.regID(1), uid: uid)) }
            func submit(_ recipient: String, _ id: String, wake: Bool = true) -> CommitTicket<CreateOutcome> {
                store.createMessage(recipient: recipient, id: id, author: "alice", envelope: "e-\(id)", size: 1, keyID: nil, now: Self.now,
                                    expiresAt: Self.now + 3_600_000, limits: Self.roomy, wake: wake)
            }
            let tickets = [submit("carol", "c1", wake: false), submit("bob", "b1"), submit("bob", "b2"), submit("dave", "d1", wake: false),
                           submit("dave", "d2"), submit("erin", "e1")]
            var seqs: [String: Int64] = [:]
            for (ticket, id) in zip(tickets, ["c1", "b1", "b2", "d1", "d2", "e1"]) { seqs[id] = try await ticket.value.message.seq }
            let claimed = try await Self.claim(store)
            #expect(Dictionary(uniqueKeysWithValues: claimed.map { ($0.uid, $0.firstSeq) }) == ["bob": seqs["b1"], "dave": seqs["d2"]])
        }
    }

    /// Two relays claiming at once never take the same wake-up (`FOR UPDATE SKIP LOCKED`, and
    /// the rows deleted in the claim's transaction), and together they take every one.
    @Test(.enabled(if: TestDatabase.unavailable == nil, "MAILSLOT_TEST_DATABASE_URL is not set: run the tests under tools/postgres run"))
    func postgreSQLConcurrentClaimersNeverShareAWakeup() async throws {
        try await Backend.postgresql.withStores(2) { stores in
            for n in 0..<100 {
                try await Self.put(stores[n % 2], Self.registration(Self.regID(n), uid: "u\(n)"))
                try await Self.create(stores[(n + 1) % 2], to: "u\(n)", id: "m")
            }
            let taken = try await withThrowingTaskGroup(of: [ClaimedWakeup].self) { group in
                for claimer in 0..<2 {
                    group.addTask {
                        var mine: [ClaimedWakeup] = []
                        // Bounded: 100 rows, at least one taken per round by one of the two.
                        for _ in 0..<100 {
                            let batch = try await Self.claim(stores[claimer], limit: 7)
                            if batch.isEmpty, try await stores[claimer].nextWakeupDue() == nil { break }
                            mine += batch
                        }
                        return mine
                    }
                }
                var all: [[ClaimedWakeup]] = []
                for try await mine in group { all.append(mine) }
                return all
            }
            let all = taken.flatMap { $0 }
            #expect(all.count == 100, "every wake-up taken once")
            #expect(Set(all.map(\.uid)).count == 100, "no two claims share one")
            #expect(taken.allSatisfy { !$0.isEmpty }, "both relays took some (they ran at once)")
        }
    }

    /// On PostgreSQL, a subscription on any live node postpones a wake-up; one that ended there,
    /// or whose node stopped renewing its presence, no longer does; a node that stops
    /// gracefully withdraws its presence at once.
    @Test(.enabled(if: TestDatabase.unavailable == nil, "MAILSLOT_TEST_DATABASE_URL is not set: run the tests under tools/postgres run"))
    func postgreSQLPostponesForASubscriptionOnAnyLiveNode() async throws {
        try await Backend.postgresql.withStores(2) { stores in
            let here = try #require(stores[0] as? PostgresStore), there = try #require(stores[1] as? PostgresStore)
            try await Self.put(here, Self.registration(Self.regID(1)))
            try await Self.create(here, id: "m1")
            let generation = try await there.notifications.announceSubscription(to: "bob")
            try await there.heartbeat(node: there.notifications.node, now: Self.now)
            #expect(try await Self.report(here) == WakeupClaim(postponed: 1), "bob is connected to the other relay")
            #expect(try await here.nextWakeupDue() == Self.now + Self.interval, "postponed by the interval")
            try await there.notifications.subscriptionEnded(mailbox: "bob", generation: generation)
            #expect(try await Self.claim(here, now: Self.now + Self.interval).count == 1, "sent once the subscription ended")
            // Subscribed again on a node that then stopped renewing its presence (killed).
            _ = try await there.notifications.announceSubscription(to: "bob")
            try await Self.create(here, id: "m2", now: Self.now + Self.interval + 1)
            #expect(try await Self.claim(here, now: Self.now + 2 * Self.interval).count == 1,
                    "a node not seen within the presence window holds no live subscription")
            // A graceful stop withdraws the node and its subscriptions at once.
            try await there.pool.client.query("DELETE FROM relay_nodes")
            there.notifications.start { _ in }
            try await eventually("the heartbeat renewed the node's presence") {
                try await there.pool.client.query("SELECT 1 FROM relay_nodes WHERE node = \(there.notifications.node)").collect().count == 1
            }
            await there.notifications.stop()
            let left = try await there.pool.client.query("""
                SELECT (SELECT count(*) FROM relay_nodes WHERE node = \(there.notifications.node)),
                       (SELECT count(*) FROM live_subscriptions WHERE node = \(there.notifications.node))
                """).collect().first?.decode((Int64, Int64).self)
            #expect(left.map { [$0.0, $0.1] } == [0, 0])
        }
    }

    /// Relays of the previous version call `mailslot_write_batch` without wake flags during a
    /// rolling upgrade: that signature still works, and its creates wake nothing.
    @Test(.enabled(if: TestDatabase.unavailable == nil, "MAILSLOT_TEST_DATABASE_URL is not set: run the tests under tools/postgres run"))
    func postgreSQLKeepsThePreviousWriteBatchSignature() async throws {
        try await Backend.postgresql.withStore { store in
            let postgres = try #require(store as? PostgresStore)
            try await Self.put(store, Self.registration(Self.regID(1)))
            let rows = try await postgres.pool.client.query("""
                SELECT outcome FROM mailslot_write_batch('{create}', '{bob}', '{old1}', '{alice}', '{e}', '{1}', '{""}',
                    \([Self.now]), \([Self.now + 3_600_000]), '{10000}', '{1000000}', NULL)
                """).collect()
            #expect(try rows.map { try $0.decode(String.self) } == ["created"])
            #expect(try await store.message(recipient: "bob", id: "old1", now: Self.now) != nil)
            #expect(try await store.nextWakeupDue() == nil, "no wake-up from the old signature")
            try await Self.create(store, id: "new1")
            #expect(try await store.nextWakeupDue() == Self.now, "the new one queues it")
        }
    }
}
