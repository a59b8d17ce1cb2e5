import Foundation
import GRDB
import MailslotTestSupport
import MailslotWire
import PostgresNIO
import Synchronization
import Testing
@testable import MailslotRelay

/// One behavioural contract for every store backend (``RelayStore``): each test runs against the
/// embedded SQLite store and against PostgreSQL. The PostgreSQL cases need the cluster of
/// `tools/postgres run` (as tools/test runs them); without it they are not among the arguments,
/// and the PostgreSQL-only tests below report themselves skipped, with the reason. One case at a
/// time: each PostgreSQL case makes a database and up to 32 connections, and the rest of the
/// suite (relays and sockets with second-scale deadlines) runs beside it on two cores.
@Suite(.serialized) struct StoreContractTests {
    enum Backend: String, CaseIterable, CustomTestStringConvertible, Sendable {
        case sqlite, postgresql
        var testDescription: String { rawValue }

        /// The backends this run can test: PostgreSQL only with a cluster to test it on.
        static var available: [Backend] { TestDatabase.unavailable == nil ? allCases : [.sqlite] }

        /// Runs `body` with `count` stores on one new, empty database (several stores: several
        /// relays sharing it), and removes the database afterwards.
        func withStores<T>(_ count: Int = 1, _ body: ([any RelayStore]) async throws -> T) async throws -> T {
            switch self {
            case .sqlite:
                let folder = FileManager.default.temporaryDirectory.appendingPathComponent("store-contract-\(UUID().uuidString)")
                try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
                defer { try? FileManager.default.removeItem(at: folder) }
                let path = folder.appendingPathComponent("relay.sqlite").path
                return try await body((0..<count).map { _ in try SQLiteStore(path: path) })
            case .postgresql:
                if let reason = TestDatabase.unavailable { try Test.cancel(Comment(rawValue: reason)) }
                return try await TestDatabase.with { url in
                    var stores: [PostgresStore] = []
                    do {
                        for _ in 0..<count { stores.append(try await PostgresStore.open(url: url, logger: TestRelay.logger)) }
                        let value = try await body(stores)
                        for store in stores { await store.close() }
                        return value
                    } catch {
                        for store in stores { await store.close() }
                        throw error
                    }
                }
            }
        }

        func withStore<T>(_ body: (any RelayStore) async throws -> T) async throws -> T {
            try await withStores(1) { try await body($0[0]) }
        }
    }

    /// Runs `check` on an SQLite store opened on a database of migration `migration` (in a
    /// temporary folder, removed afterwards), into which `fill` first wrote that release's rows.
    static func withSQLite(migratedTo migration: String, _ check: (any RelayStore) async throws -> Void,
                           fill: @escaping @Sendable (Database) throws -> Void) async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("migration-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let path = folder.appendingPathComponent("relay.sqlite").path
        do {
            let queue = try DatabaseQueue(path: path)
            try Schema.migrator.migrate(queue, upTo: migration)
            try await queue.write(fill)
        }
        try await check(try SQLiteStore(path: path))
    }

    /// A PostgreSQL database as a relay of migration `version` left it: its migrations applied
    /// and recorded, none after.
    static func migrate(_ store: PostgresStore, upTo version: Int32) async throws {
        try await store.pool.client.query("""
            CREATE TABLE mailslot_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL,
                applied_at TIMESTAMPTZ NOT NULL DEFAULT now())
            """)
        for migration in PostgresSchema.migrations where migration.version <= version {
            for statement in migration.sql { try await store.pool.client.query(PostgresQuery(unsafeSQL: statement)) }
            try await store.pool.client.query("INSERT INTO mailslot_migrations (version, name) VALUES (\(migration.version), \(migration.name))")
        }
    }

    static let now: Int64 = 1_800_000_000_000
    static let roomy = CreateLimits(maxPending: 10_000, maxAuthorBytes: 1 << 40)

    /// A create with the suite's defaults: `envelope` stands for `size` bytes.
    @discardableResult
    static func create(_ store: any RelayStore, to recipient: String = "bob", id: String, author: String = "alice",
                       envelope: String = "envelope", size: Int = 512, keyID: String? = nil, now: Int64 = now,
                       ttl: Int64 = 3_600_000, limits: CreateLimits = roomy) async throws -> CreateOutcome {
        try await store.createMessage(recipient: recipient, id: id, author: author, envelope: envelope, size: size, keyID: keyID,
                                      now: now, expiresAt: now + ttl, limits: limits).value
    }

    @Test(arguments: Backend.available)
    func createsDuplicatesAndConflicts(_ backend: Backend) async throws {
        try await backend.withStore { store in
            guard case .created(let first, erasedExpired: false) = try await Self.create(store, id: "m1") else {
                Issue.record("not created"); return
            }
            #expect(first.recipient == "bob" && first.author == "alice" && first.envelope == "envelope" && first.size == 512)
            #expect(try await Self.create(store, id: "m1") == .duplicate(first), "an identical retry changes nothing")
            await #expect(throws: StoreRefusal.conflict) { try await Self.create(store, id: "m1", envelope: "other") }
            await #expect(throws: StoreRefusal.conflict) { try await Self.create(store, id: "m1", author: "mallory") }
            #expect(try await store.message(recipient: "bob", id: "m1", now: Self.now) == first)
            #expect(try await store.message(recipient: "carol", id: "m1", now: Self.now) == nil, "ids are per mailbox")
            // An expired, unswept message under the id is erased to make room.
            try await Self.create(store, id: "m2", ttl: 10)
            let later = Self.now + 20
            #expect(try await store.message(recipient: "bob", id: "m2", now: later) == nil)
            guard case .created(let second, erasedExpired: true) = try await Self.create(store, id: "m2", author: "mallory", now: later) else {
                Issue.record("the expired message was not replaced"); return
            }
            #expect(second.seq > first.seq && second.author == "mallory")
            #expect(try await store.pendingCount(recipient: "bob", now: later) == 2)
        }
    }

    /// The refusals come in SQLite's order: identical retry, conflict, blocked, stale keys,
    /// pending limit, author quota.
    @Test(arguments: Backend.available)
    func refusalsComeInTheirOrder(_ backend: Backend) async throws {
        try await backend.withStore { store in
            try await store.putKeyBundle(uid: "bob", bundle: Data([1, 2, 3]), keyID: "k1", identityKey: "i1", now: Self.now)
            let tight = CreateLimits(maxPending: 2, maxAuthorBytes: 2 * 512)
            let stored = try await Self.create(store, id: "m1", keyID: "k1", limits: tight).message
            try await Self.create(store, id: "m2", keyID: "k1", limits: tight)
            try await store.block(owner: "bob", author: "alice", now: Self.now, limit: 10)
            // Full mailbox, author over quota, blocked, stale keys: an identical retry is still answered.
            #expect(try await Self.create(store, id: "m1", keyID: "k2", limits: tight) == .duplicate(stored))
            await #expect(throws: StoreRefusal.conflict) { try await Self.create(store, id: "m1", envelope: "x", keyID: "k2", limits: tight) }
            await #expect(throws: StoreRefusal.blocked) { try await Self.create(store, id: "m3", keyID: "k2", limits: tight) }
            try await store.unblock(owner: "bob", author: "alice")
            await #expect(throws: StoreRefusal.staleKeys) { try await Self.create(store, id: "m3", keyID: "k2", limits: tight) }
            await #expect(throws: StoreRefusal.staleKeys) { try await Self.create(store, to: "carol", id: "m3", keyID: "k1") }
            await #expect(throws: StoreRefusal.mailboxFull) { try await Self.create(store, id: "m3", keyID: "k1", limits: tight) }
            await #expect(throws: StoreRefusal.authorQuota) { try await Self.create(store, to: "carol", id: "m3", limits: tight) }
            // Nothing refused was stored.
            #expect(try await store.pendingCount(recipient: "bob", now: Self.now) == 2)
            #expect(try await store.pendingCount(recipient: "carol", now: Self.now) == 0)
            #expect(try await store.message(recipient: "carol", id: "m3", now: Self.now) == nil)
        }
    }

    @Test(arguments: Backend.available)
    func thePendingLimitDiscountsExpiredUnsweptMessages(_ backend: Backend) async throws {
        try await backend.withStore { store in
            let limits = CreateLimits(maxPending: 3, maxAuthorBytes: 1 << 40)
            try await Self.create(store, id: "short", ttl: 10, limits: limits)
            try await Self.create(store, id: "a", limits: limits)
            try await Self.create(store, id: "b", limits: limits)
            await #expect(throws: StoreRefusal.mailboxFull) { try await Self.create(store, id: "c", limits: limits) }
            let later = Self.now + 20
            #expect(try await store.pendingCount(recipient: "bob", now: later) == 2)
            try await Self.create(store, id: "c", now: later, limits: limits)
            await #expect(throws: StoreRefusal.mailboxFull) { try await Self.create(store, id: "d", now: later, limits: limits) }
            #expect(try await store.sweepExpired(now: later) == 1)
            #expect(try await store.pendingCount(recipient: "bob", now: later) == 3)
        }
    }

    @Test(arguments: Backend.available)
    func theAuthorQuotaSpansMailboxesAndIsFreedByErasures(_ backend: Backend) async throws {
        try await backend.withStore { store in
            let limits = CreateLimits(maxPending: 100, maxAuthorBytes: 1000)
            try await Self.create(store, to: "bob", id: "m1", size: 400, limits: limits)
            try await Self.create(store, to: "carol", id: "m2", size: 400, limits: limits)
            await #expect(throws: StoreRefusal.authorQuota) { try await Self.create(store, to: "dave", id: "m3", size: 400, limits: limits) }
            try await Self.create(store, to: "dave", id: "m3", author: "erin", size: 400, limits: limits)
            #expect(try await store.deleteMessage(recipient: "bob", id: "m1", author: nil, now: Self.now).value)
            try await Self.create(store, to: "dave", id: "m4", size: 400, limits: limits)
            // Expired and swept: its bytes are free too.
            try await Self.create(store, to: "erin", id: "m5", author: "frank", size: 900, ttl: 10, limits: limits)
            await #expect(throws: StoreRefusal.authorQuota) { try await Self.create(store, to: "erin", id: "m6", author: "frank", size: 200, limits: limits) }
            #expect(try await store.sweepExpired(now: Self.now + 20) == 1)
            try await Self.create(store, to: "erin", id: "m6", author: "frank", size: 900, now: Self.now + 20, limits: limits)
        }
    }

    @Test(arguments: Backend.available)
    func erasuresSweepsAndSizes(_ backend: Backend) async throws {
        try await backend.withStore { store in
            for n in 0..<5 { try await Self.create(store, id: "short\(n)", ttl: 10) }
            try await Self.create(store, id: "long1", now: Self.now + 1)
            try await Self.create(store, to: "carol", id: "long2", now: Self.now + 2)
            let summary = try await store.pendingSummary(now: Self.now)
            #expect(summary.count == 7 && summary.oldestCreatedAt == Self.now)
            // Only the author who wrote it may unsend it; an ack (no author) may erase it.
            #expect(try await store.deleteMessage(recipient: "bob", id: "long1", author: "mallory", now: Self.now).value == false)
            #expect(try await store.message(recipient: "bob", id: "long1", now: Self.now) != nil)
            #expect(try await store.deleteMessage(recipient: "bob", id: "long1", author: "alice", now: Self.now).value)
            #expect(try await store.deleteMessage(recipient: "bob", id: "long1", author: nil, now: Self.now).value == false, "already gone")
            // An expired message is erased too, but reported absent.
            #expect(try await store.deleteMessage(recipient: "bob", id: "short0", author: nil, now: Self.now + 20).value == false)
            // Batches of two rows: the sweep goes on until nothing expired is left.
            #expect(try await store.sweepExpired(now: Self.now + 20, batch: 2, batchBytes: 1 << 20) == 4)
            #expect(try await store.sweepExpired(now: Self.now + 20, batch: 2, batchBytes: 1 << 20) == 0)
            #expect(try await store.pendingCount(recipient: "bob", now: Self.now + 20) == 0)
            let after = try await store.pendingSummary(now: Self.now + 20)
            #expect(after.count == 1 && after.oldestCreatedAt == Self.now + 2)
            // Expired sessions are kept a day, then swept.
            try await store.insertSessionPair(uid: "alice", family: Data([1]), accessHash: Data([2]), accessExpiresAt: Self.now,
                                              refreshHash: Data([3]), refreshExpiresAt: Self.now, maxFamilies: 8)
            _ = try await store.sweepExpired(now: Self.now + 1000)
            #expect(try await store.session(hash: Data([3])) != nil)
            _ = try await store.sweepExpired(now: Self.now + 24 * 3600 * 1000 + 1)
            #expect(try await store.session(hash: Data([2])) == nil)
            #expect(try await store.session(hash: Data([3])) == nil)
            #expect(try await store.checkpoint())
        }
    }

    @Test(arguments: Backend.available)
    func pagesAreBoundedInCountAndBytes(_ backend: Backend) async throws {
        try await backend.withStore { store in
            var seqs: [Int64] = []
            for n in 0..<5 {
                seqs.append(try await Self.create(store, id: "m\(n)", envelope: String(repeating: "e", count: 100)).message.seq)
            }
            try await Self.create(store, to: "carol", id: "other")
            let all = try await store.messages(recipient: "bob", after: 0, limit: 10, maxBytes: .max, now: Self.now)
            #expect(all.messages.map(\.seq) == seqs && !all.more)
            let counted = try await store.messages(recipient: "bob", after: 0, limit: 2, maxBytes: .max, now: Self.now)
            #expect(counted.messages.map(\.seq) == Array(seqs[0..<2]) && counted.more)
            let weighed = try await store.messages(recipient: "bob", after: seqs[0], limit: 10, maxBytes: 250, now: Self.now)
            #expect(weighed.messages.map(\.seq) == Array(seqs[1..<3]) && weighed.more)
            let large = try await store.messages(recipient: "bob", after: 0, limit: 10, maxBytes: 50, now: Self.now)
            #expect(large.messages.map(\.seq) == [seqs[0]] && large.more, "the first alone, however large")
            let last = try await store.messages(recipient: "bob", after: seqs[3], limit: 1, maxBytes: .max, now: Self.now)
            #expect(last.messages.map(\.seq) == [seqs[4]] && !last.more)
            #expect(try await store.messages(recipient: "bob", after: 0, limit: 10, maxBytes: .max, now: Self.now + 3_600_000).messages.isEmpty,
                    "expired messages are not listed")
        }
    }

    /// What a store publishes (``CommitObserver``), in order.
    final class Hooked: CommitObserver {
        let changes = Shared<[CommittedChange]>([])
        func committed(_ change: CommittedChange) { changes.update { $0.append(change) } }
    }

    /// Writes submitted one after another are applied in that order, and the store publishes
    /// their commits in commit order.
    @Test(arguments: Backend.available)
    func submittedWritesKeepTheirOrder(_ backend: Backend) async throws {
        try await backend.withStore { store in
            let hooked = Hooked()
            store.commits.add(hooked)
            var tickets: [CommitTicket<CreateOutcome>] = []
            for n in 0..<20 {
                tickets.append(store.createMessage(recipient: "bob", id: "m\(n)", author: "alice", envelope: "e", size: 512, keyID: nil,
                                                         now: Self.now, expiresAt: Self.now + 60_000, limits: Self.roomy))
            }
            // A create and the erasure of the same id, submitted back to back.
            let created = store.createMessage(recipient: "bob", id: "x", author: "alice", envelope: "e", size: 512, keyID: nil,
                                                    now: Self.now, expiresAt: Self.now + 60_000, limits: Self.roomy)
            let erased = store.deleteMessage(recipient: "bob", id: "x", author: nil, now: Self.now)
            var seqs: [Int64] = []
            for ticket in tickets { seqs.append(try await ticket.value.message.seq) }
            #expect(seqs == seqs.sorted() && Set(seqs).count == 20, "seqs in submission order")
            if case .created = try await created.value {} else { Issue.record("x was not created") }
            #expect(try await erased.value, "the erasure came after the create")
            #expect(try await store.message(recipient: "bob", id: "x", now: Self.now) == nil)
            #expect(hooked.changes.value.dropLast(2).map { change -> Int64? in
                if case .created(let message, _) = change { message.seq } else { nil }
            } == seqs, "every create told once, in commit order")
            #expect(Array(hooked.changes.value.suffix(2)).map { change -> String in
                switch change {
                case .created(let message, _): "created \(message.id)"
                case .erased(let recipient, let id): "erased \(recipient) \(id)"
                case .elsewhere(let event): "elsewhere \(event)"
                }
            } == ["created x", "erased bob x"], "and the erasure after its create")
            let listed = try await store.messages(recipient: "bob", after: 0, limit: 100, maxBytes: .max, now: Self.now)
            #expect(listed.messages.map(\.id) == (0..<20).map { "m\($0)" })
        }
    }

    /// Writes submitted back to back share a batch (on PostgreSQL one statement, which takes a
    /// set-wise way when its writes cannot affect one another and a write-by-write way when they
    /// can): every answer is still that of the writes applied one by one in submission order.
    @Test(arguments: Backend.available)
    func aBatchAnswersAsItsWritesAppliedOneByOne(_ backend: Backend) async throws {
        try await backend.withStore { store in
            let now = Self.now
            try await store.block(owner: "dave", author: "mallory", now: now, limit: 10)
            try await store.putKeyBundle(uid: "erin", bundle: Data("{}".utf8), keyID: "k1", identityKey: "ik", now: now)
            try await Self.create(store, id: "old1")
            try await Self.create(store, id: "old2")
            try await Self.create(store, to: "carol", id: "expired", now: now - 10_000, ttl: 1_000)

            // Writes that cannot affect one another.
            func create(_ recipient: String, _ id: String, author: String = "alice", envelope: String = "e", size: Int = 512,
                        keyID: String? = nil, limits: CreateLimits = Self.roomy) -> Task<String, Never> {
                Write.create(recipient: recipient, id: id, author: author, envelope: envelope, size: size, keyID: keyID, limits: limits)
                    .submit(store, now: now)
            }
            func erase(_ recipient: String, _ id: String, author: String? = nil) -> Task<String, Never> {
                Write.erase(recipient: recipient, id: id, author: author).submit(store, now: now)
            }
            let independent = [
                create("bob", "a1"), create("carol", "a2"), create("dave", "a3", author: "mallory"),
                create("erin", "a4", keyID: "k1"), create("erin", "a5", keyID: "k0"),
                erase("bob", "old1"), erase("bob", "old2", author: "alice"), erase("bob", "none"), erase("carol", "none", author: "alice"),
                erase("carol", "expired", author: "mallory"),
            ]
            var answers: [String] = []
            for task in independent { answers.append(await task.value) }
            #expect(answers == ["created", "created", "blocked", "created", "staleKeys", "erased", "erased", "absent", "absent", "absent"])

            // Writes that do: the same id again, limits reached and freed within the batch.
            let pair = CreateLimits(maxPending: 2, maxAuthorBytes: 1 << 40)
            let quota = CreateLimits(maxPending: 100, maxAuthorBytes: 1_000)
            let dependent = [
                create("frank", "b1"), create("frank", "b1"), create("frank", "b1", envelope: "other"),
                create("frank", "b2", limits: pair), create("frank", "b3", limits: pair), erase("frank", "b1"),
                create("frank", "b3", limits: pair), create("carol", "expired"),
                create("gina", "q1", author: "quota", size: 600, limits: quota), create("gina", "q2", author: "quota", size: 600, limits: quota),
                erase("gina", "q1", author: "quota"), create("gina", "q2", author: "quota", size: 600, limits: quota), erase("gina", "q2"),
            ]
            answers = []
            for task in dependent { answers.append(await task.value) }
            #expect(answers == ["created", "duplicate", "conflict", "created", "mailboxFull", "erased", "created", "created, erased expired",
                                "created", "authorQuota", "erased", "created", "erased"])

            func ids(_ recipient: String) async throws -> [String] {
                try await store.messages(recipient: recipient, after: 0, limit: 100, maxBytes: .max, now: now).messages.map(\.id)
            }
            #expect(try await ids("bob") == ["a1"])
            #expect(try await ids("carol") == ["a2", "expired"])
            #expect(try await ids("dave") == [])
            #expect(try await ids("erin") == ["a4"])
            #expect(try await ids("frank") == ["b2", "b3"])
            #expect(try await ids("gina") == [])
            // The size counters followed every write: the limits hold on from here.
            #expect(try await store.pendingCount(recipient: "frank", now: now) == 2)
            #expect(try await store.pendingCount(recipient: "gina", now: now) == 0)
            await #expect(throws: StoreRefusal.mailboxFull) { try await Self.create(store, to: "frank", id: "b4", limits: pair) }
            try await Self.create(store, to: "gina", id: "q3", author: "quota", size: 1_000, limits: quota)
        }
    }

    /// Many tasks on two stores (two relays) create in one mailbox at once while a reader polls
    /// it: every message is stored, seqs strictly increase, and no poll ever shows a message below
    /// the highest seq an earlier poll had seen that the earlier poll did not show (a reader
    /// whose cursor passed it would have skipped it for good).
    @Test(arguments: Backend.available)
    func aMailboxsOrderNeverLetsAReaderSkipAMessage(_ backend: Backend) async throws {
        try await backend.withStores(2) { stores in
            let writers = 8, perWriter = 25
            let done = Shared(false)
            let reader = stores[0]
            let polling = Task { () -> [[Int64]] in
                var polls: [[Int64]] = []
                let deadline = ContinuousClock.now + .seconds(60)
                while polls.count < 20_000, ContinuousClock.now < deadline {
                    let finished = done.value
                    let page = try await reader.messages(recipient: "bob", after: 0, limit: 10_000, maxBytes: .max, now: Self.now)
                    polls.append(page.messages.map(\.seq))
                    if finished { break }
                    // Let the writers (and the tests running beside this one) run between polls.
                    await Task.yield()
                }
                return polls
            }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for writer in 0..<writers {
                    let store = stores[writer % stores.count]
                    group.addTask {
                        for n in 0..<perWriter {
                            try await Self.create(store, id: "w\(writer)-\(n)", author: "author\(writer)")
                        }
                    }
                }
                try await group.waitForAll()
            }
            done.update { $0 = true }
            let polls = try await polling.value
            let final = try await reader.messages(recipient: "bob", after: 0, limit: 10_000, maxBytes: .max, now: Self.now)
            let ids = Set(final.messages.map(\.id))
            #expect(ids.count == writers * perWriter && ids == Set((0..<writers).flatMap { w in (0..<perWriter).map { "w\(w)-\($0)" } }))
            #expect(zip(final.messages, final.messages.dropFirst()).allSatisfy { $0.seq < $1.seq }, "seqs strictly increase")
            #expect(polls.count > 1)
            var seen = Set<Int64>(), highest: Int64 = 0
            for (index, poll) in polls.enumerated() {
                let late = poll.filter { $0 < highest && !seen.contains($0) }
                #expect(late.isEmpty, "poll \(index) showed \(late) below \(highest), unseen before")
                seen.formUnion(poll)
                highest = max(highest, poll.last ?? 0)
            }
        }
    }

    @Test(arguments: Backend.available)
    func leasesAreHeldUntilReleasedOrExpired(_ backend: Backend) async throws {
        try await backend.withStore { store in
            try await Self.create(store, id: "m1")
            guard case .updated(let taken) = try await store.setLease(recipient: "bob", id: "m1", until: Self.now + 1000, holder: "w1", now: Self.now) else {
                Issue.record("not taken"); return
            }
            #expect(taken.leaseUntil == Self.now + 1000 && taken.leaseHolder == "w1")
            #expect(try await store.setLease(recipient: "bob", id: "m1", until: Self.now + 1000, holder: "w2", now: Self.now) == .held)
            #expect(try await store.message(recipient: "bob", id: "m1", now: Self.now)?.leaseHolder == "w1")
            guard case .updated(let released) = try await store.setLease(recipient: "bob", id: "m1", until: nil, holder: "w1", now: Self.now) else {
                Issue.record("not released"); return
            }
            #expect(released.leaseUntil == nil && released.leaseHolder == nil)
            guard case .updated = try await store.setLease(recipient: "bob", id: "m1", until: Self.now + 10, holder: "w2", now: Self.now) else {
                Issue.record("not taken after release"); return
            }
            guard case .updated(let after) = try await store.setLease(recipient: "bob", id: "m1", until: Self.now + 100, holder: "w1", now: Self.now + 20) else {
                Issue.record("an expired lease still held"); return
            }
            #expect(after.leaseHolder == "w1")
            #expect(try await store.setLease(recipient: "bob", id: "nope", until: Self.now + 10, holder: "w1", now: Self.now) == .notFound)
        }
    }

    @Test(arguments: Backend.available)
    func sessionsRotateAreRevokedOnReuseAndAreBounded(_ backend: Backend) async throws {
        try await backend.withStore { store in
            func hash(_ text: String) -> Data { Data(text.utf8) }
            // Three sign-ins, capped at three: a fourth revokes the least recently refreshed.
            for n in 1...3 {
                #expect(try await store.insertSessionPair(uid: "alice", family: hash("f\(n)"), accessHash: hash("a\(n)"),
                                                          accessExpiresAt: Self.now + 1000, refreshHash: hash("r\(n)"),
                                                          refreshExpiresAt: Self.now + 10_000 + Int64(n), maxFamilies: 3) == 0)
            }
            #expect(try await store.session(hash: hash("a1")) == StoredSession(kind: .access, uid: "alice", family: hash("f1"),
                                                                                 expiresAt: Self.now + 1000, spent: false))
            // f1 refreshes: now f2 is the least recently refreshed.
            #expect(try await store.rotateRefresh(hash: hash("r1"), now: Self.now, accessHash: hash("a1b"), accessExpiresAt: Self.now + 2000,
                                                  refreshHash: hash("r1b"), refreshExpiresAt: Self.now + 20_000) == .rotated(uid: "alice"))
            #expect(try await store.session(hash: hash("a1")) == nil, "the previous access session ends with the rotation")
            #expect(try await store.session(hash: hash("r1"))?.spent == true)
            #expect(try await store.insertSessionPair(uid: "alice", family: hash("f4"), accessHash: hash("a4"), accessExpiresAt: Self.now + 1000,
                                                      refreshHash: hash("r4"), refreshExpiresAt: Self.now + 30_000, maxFamilies: 3) == 1)
            #expect(try await store.session(hash: hash("a2")) == nil, "f2 evicted")
            #expect(try await store.session(hash: hash("r2")) == nil, "f2 evicted")
            #expect(try await store.session(hash: hash("a1b")) != nil)
            #expect(try await store.session(hash: hash("a3")) != nil)
            try await store.insertSessionPair(uid: "bob", family: hash("fb"), accessHash: hash("ab"), accessExpiresAt: Self.now + 1000,
                                              refreshHash: hash("rb"), refreshExpiresAt: Self.now + 10, maxFamilies: 1)
            #expect(try await store.session(hash: hash("a3")) != nil, "another uid's sign-ins are not alice's")
            // Reuse of a spent token revokes the whole family.
            #expect(try await store.rotateRefresh(hash: hash("r1"), now: Self.now, accessHash: hash("x"), accessExpiresAt: Self.now + 1,
                                                  refreshHash: hash("y"), refreshExpiresAt: Self.now + 1) == .reused)
            #expect(try await store.session(hash: hash("a1b")) == nil)
            #expect(try await store.session(hash: hash("r1b")) == nil)
            #expect(try await store.rotateRefresh(hash: hash("nope"), now: Self.now, accessHash: hash("x"), accessExpiresAt: Self.now + 1,
                                                  refreshHash: hash("y"), refreshExpiresAt: Self.now + 1) == .invalid)
            #expect(try await store.rotateRefresh(hash: hash("rb"), now: Self.now + 20, accessHash: hash("x"), accessExpiresAt: Self.now + 1,
                                                  refreshHash: hash("y"), refreshExpiresAt: Self.now + 1) == .invalid, "expired")
            #expect(try await store.rotateRefresh(hash: hash("a3"), now: Self.now, accessHash: hash("x"), accessExpiresAt: Self.now + 1,
                                                  refreshHash: hash("y"), refreshExpiresAt: Self.now + 1) == .invalid, "not a refresh token")
            // Rotating in a loop keeps only the latest 16 spent tokens.
            var current = "r3"
            for n in 0..<20 {
                let next = "loop\(n)"
                #expect(try await store.rotateRefresh(hash: hash(current), now: Self.now, accessHash: hash("la\(n)"), accessExpiresAt: Self.now + 1000,
                                                      refreshHash: hash(next), refreshExpiresAt: Self.now + 40_000 + Int64(n)) == .rotated(uid: "alice"))
                current = next
            }
            #expect(try await store.rotateRefresh(hash: hash("r3"), now: Self.now, accessHash: hash("x"), accessExpiresAt: Self.now + 1,
                                                  refreshHash: hash("y"), refreshExpiresAt: Self.now + 1) == .invalid, "forgotten, not reused")
            #expect(try await store.session(hash: hash("loop3"))?.spent == true, "the latest 16 spent tokens are kept")
            #expect(try await store.session(hash: hash("loop2")) == nil)
            try await store.revokeFamily(hash("f3"))
            #expect(try await store.session(hash: hash(current)) == nil)
            #expect(try await store.session(hash: hash("a3")) == nil)
            #expect(try await store.session(hash: hash("a4")) != nil)
        }
    }

    @Test(arguments: Backend.available)
    func documentsKeyBundlesAndBlockLists(_ backend: Backend) async throws {
        try await backend.withStore { store in
            #expect(try await store.document(uid: "alice") == nil)
            try await store.putDocument(uid: "alice", body: Data([0, 1, 2]), now: Self.now)
            try await store.putDocument(uid: "alice", body: Data([3, 255]), now: Self.now + 1)
            #expect(try await store.document(uid: "alice") == Data([3, 255]))
            #expect(try await store.deleteDocument(uid: "alice"))
            #expect(try await store.deleteDocument(uid: "alice") == false)
            try await store.putKeyBundle(uid: "bob", bundle: Data([9]), keyID: "k1", identityKey: "i1", now: Self.now)
            try await store.putKeyBundle(uid: "bob", bundle: Data([8, 0]), keyID: "k2", identityKey: "i1", now: Self.now)
            #expect(try await store.keyBundle(uid: "bob") == Data([8, 0]))
            await #expect(throws: StoreRefusal.staleKeys) { try await Self.create(store, id: "m1", keyID: "k1") }
            try await Self.create(store, id: "m1", keyID: "k2")
            #expect(try await store.deleteKeyBundle(uid: "bob"))
            #expect(try await store.keyBundle(uid: "bob") == nil)
            #expect(try await store.deleteKeyBundle(uid: "bob") == false)
            await #expect(throws: StoreRefusal.staleKeys) { try await Self.create(store, id: "m2", keyID: "k2") }
            // Block lists: byte order, paged after a cursor, capped.
            for author in ["b", "Z", "a", "é", "B"] { try await store.block(owner: "bob", author: author, now: Self.now, limit: 5) }
            #expect(try await store.blocked(owner: "bob", after: "", limit: 10) == ["B", "Z", "a", "b", "é"])
            #expect(try await store.blocked(owner: "bob", after: "Z", limit: 2) == ["a", "b"])
            await #expect(throws: StoreRefusal.blockListFull) { try await store.block(owner: "bob", author: "c", now: Self.now, limit: 5) }
            try await store.block(owner: "bob", author: "a", now: Self.now, limit: 5)  // already there: no refusal
            try await store.block(owner: "carol", author: "c", now: Self.now, limit: 5)
            #expect(try await store.unblock(owner: "bob", author: "a"))
            #expect(try await store.unblock(owner: "bob", author: "a") == false)
            try await store.block(owner: "bob", author: "c", now: Self.now, limit: 5)
            #expect(try await store.blocked(owner: "bob", after: "", limit: 10) == ["B", "Z", "b", "c", "é"])
            #expect(await store.isReady())
        }
    }

    /// A prekey's key text: 32 bytes of `byte`, in base64url (the store keeps the text as given).
    static func prekey(_ id: UInt32, _ byte: UInt8 = 1) -> StoredPrekey {
        StoredPrekey(id: id, key: Base64URL.encode([UInt8](repeating: byte, count: 32)))
    }

    @Test(arguments: Backend.available)
    func prekeysAreAddedIdempotentlyAllOrNothingAndBounded(_ backend: Backend) async throws {
        try await backend.withStore { store in
            #expect(try await store.prekeyCount(uid: "bob") == 0)
            #expect(try await store.addPrekeys(uid: "bob", [Self.prekey(3), Self.prekey(1), Self.prekey(2)], limit: 5, now: Self.now) == 3)
            #expect(try await store.addPrekeys(uid: "bob", [Self.prekey(3), Self.prekey(1)], limit: 5, now: Self.now) == 3,
                    "a retry of stored prekeys changes nothing")
            // Another key under a stored id refuses the whole upload, the new id of it included.
            await #expect(throws: StoreRefusal.prekeyConflict) {
                try await store.addPrekeys(uid: "bob", [Self.prekey(4), Self.prekey(2, 9)], limit: 5, now: Self.now)
            }
            #expect(try await store.prekeyCount(uid: "bob") == 3)
            // Past the limit: nothing added; at it: all added (retries do not count twice).
            await #expect(throws: StoreRefusal.tooManyPrekeys) {
                try await store.addPrekeys(uid: "bob", [Self.prekey(4), Self.prekey(5), Self.prekey(6)], limit: 5, now: Self.now)
            }
            #expect(try await store.prekeyCount(uid: "bob") == 3)
            #expect(try await store.addPrekeys(uid: "bob", [Self.prekey(1), Self.prekey(4), Self.prekey(5)], limit: 5, now: Self.now) == 5)
            #expect(try await store.addPrekeys(uid: "carol", [Self.prekey(1, 7)], limit: 5, now: Self.now) == 1, "ids are per owner")
            #expect(try await store.prekeyCount(uid: "bob") == 5)
            try await store.deletePrekeys(uid: "bob")
            #expect(try await store.prekeyCount(uid: "bob") == 0)
            try await store.deletePrekeys(uid: "bob")
            #expect(try await store.prekeyCount(uid: "carol") == 1, "another owner's are untouched")
        }
    }

    @Test(arguments: Backend.available)
    func claimsTakeTheLowestIdOnceAndHonourTheBlockList(_ backend: Backend) async throws {
        try await backend.withStore { store in
            #expect(try await store.claimPrekey(uid: "bob", claimer: "alice") == nil, "none stored")
            _ = try await store.addPrekeys(uid: "bob", [Self.prekey(4_294_967_295, 3), Self.prekey(7, 2), Self.prekey(2, 1)], limit: 10,
                                           now: Self.now)
            #expect(try await store.claimPrekey(uid: "bob", claimer: "alice")?.prekey == Self.prekey(2, 1))
            #expect(try await store.prekeyCount(uid: "bob") == 2, "a claimed prekey is erased")
            try await store.block(owner: "bob", author: "mallory", now: Self.now, limit: 10)
            await #expect(throws: StoreRefusal.blocked) { try await store.claimPrekey(uid: "bob", claimer: "mallory") }
            #expect(try await store.prekeyCount(uid: "bob") == 2, "a refused claim takes nothing")
            #expect(try await store.claimPrekey(uid: "bob", claimer: "bob")?.prekey == Self.prekey(7, 2), "the owner may claim too")
            #expect(try await store.claimPrekey(uid: "bob", claimer: "carol")?.prekey == Self.prekey(4_294_967_295, 3))
            #expect(try await store.claimPrekey(uid: "bob", claimer: "alice") == nil, "none left")
            // A claimed id may be uploaded again, with another key: it is gone, not marked.
            #expect(try await store.addPrekeys(uid: "bob", [Self.prekey(2, 5)], limit: 10, now: Self.now) == 1)
            #expect(try await store.claimPrekey(uid: "bob", claimer: "alice")?.prekey == Self.prekey(2, 5))
        }
    }

    /// A claim says how many prekeys it left, counted in its transaction; exactly the claim that
    /// leaves one fewer than the low-water mark crossed it, and none below it until an upload
    /// lifts the supply to the mark again (spec/protocol.md §8.4).
    @Test(arguments: Backend.available)
    func aClaimCountsWhatItLeftAndCrossesTheLowWaterMarkOnce(_ backend: Backend) async throws {
        try await backend.withStore { store in
            let mark = PrekeyCount.lowWater
            _ = try await store.addPrekeys(uid: "bob", (1...UInt32(mark + 2)).map { Self.prekey($0, UInt8($0)) }, limit: 200, now: Self.now)
            var crossings: [Int] = []
            for expected in (0...(mark + 1)).reversed() {
                let claimed = try #require(try await store.claimPrekey(uid: "bob", claimer: "alice"))
                #expect(claimed.remaining == expected)
                if claimed.crossedLowWater { crossings.append(claimed.remaining) }
            }
            #expect(crossings == [mark - 1])
            _ = try await store.addPrekeys(uid: "bob", (101...UInt32(100 + mark)).map { Self.prekey($0, 9) }, limit: 200, now: Self.now)
            #expect(try await store.claimPrekey(uid: "bob", claimer: "alice")?.crossedLowWater == true, "crossed again after a top-up")
        }
    }

    /// 20 claims at once over 10 prekeys, from two stores (two relays, on PostgreSQL): 10 distinct
    /// prekeys and 10 nils; nothing is handed out twice.
    @Test(arguments: Backend.available)
    func concurrentClaimsNeverShareAPrekey(_ backend: Backend) async throws {
        try await backend.withStores(2) { stores in
            _ = try await stores[0].addPrekeys(uid: "bob", (1...10).map { Self.prekey($0, UInt8($0)) }, limit: 200, now: Self.now)
            let claimed = try await withThrowingTaskGroup(of: StoredPrekey?.self) { group in
                for claim in 0..<20 {
                    group.addTask { try await stores[claim % 2].claimPrekey(uid: "bob", claimer: "claimer\(claim)")?.prekey }
                }
                var claimed: [StoredPrekey?] = []
                for try await prekey in group { claimed.append(prekey) }
                return claimed
            }
            let keys = claimed.compactMap { $0 }
            #expect(keys.count == 10 && claimed.count == 20)
            #expect(Set(keys.map(\.id)) == Set(1...10), "each prekey exactly once")
            #expect(keys.allSatisfy { $0 == Self.prekey($0.id, UInt8($0.id)) })
            #expect(try await stores[1].prekeyCount(uid: "bob") == 0)
        }
    }

    /// Claims at once that straddle the low-water mark, from two stores (two relays, on
    /// PostgreSQL): every claim counts exactly what it left — no two claims count the same
    /// number — so exactly one of them crosses the mark and the owner gets its frame. Counted
    /// each under its own snapshot, two claims from 26 would both count 25 and neither would
    /// cross (spec/protocol.md §4.14). Rounds repeat the race; each starts at the mark + 1.
    @Test(arguments: Backend.available)
    func concurrentClaimsStraddlingTheLowWaterMarkCrossItOnce(_ backend: Backend) async throws {
        try await backend.withStores(2) { stores in
            let mark = PrekeyCount.lowWater, claims = 8
            for round in 0..<8 {
                let owner = "bob\(round)"
                _ = try await stores[0].addPrekeys(uid: owner, (1...UInt32(mark + 1)).map { Self.prekey($0, UInt8($0)) },
                                                   limit: 200, now: Self.now)
                let claimed = try await withThrowingTaskGroup(of: ClaimedPrekey?.self) { group in
                    for claim in 0..<claims {
                        group.addTask { try await stores[claim % 2].claimPrekey(uid: owner, claimer: "claimer\(claim)") }
                    }
                    var claimed: [ClaimedPrekey] = []
                    for try await prekey in group { if let prekey { claimed.append(prekey) } }
                    return claimed
                }
                #expect(claimed.count == claims)
                #expect(claimed.map(\.remaining).sorted() == Array((mark + 1 - claims)...mark), "round \(round): each claim counts what it left")
                #expect(claimed.filter(\.crossedLowWater).count == 1, "round \(round): the mark is crossed exactly once")
            }
        }
    }

    @Test(arguments: Backend.available)
    func prekeysGoWithTheirBundleAndIdentity(_ backend: Backend) async throws {
        try await backend.withStore { store in
            _ = try await store.addPrekeys(uid: "bob", [Self.prekey(1)], limit: 10, now: Self.now)
            try await store.putKeyBundle(uid: "bob", bundle: Data([1]), keyID: "k1", identityKey: "i1", now: Self.now)
            #expect(try await store.prekeyCount(uid: "bob") == 1, "a first bundle replaces no identity")
            try await store.putKeyBundle(uid: "bob", bundle: Data([2]), keyID: "k2", identityKey: "i1", now: Self.now)
            #expect(try await store.prekeyCount(uid: "bob") == 1, "a new mailbox key of the same identity keeps them")
            _ = try await store.addPrekeys(uid: "carol", [Self.prekey(1)], limit: 10, now: Self.now)
            try await store.putKeyBundle(uid: "bob", bundle: Data([3]), keyID: "k3", identityKey: "i2", now: Self.now)
            #expect(try await store.prekeyCount(uid: "bob") == 0, "another identity's bundle erases the old identity's prekeys")
            #expect(try await store.keyBundle(uid: "bob") == Data([3]))
            _ = try await store.addPrekeys(uid: "bob", [Self.prekey(5)], limit: 10, now: Self.now)
            #expect(try await store.deleteKeyBundle(uid: "bob"))
            #expect(try await store.prekeyCount(uid: "bob") == 0, "withdrawing the bundle erases the prekeys")
            #expect(try await store.prekeyCount(uid: "carol") == 1, "another owner's are untouched")
        }
    }

    /// A database made before prekeys, holding a bundle and a row that does not decode: the
    /// migration gives stored bundles their identity keys, so that republishing the same identity
    /// keeps the prekeys, and an unreadable bundle counts as another identity.
    @Test(arguments: Backend.available)
    func theMigrationGivesStoredBundlesTheirIdentityKeys(_ backend: Backend) async throws {
        let identity = IdentityKeyPair()
        let bundle = Data(KeyBundle(uid: "bob", identity: identity, mailboxKey: MailboxKeyPair().publicKey).encoded())
        let rows = [("bob", bundle), ("carol", Data("{}".utf8))]
        func check(_ store: any RelayStore) async throws {
            let identityKey = Base64URL.encode(identity.publicKey.bytes)
            for uid in ["bob", "carol"] { _ = try await store.addPrekeys(uid: uid, [Self.prekey(1)], limit: 10, now: Self.now) }
            try await store.putKeyBundle(uid: "bob", bundle: bundle, keyID: "k", identityKey: identityKey, now: Self.now)
            #expect(try await store.prekeyCount(uid: "bob") == 1, "the stored bundle's identity was read")
            try await store.putKeyBundle(uid: "carol", bundle: Data([1]), keyID: "k", identityKey: identityKey, now: Self.now)
            #expect(try await store.prekeyCount(uid: "carol") == 0, "an unreadable bundle's identity counts as another")
        }
        switch backend {
        case .sqlite:
            try await Self.withSQLite(migratedTo: "v6: key ids", check) { db in
                for (uid, bundle) in rows {
                    try db.execute(sql: "INSERT INTO key_bundles (uid, bundle, updated_at) VALUES (?, ?, 1)", arguments: [uid, bundle])
                }
            }
        case .postgresql:
            try await TestDatabase.with { url in
                let store = try PostgresStore(url: url, logger: TestRelay.logger)
                do {
                    // The schema of a relay before prekeys, as its migrations left it.
                    try await Self.migrate(store, upTo: 2)
                    for (uid, bundle) in rows {
                        try await store.pool.client.query("INSERT INTO key_bundles (uid, bundle, updated_at) VALUES (\(uid), \(bundle), 1)")
                    }
                    try await store.prepare()
                    try await check(store)
                } catch {
                    await store.close()
                    throw error
                }
                await store.close()
            }
        }
    }

    /// Nodes starting at once migrate one at a time, each version once; a database migrated by a
    /// newer binary is refused with a sentence, and a running store on it is not ready.
    @Test(.enabled(if: TestDatabase.unavailable == nil, "MAILSLOT_TEST_DATABASE_URL is not set: run the tests under tools/postgres run"))
    func postgreSQLMigratesOnceAndRefusesANewerSchema() async throws {
        try await TestDatabase.with { url in
            let stores = try (0..<3).map { _ in try PostgresStore(url: url, logger: TestRelay.logger) }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for store in stores { group.addTask { try await store.prepare() } }
                try await group.waitForAll()
            }
            let versions = try await stores[0].pool.client.query("SELECT version FROM mailslot_migrations ORDER BY version")
                .collect().map { try $0.decode(Int32.self) }
            #expect(versions == PostgresSchema.migrations.map(\.version), "each version applied once")
            for store in stores { #expect(await store.isReady()) }
            let future = PostgresSchema.latestVersion + 1
            try await stores[0].pool.client.query("INSERT INTO mailslot_migrations (version, name) VALUES (\(future), 'from the future')")
            let refusal = await #expect(throws: PostgresSchema.Refusal.self) { try await PostgresStore.open(url: url, logger: TestRelay.logger) }
            #expect(refusal?.description.contains("version \(future), newer than this relay knows (\(PostgresSchema.latestVersion))") == true)
            #expect(await stores[1].isReady() == false)
            for store in stores { await store.close() }
        }
    }

    /// Random batches, each held back until it is whole (the write lock held from another
    /// connection) and so committed as one `mailslot_write_batch` statement, answer and leave the
    /// store exactly as the same writes applied one by one on the embedded store: batches whose
    /// writes interfere (one id twice, limits reached and freed, expired ids, blocks, stale keys)
    /// take the write-by-write way, batches of fresh ids the set-wise way. After each, the size
    /// counters equal the rows they count.
    @Test(.enabled(if: TestDatabase.unavailable == nil, "MAILSLOT_TEST_DATABASE_URL is not set: run the tests under tools/postgres run"))
    func postgreSQLBatchesAnswerAsTheSameWritesOneByOne() async throws {
        try await TestDatabase.with { url in
            let store = try await PostgresStore.open(url: url, logger: TestRelay.logger)
            let holder = try PostgresStore(url: url, logger: TestRelay.logger)
            let folder = FileManager.default.temporaryDirectory.appendingPathComponent("batch-reference-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: folder) }
            let reference = try SQLiteStore(path: folder.appendingPathComponent("relay.sqlite").path)
            do {
                try await Self.compareBatches(store, holder: holder, reference: reference)
                // What the relay never sends is refused, not guessed at: arrays of unequal lengths,
                // an unknown kind, a null limit (three writes each, so that the set-wise way would
                // otherwise take them).
                let batches = [("{create,create,create}", "{r0,r0}", "{10,10,10}"), ("{drop,drop,drop}", "{s0,s0,s0}", "{10,10,10}"),
                               ("{create,create,create}", "{s0,s0,s0}", "{10,NULL,10}")]
                for (kinds, recipients, maxPending) in batches {
                    await #expect(throws: PSQLError.self) {
                        try await store.pool.client.query("""
                            SELECT * FROM mailslot_write_batch(\(kinds)::text[], \(recipients)::text[], '{x1,x2,x3}', '{a0,a0,a0}',
                                '{e0,e0,e0}', '{1,1,1}', '{"","",""}', '{1,1,1}', '{2,2,2}', \(maxPending)::bigint[],
                                '{10000,10000,10000}', NULL)
                            """).collect()
                    }
                }
                #expect(try await store.messages(recipient: "s0", after: 0, limit: 1_000, maxBytes: .max, now: 0).messages
                    .allSatisfy { !$0.id.hasPrefix("x") })
            } catch {
                await holder.close()
                await store.close()
                throw error
            }
            await holder.close()
            await store.close()
        }
    }

    /// One write of the batch tests, submitted without waiting for its answer.
    private enum Write {
        case create(recipient: String, id: String, author: String, envelope: String, size: Int, keyID: String?, limits: CreateLimits)
        case erase(recipient: String, id: String, author: String?)

        /// Submits the write to `store` at once; its answer, as text, when it is committed.
        func submit(_ store: any RelayStore, now: Int64) -> Task<String, Never> {
            switch self {
            case let .create(recipient, id, author, envelope, size, keyID, limits):
                let ticket = store.createMessage(recipient: recipient, id: id, author: author, envelope: envelope, size: size,
                                                       keyID: keyID, now: now, expiresAt: now + 60_000, limits: limits)
                return Task {
                    do {
                        switch try await ticket.value {
                        case .created(_, let erasedExpired): return erasedExpired ? "created, erased expired" : "created"
                        case .duplicate: return "duplicate"
                        }
                    } catch { return "\(error)" }
                }
            case let .erase(recipient, id, author):
                let ticket = store.deleteMessage(recipient: recipient, id: id, author: author, now: now)
                return Task {
                    do { return try await ticket.value ? "erased" : "absent" } catch { return "\(error)" }
                }
            }
        }
    }

    private static func compareBatches(_ store: PostgresStore, holder: PostgresStore, reference: SQLiteStore) async throws {
        let now = Self.now
        for target in [store as any RelayStore, reference] {
            try await target.block(owner: "r2", author: "blockee", now: now, limit: 10)
            try await target.putKeyBundle(uid: "r1", bundle: Data("{}".utf8), keyID: "k1", identityKey: "ik", now: now)
            for id in ["i0", "i3"] { try await Self.create(target, to: "r0", id: id, author: "a0", now: now - 10_000, ttl: 1_000) }
        }
        // A fixed-seed generator (64-bit LCG, high bits), so that a failure can be replayed.
        var state: UInt64 = 0x6D61_696C_736C_6F74
        func random(_ count: Int) -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((state >> 33) % UInt64(count))
        }
        let tight = CreateLimits(maxPending: 4, maxAuthorBytes: 3_000)
        var fresh: [(recipient: String, id: String)] = []
        for round in 0..<16 {
            var writes: [Write] = []
            if round % 2 == 0 {
                // Interfering: a small key space, tight limits.
                for _ in 0..<(12 + random(12)) {
                    let recipient = "r\(random(3))", id = "i\(random(6))"
                    switch random(10) {
                    case 0..<6:
                        let author = ["a0", "a1", "blockee"][random(3)]
                        let keyID = [nil, nil, "k1", "k0"][random(4)]
                        let envelope = ["e0", "e1"][random(2)]
                        writes.append(.create(recipient: recipient, id: id, author: author, envelope: envelope,
                                              size: envelope == "e0" ? 512 : 700, keyID: keyID, limits: tight))
                    case 6..<8: writes.append(.erase(recipient: recipient, id: id, author: nil))
                    default: writes.append(.erase(recipient: recipient, id: id, author: ["a0", "a1"][random(2)]))
                    }
                }
            } else {
                // Independent: fresh ids, acks and unsends of earlier ones, roomy limits.
                for k in 0..<(10 + random(10)) {
                    if !fresh.isEmpty, random(3) == 0 {
                        let (recipient, id) = fresh.remove(at: random(fresh.count))
                        writes.append(.erase(recipient: recipient, id: id, author: random(2) == 0 ? nil : "a0"))
                    } else {
                        let recipient = ["s0", "s1", "r1", "r2"][random(4)]
                        let id = "f\(round)-\(k)"
                        let author = ["a0", "a0", "blockee"][random(3)]
                        writes.append(.create(recipient: recipient, id: id, author: author, envelope: "e0", size: 512,
                                              keyID: [nil, nil, "k1", "k0"][random(4)], limits: Self.roomy))
                        fresh.append((recipient, id))
                    }
                }
            }
            // The reference: one by one.
            var expected: [String] = []
            for write in writes { expected.append(await write.submit(reference, now: now).value) }
            // PostgreSQL: all in one batch, held back by the write lock until every write is queued.
            let answers = try await Self.holdingWriteLock(holder, behind: store) {
                writes.map { $0.submit(store, now: now) }
            }
            var got: [String] = []
            for answer in answers { got.append(await answer.value) }
            #expect(got == expected, "round \(round)")
            for recipient in ["r0", "r1", "r2", "s0", "s1"] {
                let stored = try await store.messages(recipient: recipient, after: 0, limit: 1_000, maxBytes: .max, now: now - 20_000)
                let kept = try await reference.messages(recipient: recipient, after: 0, limit: 1_000, maxBytes: .max, now: now - 20_000)
                #expect(stored.messages.map(\.id) == kept.messages.map(\.id), "round \(round), mailbox \(recipient)")
            }
            let counters = try await store.pool.client.query("""
                SELECT (SELECT coalesce(string_agg(recipient || '=' || stored, ',' ORDER BY recipient), '') FROM mailbox_sizes),
                       (SELECT coalesce(string_agg(recipient || '=' || n, ',' ORDER BY recipient), '')
                        FROM (SELECT recipient, count(*) AS n FROM messages GROUP BY recipient) c),
                       (SELECT coalesce(string_agg(author || '=' || bytes, ',' ORDER BY author), '') FROM author_sizes),
                       (SELECT coalesce(string_agg(author || '=' || n, ',' ORDER BY author), '')
                        FROM (SELECT author, sum(size) AS n FROM messages GROUP BY author) c)
                """).collect().first?.decode((String, String, String, String).self)
            #expect(counters?.0 == counters?.1 && counters?.2 == counters?.3, "round \(round): the size counters count the rows")
        }
    }

    /// Holds the write lock from a connection of `holder` while `submit` queues writes on `store`
    /// behind a first write already waiting for the lock, so that they all form the next batch.
    private static func holdingWriteLock<T: Sendable>(_ holder: PostgresStore, behind store: PostgresStore,
                                                      _ submit: () -> [Task<T, Never>]) async throws -> [Task<T, Never>] {
        let (release, releasing) = AsyncStream<Void>.makeStream()
        let (locked, locking) = AsyncStream<Void>.makeStream()
        let holding = Task {
            defer { locking.finish() }  // also when the lock was not taken: the wait below then fails
            try await holder.pool.client.withConnection { connection in
                try await connection.query("SELECT pg_advisory_lock(\(PostgresSchema.writeLockKey))", logger: TestRelay.logger)
                locking.finish()
                for await _ in release {}
                try await connection.query("SELECT pg_advisory_unlock(\(PostgresSchema.writeLockKey))", logger: TestRelay.logger)
            }
        }
        for await _ in locked {}
        // A first write, whose batch waits for the lock; the rest queue behind it.
        let first = store.deleteMessage(recipient: "nobody", id: "none", author: nil, now: Self.now)
        try await eventually("a batch waits for the write lock") {
            try await holder.pool.client.query("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
                .collect().first?.decode(Int64.self) ?? 0 > 0
        }
        let submitted = submit()
        releasing.finish()
        try await holding.value
        _ = try await first.value
        return submitted
    }

    /// A database URL is read strictly, and its password never appears in an error.
    @Test func databaseURLsAreCheckedAndTheirPasswordsNeverShown() throws {
        let configuration = try PostgresURL.configuration("postgresql://relay:s%40cret@[::1]:6543/mail%20slot?sslmode=disable")
        #expect(configuration.host == "::1" && configuration.port == 6543)
        #expect(configuration.username == "relay" && configuration.password == "s@cret" && configuration.database == "mail slot")
        #expect(try PostgresURL.configuration("postgres://relay@db.example/mailslot").port == 5432)
        for text in ["mysql://relay:hunter22@db/mailslot", "postgres://relay:hunter22@db", "postgres://:hunter22@db/mailslot",
                     "postgres://relay:hunter22@db/mailslot?sslmode=allow", "postgres://relay:hunter22@db/mailslot?sslrootcert=x",
                     "postgres://relay:hunter22@db:0/mailslot", "relay:hunter22@db/mailslot"] {
            #expect {
                _ = try PostgresURL.configuration(text)
            } throws: { error in
                let said = "\(error)"
                return error is RelayConfigurationError && said.contains("--database-url") && !said.contains("hunter22")
            }
        }
        #expect(PostgresURL.redacted("postgres://relay:hunter22@db/mailslot") == "postgres://relay:***@db/mailslot")
        #expect(PostgresURL.redacted("postgres://relay@db/mailslot") == "postgres://relay@db/mailslot")
    }

    /// A PostgreSQL store whose server does not answer is not ready, and says so at once rather
    /// than when the pool gives up (it never does).
    @Test func aPostgreSQLStoreWithoutItsServerIsNotReady() async throws {
        // Port 1 on loopback: nothing listens there.
        let store = try PostgresStore(url: "postgres://relay:hunter22@127.0.0.1:1/mailslot?sslmode=disable", logger: TestRelay.logger)
        let start = ContinuousClock.now
        #expect(await store.isReady() == false)
        // Bounded, not fast: without the readiness timeout the pool would retry for ever and this
        // would never return. (Generous: a loaded test machine delays timers by seconds.)
        #expect(ContinuousClock.now - start < .seconds(30), "answered once the readiness timeout passed, not never")
        await store.close()
    }

    /// The relay on PostgreSQL, end to end: a send, its live delivery on a subscription, the ack
    /// that erases it.
    @Test(.enabled(if: TestDatabase.unavailable == nil, "MAILSLOT_TEST_DATABASE_URL is not set: run the tests under tools/postgres run"))
    func aRelayOnPostgreSQLDeliversAndErases() async throws {
        try await TestDatabase.with { url in
            try await withTestRelay(configure: { $0.databaseURL = url }) { relay in
                #expect(relay.relay.store is PostgresStore)
                let alice = try await relay.signIn("alice").session
                let bob = try await relay.signIn("bob").session
                #expect(try await relay.send(alice, to: "bob", id: messageID(1)).status == 201)
                let socket = TestSocket.open(relay, "bob", session: bob)
                let ready = try #require(try await socket.next())
                #expect(ready.type == "ready" && ready.pending == 1)
                #expect(try await socket.next()?.message?.id == messageID(1), "the backlog")
                #expect(try await relay.send(alice, to: "bob", id: messageID(2)).status == 201)
                #expect(try await socket.next()?.message?.id == messageID(2), "pushed as it lands")
                for n in 1...2 {
                    try await socket.send(.ack(messageID(n)))
                    let acked = try #require(try await socket.next())
                    #expect(acked.type == "acked" && acked.id == messageID(n))
                }
                #expect(try await relay.relay.store.pendingCount(recipient: "bob", now: EpochMilliseconds.now()) == 0, "nothing is left")
                #expect(try await relay.call("GET", "/readyz").status == 200)
                await socket.close()
            }
        }
    }
}

/// A value several tasks share.
final class Shared<T: Sendable>: Sendable {
    private let state: Mutex<T>
    init(_ value: T) { state = Mutex(value) }
    var value: T { state.withLock { $0 } }
    func update(_ change: (inout T) -> Void) { state.withLock { change(&$0) } }
}

// MARK: Blobs (BlobRecords; docs/design/attachments.md §3.2, §3.5)

extension StoreContractTests {
    static let blobLimits = BlobLimits(maxAuthorBytes: 1 << 40, maxUploading: 8)

    /// A blob to create: `size` bytes in parts of 1 024, a fresh random storage key.
    static func newBlob(_ id: String, author: String = "alice", size: Int64 = 3000, recipients: [String] = ["bob", "carol"],
                        ttl: Int64 = 60, uploadExpiresAt: Int64 = now + 86_400_000) -> NewBlob {
        NewBlob(id: id, author: author, size: size, partSize: 1024, parts: Int((size + 1023) / 1024),
                storageKey: (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined(),
                ttlSeconds: ttl, uploadExpiresAt: uploadExpiresAt, recipients: recipients)
    }

    static func part(_ number: Int, _ byte: UInt8 = 1, etag: String? = nil) -> StoredPart {
        StoredPart(number: number, digest: [UInt8](repeating: byte, count: 32), etag: etag)
    }

    /// Creates `blob`, which must be new.
    @discardableResult
    static func created(_ store: any RelayStore, _ blob: NewBlob, limits: BlobLimits = blobLimits, now: Int64 = now) async throws -> StoredBlob {
        guard case .created(let stored) = try await store.createBlob(blob, limits: limits, now: now) else {
            throw Failure("\(blob.id) was not created")
        }
        return stored
    }

    /// Creates `blob`, records all its parts and completes it.
    @discardableResult
    static func completed(_ store: any RelayStore, _ blob: NewBlob, now: Int64 = now) async throws -> StoredBlob {
        try await created(store, blob, now: now)
        for number in 1...blob.parts { _ = try await store.recordPart(blob: blob.id, part: part(number), now: now) }
        guard let complete = try await store.completeBlob(id: blob.id, now: now, finish: { _ in }) else {
            throw Failure("\(blob.id) was not completed")
        }
        return complete
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    @Test(arguments: Backend.available)
    func blobsAreCreatedOnceAndATakenIdIsRefused(_ backend: Backend) async throws {
        try await backend.withStore { store in
            let blob = Self.newBlob("blob-0000000000001", recipients: ["carol", "bob"])
            let stored = try await Self.created(store, blob)
            #expect(stored.id == blob.id && stored.author == "alice" && stored.size == 3000 && stored.partSize == 1024 && stored.parts == 3)
            #expect(stored.state == .uploading && stored.storageKey == blob.storageKey && stored.uploadHandle == nil)
            #expect(stored.createdAt == Self.now && stored.uploadExpiresAt == blob.uploadExpiresAt && stored.ttlSeconds == 60)
            #expect(stored.completedAt == nil && stored.expiresAt == nil && stored.received.isEmpty)
            #expect(stored.recipients == ["bob", "carol"], "sorted")
            // A retry after a lost answer: another storage key and upload expiry, the same blob.
            #expect(try await store.createBlob(Self.newBlob(blob.id, recipients: ["bob", "carol"]), limits: Self.blobLimits, now: Self.now + 5)
                    == .existing(stored))
            for other in [Self.newBlob(blob.id, author: "mallory"), Self.newBlob(blob.id, size: 3001),
                          Self.newBlob(blob.id, recipients: ["bob"]), Self.newBlob(blob.id, recipients: ["bob", "carol", "dave"]),
                          Self.newBlob(blob.id, ttl: 61)] {
                await #expect(throws: BlobRefusal.conflict) { try await store.createBlob(other, limits: Self.blobLimits, now: Self.now) }
            }
            #expect(try await store.blob(id: blob.id, now: Self.now) == .live(stored), "nothing refused changed it")
            #expect(try await store.blob(id: "blob-0000000000002", now: Self.now) == .none)
            #expect(try await store.blobUsage(author: "alice") == (3000, 1))
            #expect(try await store.blobUsage(author: "mallory") == (0, 0))
            try await store.setBlobUploadHandle(id: blob.id, handle: "upload-1")
            guard case .live(let handled) = try await store.blob(id: blob.id, now: Self.now) else { Issue.record("gone"); return }
            #expect(handled.uploadHandle == "upload-1")
        }
    }

    /// Uploads in progress and bytes are counted per author, finished and unfinished, in the
    /// create's transaction; a refusal stores nothing, and expired blobs count for nothing.
    @Test(arguments: Backend.available)
    func blobCreatesAreBoundedPerAuthor(_ backend: Backend) async throws {
        try await backend.withStore { store in
            let limits = BlobLimits(maxAuthorBytes: 10_000, maxUploading: 2)
            try await Self.completed(store, Self.newBlob("done-0000000000001", size: 4000))
            try await Self.created(store, Self.newBlob("up-00000000000001", size: 2000), limits: limits)
            try await Self.created(store, Self.newBlob("up-00000000000002", size: 2000, uploadExpiresAt: Self.now + 100), limits: limits)
            #expect(try await store.blobUsage(author: "alice") == (8000, 2))
            await #expect(throws: BlobRefusal.tooManyUploads) {
                try await store.createBlob(Self.newBlob("up-00000000000003", size: 100), limits: limits, now: Self.now)
            }
            let roomy = BlobLimits(maxAuthorBytes: 10_000, maxUploading: 8)
            await #expect(throws: BlobRefusal.quota) {
                try await store.createBlob(Self.newBlob("up-00000000000003", size: 2001), limits: roomy, now: Self.now)
            }
            #expect(try await store.blob(id: "up-00000000000003", now: Self.now) == .none, "nothing refused is stored")
            #expect(try await store.blobUsage(author: "alice") == (8000, 2))
            #expect(try await store.blobErasures(limit: 10).isEmpty)
            // Another author has bounds of its own; exactly at the quota is allowed.
            try await Self.created(store, Self.newBlob("bob-0000000000001", author: "bob", size: 10_000), limits: limits)
            // An expired upload, not yet swept, counts for nothing: erased to make room, its erasure queued.
            let later = Self.now + 100
            let third = try await Self.created(store, Self.newBlob("up-00000000000003", size: 4000), limits: limits, now: later)
            #expect(third.createdAt == later)
            #expect(try await store.blob(id: "up-00000000000002", now: later) == .none)
            #expect(try await store.blobErasures(limit: 10).count == 1)
            #expect(try await store.blobUsage(author: "alice") == (10_000, 2))
        }
    }

    @Test(arguments: Backend.available)
    func partsAreRecordedOnceWhileUploading(_ backend: Backend) async throws {
        try await backend.withStore { store in
            let blob = Self.newBlob("blob-0000000000001", uploadExpiresAt: Self.now + 1000)
            try await Self.created(store, blob)
            guard case .recorded(let first) = try await store.recordPart(blob: blob.id, part: Self.part(2, etag: "\"e2\""), now: Self.now) else {
                Issue.record("not recorded"); return
            }
            #expect(first.received == [Self.part(2, etag: "\"e2\"")] && first.state == .uploading)
            #expect(try await store.recordPart(blob: blob.id, part: Self.part(2, etag: "\"e2\""), now: Self.now) == .same(first))
            #expect(try await store.recordPart(blob: blob.id, part: Self.part(2, 9), now: Self.now) == .conflict)
            #expect(try await store.recordPart(blob: blob.id, part: Self.part(4), now: Self.now) == .conflict, "outside the blob")
            #expect(try await store.recordPart(blob: blob.id, part: Self.part(0), now: Self.now) == .conflict, "outside the blob")
            guard case .recorded(let second) = try await store.recordPart(blob: blob.id, part: Self.part(1), now: Self.now) else {
                Issue.record("not recorded"); return
            }
            #expect(second.received.map(\.number) == [1, 2])
            #expect(try await store.blob(id: blob.id, now: Self.now) == .live(second))
            // Expired upload, erased blob, unknown blob.
            #expect(try await store.recordPart(blob: blob.id, part: Self.part(3), now: Self.now + 1000) == .gone)
            #expect(try await store.deleteBlob(id: blob.id, author: "alice", now: Self.now))
            #expect(try await store.recordPart(blob: blob.id, part: Self.part(3), now: Self.now) == .gone)
            #expect(try await store.recordPart(blob: "blob-0000000000002", part: Self.part(1), now: Self.now) == .gone)
            // A complete blob takes no more parts.
            let complete = Self.newBlob("blob-0000000000003")
            try await Self.completed(store, complete)
            #expect(try await store.recordPart(blob: complete.id, part: Self.part(1), now: Self.now) == .gone)
        }
    }

    @Test(arguments: Backend.available)
    func completionNeedsEveryPartAndRunsFinishOnce(_ backend: Backend) async throws {
        try await backend.withStore { store in
            let blob = Self.newBlob("blob-0000000000001", size: 2048)
            try await Self.created(store, blob)
            try await store.setBlobUploadHandle(id: blob.id, handle: "upload-1")
            _ = try await store.recordPart(blob: blob.id, part: Self.part(1), now: Self.now)
            let finished = Shared<[StoredBlob]>([])
            let finish: @Sendable (StoredBlob) async throws -> Void = { blob in finished.update { $0.append(blob) } }
            #expect(try await store.completeBlob(id: blob.id, now: Self.now, finish: finish) == nil, "a part is missing")
            #expect(finished.value.isEmpty)
            _ = try await store.recordPart(blob: blob.id, part: Self.part(2), now: Self.now)
            // A failing finish leaves it uploading, parts and handle kept.
            struct StorageDown: Error {}
            await #expect(throws: StorageDown.self) {
                try await store.completeBlob(id: blob.id, now: Self.now, finish: { _ in throw StorageDown() })
            }
            guard case .live(let uploading) = try await store.blob(id: blob.id, now: Self.now) else { Issue.record("gone"); return }
            #expect(uploading.state == .uploading && uploading.received.count == 2 && uploading.uploadHandle == "upload-1")
            let at = Self.now + 7
            let complete = try #require(try await store.completeBlob(id: blob.id, now: at, finish: finish))
            #expect(finished.value == [uploading], "finish saw the blob with its parts and upload handle")
            #expect(complete.state == .complete && complete.completedAt == at && complete.expiresAt == at + 60_000)
            #expect(complete.uploadHandle == nil && complete.received == uploading.received && complete.recipients == ["bob", "carol"])
            #expect(try await store.completeBlob(id: blob.id, now: at + 1, finish: finish) == complete, "found complete")
            #expect(finished.value.count == 1, "finish ran once")
            #expect(try await store.blobUsage(author: "alice") == (2048, 0), "no longer uploading, its bytes still counted")
            #expect(try await store.completeBlob(id: "blob-0000000000002", now: at, finish: finish) == nil)
            // An expired upload is not completed.
            let late = Self.newBlob("blob-0000000000003", size: 100, uploadExpiresAt: Self.now + 10)
            try await Self.created(store, late)
            _ = try await store.recordPart(blob: late.id, part: Self.part(1), now: Self.now)
            #expect(try await store.completeBlob(id: late.id, now: Self.now + 10, finish: finish) == nil)
            #expect(finished.value.count == 1)
        }
    }

    /// Two completers at once, on two stores (two relays on PostgreSQL): finish runs once, and
    /// both are answered with the complete blob.
    @Test(arguments: Backend.available)
    func concurrentCompletersRunFinishOnce(_ backend: Backend) async throws {
        try await backend.withStores(2) { stores in
            let blob = Self.newBlob("blob-0000000000001", size: 2048)
            try await Self.created(stores[0], blob)
            for number in 1...2 { _ = try await stores[0].recordPart(blob: blob.id, part: Self.part(number), now: Self.now) }
            let finishes = Shared(0), arrived = Shared(0)
            let results = try await withThrowingTaskGroup(of: StoredBlob?.self) { group in
                for store in stores {
                    group.addTask {
                        arrived.update { $0 += 1 }
                        return try await store.completeBlob(id: blob.id, now: Self.now, finish: { _ in
                            finishes.update { $0 += 1 }
                            // Held until the other completer has called too: the two overlap.
                            try await eventually("both completers called") { arrived.value == 2 }
                        })
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(finishes.value == 1)
            #expect(results.count == 2 && results.allSatisfy { $0?.state == .complete } && results[0] == results[1])
        }
    }

    @Test(arguments: Backend.available)
    func theLastAcknowledgementErasesTheBlob(_ backend: Backend) async throws {
        try await backend.withStore { store in
            let blob = Self.newBlob("blob-0000000000001")
            try await Self.created(store, blob)
            try await store.setBlobUploadHandle(id: blob.id, handle: "upload-1")
            try await Self.completed(store, Self.newBlob("blob-0000000000002"))
            #expect(try await store.acknowledgeBlob(id: blob.id, recipient: "mallory", now: Self.now) == .notRecipient)
            #expect(try await store.acknowledgeBlob(id: blob.id, recipient: "alice", now: Self.now) == .notRecipient, "the author is none")
            #expect(try await store.acknowledgeBlob(id: blob.id, recipient: "bob", now: Self.now) == .acknowledged(erased: false))
            #expect(try await store.acknowledgeBlob(id: blob.id, recipient: "bob", now: Self.now) == .notRecipient, "once")
            guard case .live(let left) = try await store.blob(id: blob.id, now: Self.now) else { Issue.record("gone"); return }
            #expect(left.recipients == ["carol"])
            #expect(try await store.blobErasures(limit: 10).isEmpty)
            #expect(try await store.acknowledgeBlob(id: blob.id, recipient: "carol", now: Self.now) == .acknowledged(erased: true))
            #expect(try await store.blob(id: blob.id, now: Self.now) == .none)
            #expect(try await store.blobErasures(limit: 10) == [BlobErasure(storageKey: blob.storageKey, uploadHandle: "upload-1")])
            #expect(try await store.acknowledgeBlob(id: blob.id, recipient: "carol", now: Self.now) == .notRecipient)
            #expect(try await store.blobUsage(author: "alice") == (3000, 0), "only the other blob is left")
            #expect(try await store.blobs(uid: "carol", role: .recipient, after: "", limit: 10, now: Self.now).map(\.id) == ["blob-0000000000002"])
        }
    }

    /// Acknowledgements racing for the last recipient, from two stores (two relays on
    /// PostgreSQL): of each blob's two, exactly one erases it. Many blobs at once, so that some
    /// pairs overlap in time whatever the machine's pace.
    @Test(arguments: Backend.available)
    func racingAcknowledgementsEraseOnce(_ backend: Backend) async throws {
        try await backend.withStores(2) { stores in
            var blobs: [StoredBlob] = []
            for n in 0..<16 { blobs.append(try await Self.completed(stores[0], Self.newBlob("blob-00000000000\(n + 10)", recipients: ["r0", "r1"]))) }
            let outcomes = try await withThrowingTaskGroup(of: (String, BlobAckOutcome).self) { group in
                for blob in blobs {
                    for (index, recipient) in ["r0", "r1"].enumerated() {
                        group.addTask { (blob.id, try await stores[index].acknowledgeBlob(id: blob.id, recipient: recipient, now: Self.now)) }
                    }
                }
                return try await group.reduce(into: [String: [BlobAckOutcome]]()) { $0[$1.0, default: []].append($1.1) }
            }
            for blob in blobs {
                let answers = outcomes[blob.id] ?? []
                #expect(answers.count == 2 && answers.contains(.acknowledged(erased: true)) && answers.contains(.acknowledged(erased: false)),
                        "\(blob.id): \(answers)")
                #expect(try await stores[1].blob(id: blob.id, now: Self.now) == .none)
            }
            #expect(Set(try await stores[1].blobErasures(limit: 100).map(\.storageKey)) == Set(blobs.map(\.storageKey)))
        }
    }

    @Test(arguments: Backend.available)
    func onlyTheAuthorDeletesABlob(_ backend: Backend) async throws {
        try await backend.withStore { store in
            let uploading = Self.newBlob("blob-0000000000001")
            try await Self.created(store, uploading)
            let complete = try await Self.completed(store, Self.newBlob("blob-0000000000002"))
            #expect(try await store.deleteBlob(id: uploading.id, author: "bob", now: Self.now) == false, "a recipient")
            #expect(try await store.deleteBlob(id: uploading.id, author: "mallory", now: Self.now) == false)
            #expect(try await store.deleteBlob(id: uploading.id, author: "alice", now: Self.now))
            #expect(try await store.deleteBlob(id: complete.id, author: "alice", now: Self.now))
            #expect(try await store.deleteBlob(id: complete.id, author: "alice", now: Self.now) == false, "once")
            #expect(try await store.blob(id: uploading.id, now: Self.now) == .none)
            #expect(Set(try await store.blobErasures(limit: 10).map(\.storageKey)) == [uploading.storageKey, complete.storageKey])
            #expect(try await store.blobUsage(author: "alice") == (0, 0))
            #expect(try await store.blobs(uid: "bob", role: .recipient, after: "", limit: 10, now: Self.now).isEmpty)
        }
    }

    @Test(arguments: Backend.available)
    func blobsAreListedByRoleInPages(_ backend: Backend) async throws {
        try await backend.withStore { store in
            for n in 1...5 { try await Self.created(store, Self.newBlob("a-blob-00000000000\(n)", recipients: n == 3 ? ["carol"] : ["bob", "carol"])) }
            try await Self.created(store, Self.newBlob("b-blob-000000000001", author: "bob", recipients: ["alice"]))
            try await Self.created(store, Self.newBlob("a-blob-000000000006", uploadExpiresAt: Self.now + 10))
            let later = Self.now + 10
            func ids(_ uid: String, _ role: BlobRole, after cursor: String = "", limit: Int = 100) async throws -> [String] {
                try await store.blobs(uid: uid, role: role, after: cursor, limit: limit, now: later).map(\.id)
            }
            #expect(try await ids("alice", .author) == (1...5).map { "a-blob-00000000000\($0)" }, "expired ones are not listed")
            #expect(try await ids("alice", .author, limit: 2) == ["a-blob-000000000001", "a-blob-000000000002"])
            #expect(try await ids("alice", .author, after: "a-blob-000000000002", limit: 2) == ["a-blob-000000000003", "a-blob-000000000004"])
            #expect(try await ids("alice", .recipient) == ["b-blob-000000000001"])
            #expect(try await ids("bob", .recipient) == ["a-blob-000000000001", "a-blob-000000000002", "a-blob-000000000004", "a-blob-000000000005"])
            #expect(try await ids("bob", .recipient, after: "a-blob-000000000001", limit: 2) == ["a-blob-000000000002", "a-blob-000000000004"])
            _ = try await store.acknowledgeBlob(id: "a-blob-000000000002", recipient: "bob", now: later)
            #expect(try await ids("bob", .recipient, limit: 2) == ["a-blob-000000000001", "a-blob-000000000004"], "acknowledged ones are not")
            #expect(try await ids("bob", .author) == ["b-blob-000000000001"])
            #expect(try await ids("mallory", .recipient).isEmpty)
            let listed = try await store.blobs(uid: "bob", role: .recipient, after: "", limit: 1, now: later)
            #expect(listed == [try #require(try await store.blob(id: "a-blob-000000000001", now: later).live)], "whole rows")
        }
    }

    @Test(arguments: Backend.available)
    func expiredBlobsAreGoneAndSweptWithTheirErasuresQueued(_ backend: Backend) async throws {
        try await backend.withStore { store in
            let upload = Self.newBlob("blob-0000000000001", size: 1000, uploadExpiresAt: Self.now + 100)
            try await Self.created(store, upload)
            let complete = try await Self.completed(store, Self.newBlob("blob-0000000000002", size: 2000, ttl: 1))
            let kept = try await Self.completed(store, Self.newBlob("blob-0000000000003", size: 4000, ttl: 2))
            #expect(try await store.sweepExpiredBlobs(now: Self.now + 99, batch: 1) == 0)
            let later = Self.now + 1000
            guard case .expired(let expired) = try await store.blob(id: upload.id, now: later) else { Issue.record("not expired"); return }
            #expect(expired.author == "alice")
            #expect(try await store.blob(id: complete.id, now: later) == .expired(complete))
            #expect(try await store.blob(id: kept.id, now: later) == .live(kept))
            #expect(try await store.acknowledgeBlob(id: complete.id, recipient: "bob", now: later) == .notRecipient, "gone for acknowledgements")
            #expect(try await store.sweepExpiredBlobs(now: later, batch: 1) == 2, "in batches of one")
            #expect(try await store.blob(id: upload.id, now: later) == .none)
            #expect(try await store.blob(id: complete.id, now: later) == .none)
            #expect(Set(try await store.blobErasures(limit: 10).map(\.storageKey)) == [upload.storageKey, complete.storageKey])
            #expect(try await store.blobUsage(author: "alice") == (4000, 0))
            #expect(try await store.sweepExpiredBlobs(now: later, batch: 64) == 0)
            // A new blob under an expired id, not yet swept, replaces it.
            try await Self.created(store, Self.newBlob("blob-0000000000004", ttl: 1, uploadExpiresAt: later))
            let again = Self.newBlob("blob-0000000000004", author: "bob")
            #expect(try await Self.created(store, again, now: later).author == "bob")
            #expect(try await store.blobErasures(limit: 10).count == 3)
        }
    }

    @Test(arguments: Backend.available)
    func blobErasuresAreQueuedOldestFirstUntilFinished(_ backend: Backend) async throws {
        try await backend.withStore { store in
            var keys: [String] = []
            for n in 1...3 {
                let blob = Self.newBlob("blob-000000000000\(n)")
                try await Self.created(store, blob)
                #expect(try await store.deleteBlob(id: blob.id, author: "alice", now: Self.now + Int64(4 - n)))
                keys.append(blob.storageKey)
            }
            #expect(try await store.blobErasures(limit: 10).map(\.storageKey) == keys.reversed())
            #expect(try await store.blobErasures(limit: 2).map(\.storageKey) == [keys[2], keys[1]])
            try await store.finishBlobErasure(storageKey: keys[1])
            try await store.finishBlobErasure(storageKey: keys[1])
            try await store.finishBlobErasure(storageKey: "unknown")
            #expect(try await store.blobErasures(limit: 10).map(\.storageKey) == [keys[2], keys[0]])
        }
    }

    /// The storage keys blob rows name, whatever the blob's state; an erased blob's key is no
    /// longer one (S3OrphanUploadSweeper aborts uploads under keys that are not).
    @Test(arguments: Backend.available)
    func storageKeysInUseAreThoseOfBlobRows(_ backend: Backend) async throws {
        try await backend.withStore { store in
            let uploading = Self.newBlob("blob-keys-uploading"), erased = Self.newBlob("blob-keys-erased000")
            let complete = try await Self.completed(store, Self.newBlob("blob-keys-complete0"))
            try await Self.created(store, uploading)
            try await Self.created(store, erased)
            #expect(try await store.deleteBlob(id: erased.id, author: "alice", now: Self.now))
            let unknown = String(repeating: "0", count: 32)
            #expect(try await store.blobStorageKeysInUse([]) == [])
            #expect(try await store.blobStorageKeysInUse([uploading.storageKey, erased.storageKey, complete.storageKey, unknown])
                    == [uploading.storageKey, complete.storageKey])
        }
    }

    /// An erasure whose queue row cannot be written erases nothing: rows and queue go together.
    @Test(arguments: Backend.available)
    func anErasureThatCannotBeQueuedErasesNothing(_ backend: Backend) async throws {
        try await backend.withStore { store in
            let acked = try await Self.completed(store, Self.newBlob("blob-0000000000001", recipients: ["bob"]))
            let deleted = try await Self.completed(store, Self.newBlob("blob-0000000000002"))
            let expiring = try await Self.completed(store, Self.newBlob("blob-0000000000003", ttl: 1))
            try await Self.refuseErasures(store, true)
            await #expect(throws: (any Error).self) { try await store.acknowledgeBlob(id: acked.id, recipient: "bob", now: Self.now) }
            await #expect(throws: (any Error).self) { try await store.deleteBlob(id: deleted.id, author: "alice", now: Self.now) }
            await #expect(throws: (any Error).self) { try await store.sweepExpiredBlobs(now: Self.now + 1000, batch: 8) }
            for blob in [acked, deleted] { #expect(try await store.blob(id: blob.id, now: Self.now) == .live(blob)) }
            #expect(try await store.blob(id: expiring.id, now: Self.now) == .live(expiring))
            #expect(try await store.blobUsage(author: "alice") == (9000, 0))
            try await Self.refuseErasures(store, false)
            #expect(try await store.acknowledgeBlob(id: acked.id, recipient: "bob", now: Self.now) == .acknowledged(erased: true))
            #expect(try await store.deleteBlob(id: deleted.id, author: "alice", now: Self.now))
            #expect(try await store.sweepExpiredBlobs(now: Self.now + 1000, batch: 8) == 1)
            #expect(try await store.blobErasures(limit: 10).count == 3)
            #expect(try await store.blobUsage(author: "alice") == (0, 0))
        }
    }

    /// A database of the release before blobs, holding a message: the blob migration (SQLite v8,
    /// PostgreSQL 5) keeps it, and the new tables and their counters work on it.
    @Test(arguments: Backend.available)
    func theBlobMigrationKeepsWhatIsStored(_ backend: Backend) async throws {
        func check(_ store: any RelayStore) async throws {
            let message = try #require(try await store.message(recipient: "bob", id: "m1", now: Self.now))
            #expect(message.author == "alice" && message.envelope == "envelope" && message.size == 512)
            #expect(try await store.pendingCount(recipient: "bob", now: Self.now) == 1)
            try await Self.completed(store, Self.newBlob("blob-0000000000001", size: 2000))
            try await Self.created(store, Self.newBlob("blob-0000000000002", size: 1000))
            #expect(try await store.blobUsage(author: "alice") == (3000, 1))
            #expect(try await Self.create(store, to: "carol", id: "m2").message.author == "alice", "messages go on")
        }
        switch backend {
        case .sqlite:
            try await Self.withSQLite(migratedTo: "v7: one-time prekeys, identity keys", check) { db in
                try db.execute(sql: """
                    INSERT INTO messages (recipient, id, author, created_at, expires_at, size, envelope)
                    VALUES ('bob', 'm1', 'alice', ?, ?, 512, 'envelope')
                    """, arguments: [Self.now, Self.now + 3_600_000])
            }
        case .postgresql:
            try await TestDatabase.with { url in
                let store = try PostgresStore(url: url, logger: TestRelay.logger)
                do {
                    try await Self.migrate(store, upTo: 4)
                    try await store.pool.client.query("""
                        INSERT INTO messages (recipient, id, author, created_at, expires_at, size, envelope)
                        VALUES ('bob', 'm1', 'alice', \(Self.now), \(Self.now + 3_600_000), 512, 'envelope')
                        """)
                    try await store.prepare()
                    try await check(store)
                } catch {
                    await store.close()
                    throw error
                }
                await store.close()
            }
        }
    }

    /// Makes every insert into the erasure queue fail (`refuse`), or lets them through again.
    static func refuseErasures(_ store: any RelayStore, _ refuse: Bool) async throws {
        switch store {
        case let store as SQLiteStore:
            try await store.pool.write { db in
                try db.execute(sql: refuse ? """
                    CREATE TRIGGER refuse_erasures BEFORE INSERT ON blob_erasures BEGIN SELECT RAISE(ABORT, 'refused'); END
                    """ : "DROP TRIGGER refuse_erasures")
            }
        case let store as PostgresStore:
            if refuse {
                try await store.pool.client.query("""
                    CREATE FUNCTION refuse_erasures() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$
                    """)
                try await store.pool.client.query("""
                    CREATE TRIGGER refuse_erasures BEFORE INSERT ON blob_erasures FOR EACH ROW EXECUTE FUNCTION refuse_erasures()
                    """)
            } else {
                try await store.pool.client.query("DROP TRIGGER refuse_erasures ON blob_erasures")
                try await store.pool.client.query("DROP FUNCTION refuse_erasures()")
            }
        default:
            throw Failure("unknown store")
        }
    }
}

extension BlobLookup {
    /// The blob, when live.
    var live: StoredBlob? {
        guard case .live(let blob) = self else { return nil }
        return blob
    }
}
