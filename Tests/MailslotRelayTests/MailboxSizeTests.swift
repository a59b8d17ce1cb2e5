import Foundation
import GRDB
import MailslotWire
import Testing
@testable import MailslotRelay

/// The pending limit reads each mailbox's size from `mailbox_sizes` (kept by triggers, `v3`), the
/// author quota each author's stored bytes from `author_sizes` (`v5`): both must follow every way
/// a message comes and goes, and the pending limit must still count only unexpired messages.
@Suite struct MailboxSizeTests {
    let envelope = Base64URL.encode([UInt8](repeating: 7, count: 128))

    private func store() throws -> (SQLiteStore, URL) {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("mailboxsize-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        return (try SQLiteStore(path: folder.appendingPathComponent("relay.sqlite").path), folder)
    }

    /// Every mailbox's size as kept, and as counted from the messages themselves.
    private func sizes(_ store: SQLiteStore) async throws -> (kept: [String: Int], counted: [String: Int]) {
        try await store.read("test") { db in
            let kept = try Row.fetchAll(db, sql: "SELECT recipient, stored FROM mailbox_sizes")
            let counted = try Row.fetchAll(db, sql: "SELECT recipient, count(*) FROM messages GROUP BY recipient")
            return (Dictionary(uniqueKeysWithValues: kept.map { ($0[0], $0[1]) }),
                    Dictionary(uniqueKeysWithValues: counted.map { ($0[0], $0[1]) }))
        }
    }

    @discardableResult
    private func create(_ store: SQLiteStore, to recipient: String, id: String, author: String = "alice", now: Int64 = 1_000,
                        expiresAt: Int64 = 100_000, maxPending: Int = 100, maxAuthorBytes: Int64 = 1 << 30) async throws -> CreateOutcome {
        try await store.createMessage(recipient: recipient, id: id, author: author, envelope: envelope, size: 128, keyID: nil, now: now,
                                      expiresAt: expiresAt, limits: CreateLimits(maxPending: maxPending, maxAuthorBytes: maxAuthorBytes)).value
    }

    /// Every author's stored bytes as kept, and as summed from the messages themselves.
    private func authorBytes(_ store: SQLiteStore) async throws -> (kept: [String: Int64], counted: [String: Int64]) {
        try await store.read("test") { db in
            let kept = try Row.fetchAll(db, sql: "SELECT author, bytes FROM author_sizes")
            let counted = try Row.fetchAll(db, sql: "SELECT author, sum(size) FROM messages GROUP BY author")
            return (Dictionary(uniqueKeysWithValues: kept.map { ($0[0], $0[1]) }),
                    Dictionary(uniqueKeysWithValues: counted.map { ($0[0], $0[1]) }))
        }
    }

    @Test func authorBytesFollowEveryMessageInEveryMailboxAndBoundTheAuthor() async throws {
        let (store, folder) = try store()
        defer { try? FileManager.default.removeItem(at: folder) }
        let quota: Int64 = 4 * 128
        // Spread over mailboxes: the per-mailbox limit would never stop this author.
        for (n, recipient) in ["bob", "carol", "dave"].enumerated() {
            try await create(store, to: recipient, id: "a\(n)", maxAuthorBytes: quota)
        }
        try await create(store, to: "erin", id: "short", expiresAt: 2_000, maxAuthorBytes: quota)
        try await create(store, to: "bob", id: "a0", maxAuthorBytes: quota)  // an identical retry is answered, not counted
        await #expect(throws: StoreRefusal.authorQuota) { try await create(store, to: "frank", id: "a4", maxAuthorBytes: quota) }
        try await create(store, to: "frank", id: "m0", author: "mallory", maxAuthorBytes: quota)  // another author's quota is her own
        #expect(try await authorBytes(store).kept == ["alice": 512, "mallory": 128])

        // An acknowledgement frees its bytes; so does an unsend, and the sweep of an expired one.
        #expect(try await store.deleteMessage(recipient: "bob", id: "a0", author: nil, now: 1_000).value)
        try await create(store, to: "frank", id: "a4", maxAuthorBytes: quota)
        #expect(try await store.deleteMessage(recipient: "carol", id: "a1", author: "alice", now: 1_000).value)
        #expect(try await store.sweepExpired(now: 3_000) == 1)
        let bytes = try await authorBytes(store)
        #expect(bytes.kept == ["alice": 256, "mallory": 128])
        #expect(bytes.kept == bytes.counted)
        for n in 0..<2 { try await create(store, to: "grace", id: "b\(n)", now: 3_000, maxAuthorBytes: quota) }
        await #expect(throws: StoreRefusal.authorQuota) { try await create(store, to: "grace", id: "b2", now: 3_000, maxAuthorBytes: quota) }
    }

    @Test func theSweepErasesInBatchesAndLeavesTheUnexpired() async throws {
        let (store, folder) = try store()
        defer { try? FileManager.default.removeItem(at: folder) }
        for n in 0..<25 { try await create(store, to: "bob", id: "e\(n)", expiresAt: 2_000) }
        for n in 0..<3 { try await create(store, to: "bob", id: "k\(n)") }
        // 25 expired in batches of 4 rows (or 300 bytes, whichever comes first: 3 rows of 128).
        #expect(try await store.sweepExpired(now: 3_000, batch: 4, batchBytes: 300) == 25)
        #expect(try await store.pendingCount(recipient: "bob", now: 3_000) == 3)
        #expect(try await sizes(store).kept == ["bob": 3])
        #expect(try await store.sweepExpired(now: 3_000, batch: 4) == 0)
    }

    @Test func theSizeFollowsCreatesErasuresSweepsAndTheLastMessageLeavesNoRow() async throws {
        let (store, folder) = try store()
        defer { try? FileManager.default.removeItem(at: folder) }
        for n in 0..<5 { try await create(store, to: "bob", id: "m\(n)") }
        for n in 0..<3 { try await create(store, to: "carol", id: "m\(n)", expiresAt: 2_000) }
        try await create(store, to: "bob", id: "m0")  // an identical retry stores nothing
        var sizes = try await sizes(store)
        #expect(sizes.kept == ["bob": 5, "carol": 3])
        #expect(sizes.kept == sizes.counted)

        #expect(try await store.deleteMessage(recipient: "bob", id: "m1", author: nil, now: 1_000).value)
        #expect(try await store.deleteMessage(recipient: "bob", id: "m2", author: "alice", now: 1_000).value)
        #expect(try await !store.deleteMessage(recipient: "bob", id: "m3", author: "mallory", now: 1_000).value, "not hers: nothing erased")
        #expect(try await store.sweepExpired(now: 3_000) == 3)
        sizes = try await self.sizes(store)
        #expect(sizes.kept == ["bob": 3], "carol's mailbox is empty, and no row says she had one")
        #expect(sizes.kept == sizes.counted)
        #expect(try await store.pendingCount(recipient: "bob", now: 3_000) == 3)
        #expect(try await store.pendingCount(recipient: "carol", now: 3_000) == 0)
    }

    @Test func expiredMessagesNotYetSweptDoNotCountTowardTheLimit() async throws {
        let (store, folder) = try store()
        defer { try? FileManager.default.removeItem(at: folder) }
        try await create(store, to: "bob", id: "short0", expiresAt: 2_000, maxPending: 3)
        try await create(store, to: "bob", id: "short1", expiresAt: 2_000, maxPending: 3)
        try await create(store, to: "bob", id: "long", maxPending: 3)
        // Another mailbox's expired messages are not bob's.
        try await create(store, to: "carol", id: "short", expiresAt: 2_000, maxPending: 3)

        await #expect(throws: StoreRefusal.mailboxFull) { try await create(store, to: "bob", id: "more", maxPending: 3) }
        #expect(try await store.pendingCount(recipient: "bob", now: 1_500) == 3)

        // Later the two short ones have expired, unswept: two places are free.
        #expect(try await store.pendingCount(recipient: "bob", now: 2_500) == 1)
        try await create(store, to: "bob", id: "more0", now: 2_500, maxPending: 3)
        try await create(store, to: "bob", id: "more1", now: 2_500, maxPending: 3)
        await #expect(throws: StoreRefusal.mailboxFull) { try await create(store, to: "bob", id: "more2", now: 2_500, maxPending: 3) }
        let sizes = try await sizes(store)
        #expect(sizes.kept == ["bob": 5, "carol": 1])
        #expect(sizes.kept == sizes.counted)
    }

    @Test func theMigrationCountsMessagesStoredBeforeIt() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("mailboxsize-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let path = folder.appendingPathComponent("relay.sqlite").path
        do {
            let queue = try DatabaseQueue(path: path)
            try Schema.migrator.migrate(queue, upTo: "v2: messages by mailbox and expiry")
            try await queue.write { db in
                for (n, recipient) in ["bob", "bob", "carol", "bob"].enumerated() {
                    try db.execute(sql: """
                        INSERT INTO messages (recipient, id, author, created_at, expires_at, size, envelope) VALUES (?, ?, 'alice', 1000, 100000, 128, ?)
                        """, arguments: [recipient, "m\(n)", Data(repeating: 7, count: 128)])
                }
            }
        }
        let store = try SQLiteStore(path: path)
        let sizes = try await sizes(store)
        #expect(sizes.kept == ["bob": 3, "carol": 1])
        #expect(try await authorBytes(store).kept == ["alice": 4 * 128])
        await #expect(throws: StoreRefusal.mailboxFull) { try await create(store, to: "bob", id: "more", maxPending: 3) }
        try await create(store, to: "carol", id: "more", maxPending: 3)
    }
}
