import Foundation
import GRDB
import MailslotWire
import Synchronization

/// The relay's embedded store (``RelayStore``), on SQLite through GRDB: WAL journal,
/// `secure_delete` on every connection so that erased rows are overwritten with zeros, and
/// versioned migrations (``Schema``).
///
/// Times are milliseconds since the epoch and are passed in, so tests control the clock.
final class SQLiteStore: RelayStore {
    let pool: DatabasePool
    let path: String
    let metrics: RelayMetrics?
    /// The data folder's free space; nil for a store without one (some tests).
    let diskSpace: DiskSpace?
    /// The hot writes (creates, acks) share transactions under load.
    private let group: GroupCommit
    let commits = CommitObservers()
    /// The least time between two wake-ups of one registration, in ms (`--push-wake-interval`).
    let wakeInterval: Int64
    /// The uids that have (or had, since start) push registrations: a create to anyone else
    /// skips the wake-up statement. One process owns an SQLite store, so this misses no one; a
    /// uid left here after its last registration went costs one empty statement per create.
    let wakeUIDs: Mutex<Set<String>>

    /// Opens (creating when needed) the database at `path` and runs pending migrations.
    /// `wakeInterval`: the least time between two wake-ups of one registration (design §2.1).
    init(path: String, durability: RelayConfiguration.Durability = .normal, metrics: RelayMetrics? = nil, diskSpace: DiskSpace? = nil,
         wakeInterval: Duration = .seconds(30)) throws {
        var configuration = Configuration()
        configuration.prepareDatabase { db in
            // Overwrite deleted content with zeros, in the main file and in WAL frames written after.
            try db.execute(sql: "PRAGMA secure_delete = ON")
        }
        configuration.busyMode = .timeout(5)
        pool = try DatabasePool(path: path, configuration: configuration)
        group = GroupCommit(pool: pool, diskSpace: diskSpace)
        self.path = path
        self.metrics = metrics
        self.diskSpace = diskSpace
        // GRDB sets the writer to NORMAL after prepareDatabase; the choice is made here, once,
        // on the pool's single writer connection.
        try pool.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA synchronous = \(durability == .full ? "FULL" : "NORMAL")")
        }
        try Schema.migrator.migrate(pool)
        self.wakeInterval = wakeInterval.wholeMilliseconds
        wakeUIDs = Mutex(Set(try pool.read { db in try String.fetchAll(db, sql: "SELECT DISTINCT uid FROM push_registrations") }))
    }

    /// A write transaction, timed as `operation` (a fixed name, never data).
    func write<T: Sendable>(_ operation: String, _ updates: @escaping @Sendable (Database) throws -> T) async throws -> T {
        let start = ContinuousClock.now
        defer { metrics?.store(operation, ContinuousClock.now - start) }
        return try await DiskSpace.retryingWhenFull(diskSpace) { try await pool.write(updates) }
    }

    /// A write that shares a transaction with others arriving meanwhile (``GroupCommit``), queued
    /// at once: writes submitted one after another are applied in that order. Timed as
    /// `operation`, from submission to commit.
    func groupSubmit<T: Sendable>(_ operation: String, _ updates: @escaping @Sendable (Database) throws -> T,
                                  committed: (@Sendable (T) -> Void)? = nil) -> CommitTicket<T> {
        let start = ContinuousClock.now
        return group.submit(updates, committed: committed, finished: { [metrics] in metrics?.store(operation, ContinuousClock.now - start) })
    }

    /// A read, timed as `operation`.
    func read<T: Sendable>(_ operation: String, _ value: @escaping @Sendable (Database) throws -> T) async throws -> T {
        let start = ContinuousClock.now
        defer { metrics?.store(operation, ContinuousClock.now - start) }
        return try await pool.read(value)
    }

    /// Whether the store can take writes: migrations complete and a write transaction opens.
    func isReady() async -> Bool {
        do {
            return try await pool.writeWithoutTransaction { db in
                // IMMEDIATE takes the write lock, as a create would; nothing is written.
                var completed = false
                try db.inTransaction(.immediate) {
                    completed = try Schema.migrator.hasCompletedMigrations(db)
                    return .rollback
                }
                return completed
            }
        } catch {
            return false
        }
    }

    /// All mailboxes together: pending (unexpired) messages and the creation time of the oldest.
    func pendingSummary(now: Int64) async throws -> (count: Int, oldestCreatedAt: Int64?) {
        try await read("pending_summary") { db in
            let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT count(*), min(created_at) FROM messages WHERE expires_at > ?"), arguments: [now])
            return (row?[0] ?? 0, row?[1])
        }
    }

    // MARK: Messages

    /// Stores a message unless its id is taken, the author is blocked, `keyID` (when given) is not
    /// the recipient's published keys', space is short, or the mailbox or author is at its limit
    /// — checked after the duplicate, in the same transaction, so an identical retry is answered
    /// even then. Each message created is published (``commits``) once committed, in commit
    /// (`seq`) order. `envelope` is its base64url text, `size` the number of bytes that text
    /// stands for. Queued at once (``groupSubmit(_:_:committed:)``).
    ///
    /// A created message with `wake` inserts a wake-up row per registration of the recipient, in
    /// the same transaction (design §2.2); an identical retry inserts none.
    func createMessage(recipient: String, id: String, author: String, envelope: String, size: Int, keyID: String? = nil, now: Int64,
                       expiresAt: Int64, limits: CreateLimits, wake: Bool = true) -> CommitTicket<CreateOutcome> {
        let create = MessageCreate(recipient: recipient, id: id, author: author, envelope: envelope, size: size, keyID: keyID,
                                   expiresAt: expiresAt)
        // Read once, outside the transaction: a registration committed after this create was
        // queued wakes for the next message only, as it would had the create committed first.
        let waking = wake && wakeUIDs.withLock { $0.contains(recipient) }
        return groupSubmit("create_message", createStep(create, now: now, limits: limits, waking: waking),
                           committed: { [commits] outcome in
            if case .created(let message, _) = outcome { commits.publish(.created(message, wakeups: waking)) }
        })
    }

    /// Queues `creates` as one unit (``GroupCommit/submitMany(_:committed:finished:)``): each is
    /// the step of ``createMessage(recipient:id:author:envelope:size:keyID:now:expiresAt:limits:wake:)``,
    /// in its own savepoint, applied in order in one transaction.
    func createMessages(_ creates: [MessageCreate], now: Int64, limits: CreateLimits, wake: Bool) -> [CommitTicket<CreateOutcome>] {
        let waking = wakeUIDs.withLock { uids in creates.map { wake && uids.contains($0.recipient) } }
        let steps = zip(creates, waking).map { createStep($0, now: now, limits: limits, waking: $1) }
        let start = ContinuousClock.now
        return group.submitMany(steps, committed: { [commits] index, outcome in
            if case .created(let message, _) = outcome { commits.publish(.created(message, wakeups: waking[index])) }
        }, finished: { [metrics] in metrics?.store("create_message", ContinuousClock.now - start) })
    }

    /// One create's step inside the group commit's transaction: the id in that mailbox (expired →
    /// erased now; same author and envelope → a duplicate; otherwise a conflict), the block list,
    /// the key id, the disk, the mailbox's pending count, the author's bytes, then the insert and,
    /// when `waking`, its wake-up rows.
    private func createStep(_ create: MessageCreate, now: Int64, limits: CreateLimits,
                            waking: Bool) -> @Sendable (Database) throws -> CreateOutcome {
        let (recipient, id, author, envelope, size, keyID, expiresAt) =
            (create.recipient, create.id, create.author, create.envelope, create.size, create.keyID, create.expiresAt)
        return { [diskSpace, wakeInterval] db in
            // Every create runs these statements: they go through DirectStatement's binding.
            var erasedExpired = false
            if let existing = try db.cachedStatement(sql: "SELECT seq, expires_at FROM messages WHERE recipient = ? AND id = ?")
                .run(.text(recipient), .text(id), row: { (seq: $0.int64(0), expiresAt: $0.int64(1)) }) {
                if existing.expiresAt <= now {
                    // Expired but not swept yet: it is gone for every purpose, so erase it now.
                    try db.cachedStatement(sql: "DELETE FROM messages WHERE seq = ?").run(.integer(existing.seq))
                    erasedExpired = true
                } else {
                    let stored = try Row.fetchOne(db.cachedStatement(sql: "SELECT \(StoredMessage.columns) FROM messages WHERE seq = ?"),
                                                  arguments: [existing.seq]).map(StoredMessage.init(row:))
                    guard let stored, stored.author == author, stored.envelope == envelope else { throw StoreRefusal.conflict }
                    return .duplicate(stored)
                }
            }
            if try db.cachedStatement(sql: "SELECT 1 FROM blocked WHERE owner = ? AND author = ?")
                .run(.text(recipient), .text(author), row: { _ in true }) != nil {
                throw StoreRefusal.blocked
            }
            if let keyID {
                // No bundle, or one without a key id, names no keys: stale as well.
                let current = try db.cachedStatement(sql: "SELECT key_id FROM key_bundles WHERE uid = ?")
                    .run(.text(recipient), row: { $0.optionalText(0) }) ?? nil
                // Key ids are public (anyone may fetch the bundle): no need for a constant-time compare.
                guard current == keyID else { throw StoreRefusal.staleKeys }
            }
            // Checked after the duplicate: an identical retry of a stored message is answered even now.
            guard diskSpace?.admitsCreates() ?? true else { throw StoreRefusal.storageFull }
            guard try Self.pending(db, recipient: recipient, now: now, atLeast: limits.maxPending) < limits.maxPending else {
                throw StoreRefusal.mailboxFull
            }
            // The author's stored bytes in all mailboxes (kept by the `v5` triggers): one lookup.
            let authorBytes = try db.cachedStatement(sql: "SELECT bytes FROM author_sizes WHERE author = ?")
                .run(.text(author), row: { $0.int64(0) }) ?? 0
            guard authorBytes + Int64(size) <= limits.maxAuthorBytes else { throw StoreRefusal.authorQuota }
            try db.cachedStatement(sql: """
                INSERT INTO messages (recipient, id, author, created_at, expires_at, size, envelope)
                VALUES (?, ?, ?, ?, ?, ?, ?)
                """).run(.text(recipient), .text(id), .text(author), .integer(now), .integer(expiresAt),
                          .integer(Int64(size)), .text(envelope))
            let seq = db.lastInsertedRowID
            if waking { try Self.queueWakeups(db, recipient: recipient, seq: seq, now: now, interval: wakeInterval) }
            let stored = StoredMessage(seq: seq, recipient: recipient, id: id, author: author, createdAt: now,
                                       expiresAt: expiresAt, envelope: envelope, size: size)
            return .created(stored, erasedExpired: erasedExpired)
        }
    }

    /// The unexpired message `id` of `recipient`'s mailbox.
    func message(recipient: String, id: String, now: Int64) async throws -> StoredMessage? {
        try await read("message") { db in
            try Row.fetchOne(db.cachedStatement(sql: "SELECT \(StoredMessage.columns) FROM messages WHERE recipient = ? AND id = ? AND expires_at > ?"),
                             arguments: [recipient, id, now]).map(StoredMessage.init(row:))
        }
    }

    /// Unexpired messages of a mailbox after `seq`, oldest first: at most `limit`, and no more
    /// than `maxBytes` of envelope text unless the first alone is larger. `more`: a message
    /// after the last one returned is waiting (as far as this read could tell).
    func messages(recipient: String, after seq: Int64, limit: Int, maxBytes: Int = .max,
                  now: Int64) async throws -> (messages: [StoredMessage], more: Bool) {
        try await read("messages") { db in
            let rows = try Row.fetchCursor(db.cachedStatement(sql: """
                SELECT \(StoredMessage.columns) FROM messages WHERE recipient = ? AND seq > ? AND expires_at > ? ORDER BY seq LIMIT ?
                """), arguments: [recipient, seq, now, limit + 1])
            var page: [StoredMessage] = []
            var bytes = 0
            while let row = try rows.next() {
                let message = StoredMessage(row: row)
                bytes += message.envelope.utf8.count
                guard page.count < limit, page.isEmpty || bytes <= maxBytes else { return (page, true) }
                page.append(message)
            }
            return (page, false)
        }
    }

    /// The number of unexpired messages waiting in a mailbox.
    func pendingCount(recipient: String, now: Int64) async throws -> Int {
        try await read("pending_count") { db in try Self.pending(db, recipient: recipient, now: now) }
    }

    /// The unexpired messages of a mailbox: its stored rows (kept by the `v3` triggers) less the
    /// expired ones the sweeper has not erased yet. With `atLeast`, a mailbox storing fewer rows
    /// than that is answered from its row count alone — the common case of every create.
    private static func pending(_ db: Database, recipient: String, now: Int64, atLeast limit: Int = 0) throws -> Int {
        let stored = try db.cachedStatement(sql: "SELECT stored FROM mailbox_sizes WHERE recipient = ?")
            .run(.text(recipient), row: { Int($0.int64(0)) }) ?? 0
        guard stored > 0, stored >= limit else { return stored }
        // Through the expiry index, so the cost is the sweeper's backlog, not the mailbox's size.
        let expired = try Int.fetchOne(db.cachedStatement(sql: """
            SELECT count(*) FROM messages INDEXED BY messages_by_expiry WHERE expires_at <= ? AND recipient = ?
            """), arguments: [now, recipient]) ?? 0
        return stored - expired
    }

    /// Erases message `id` of `recipient`'s mailbox — only if `author` wrote it, when given (an
    /// unsend must not erase a newer message that reuses the id). True if an unexpired message
    /// was erased; an expired one is erased too, but reported as absent. Queued at once; an
    /// unexpired message erased is published (``commits``).
    func deleteMessage(recipient: String, id: String, author: String? = nil, now: Int64) -> CommitTicket<Bool> {
        groupSubmit("delete_message", { db in
            let author: SQLArgument = author.map { .text($0) } ?? .null
            let expiresAt = try db.cachedStatement(sql: """
                DELETE FROM messages WHERE recipient = ? AND id = ? AND (? IS NULL OR author = ?) RETURNING expires_at
                """).run(.text(recipient), .text(id), author, author, row: { $0.int64(0) })
            guard let expiresAt else { return false }
            return expiresAt > now
        }, committed: { [commits] erased in
            if erased { commits.publish(.erased(recipient: recipient, id: id)) }
        })
    }

    /// Takes (`until` set) or releases (`until` nil) the processing lease on a message, as
    /// `holder`. A running lease of another holder is never overwritten: that is what lets several
    /// workers share one mailbox without doing the same message twice.
    func setLease(recipient: String, id: String, until: Int64?, holder: String, now: Int64) async throws -> LeaseOutcome {
        try await write("set_lease") { db in
            guard let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT \(StoredMessage.columns) FROM messages WHERE recipient = ? AND id = ? AND expires_at > ?"),
                                             arguments: [recipient, id, now]) else { return .notFound }
            let current = StoredMessage(row: row)
            if let leaseUntil = current.leaseUntil, leaseUntil > now, current.leaseHolder != holder { return .held }
            try db.execute(sql: "UPDATE messages SET lease_until = ?, lease_holder = ? WHERE seq = ?",
                           arguments: [until, until == nil ? nil : holder, current.seq])
            let updated = try Row.fetchOne(db.cachedStatement(sql: "SELECT \(StoredMessage.columns) FROM messages WHERE seq = ?"), arguments: [current.seq])!
            return .updated(StoredMessage(row: updated))
        }
    }

    /// Erases every expired message and session, and the push registrations of sign-ins that
    /// ended, in transactions of at most `batch` rows and
    /// about `batchBytes` of envelopes each, so that no other write waits long behind a sweep
    /// (erasing overwrites every page of an envelope). The number of messages erased.
    func sweepExpired(now: Int64, batch: Int = 256, batchBytes: Int = 512 * 1024) async throws -> Int {
        var erased = 0
        while true {
            let count = try await write("sweep_expired") { db in
                var seqs: [Int64] = []
                var bytes = 0
                let expired = try Row.fetchCursor(db.cachedStatement(sql: """
                    SELECT seq, size FROM messages INDEXED BY messages_by_expiry WHERE expires_at <= ? ORDER BY expires_at LIMIT ?
                    """), arguments: [now, batch])
                while let row = try expired.next(), seqs.isEmpty || bytes < batchBytes {
                    seqs.append(row[0])
                    bytes += row[1] as Int
                }
                let delete = try db.cachedStatement(sql: "DELETE FROM messages WHERE seq = ?")
                for seq in seqs { try delete.run(.integer(seq)) }
                return seqs.count
            }
            erased += count
            if count == 0 || Task.isCancelled { break }
        }
        // Expired sessions are kept a day, so that using one says `session_expired`, not `unauthenticated`.
        while try await write("sweep_sessions", { db in
            try db.cachedStatement(sql: """
                DELETE FROM sessions WHERE hash IN (SELECT hash FROM sessions WHERE expires_at <= ? LIMIT ?)
                """).execute(arguments: [now - 24 * 3600 * 1000, batch * 4])
            return db.changesCount
        }) == batch * 4 {}
        // Push registrations whose sign-in ended without a sign-out (design §1.5).
        while try await sweepPushRegistrations(now: now, batch: PushRegistrationRow.sweepBatch) == PushRegistrationRow.sweepBatch,
              !Task.isCancelled {}
        return erased
    }

    /// Copies the WAL into the main file and truncates the WAL to zero bytes, so that erased
    /// content is gone from both files. False when readers kept it from completing (try later).
    @discardableResult
    func checkpoint() async throws -> Bool {
        // The barrier waits for running reads, so the truncation is not kept busy by them.
        try await pool.barrierWriteWithoutTransaction { db in
            let row = try Row.fetchOne(db.cachedStatement(sql: "PRAGMA wal_checkpoint(TRUNCATE)"))
            let busy: Int = row?[0] ?? 1
            return busy == 0
        }
    }

    // MARK: Documents, key bundles, block lists

    func document(uid: String) async throws -> Data? {
        try await read("document") { db in try Data.fetchOne(db.cachedStatement(sql: "SELECT body FROM documents WHERE uid = ?"), arguments: [uid]) }
    }

    func putDocument(uid: String, body: Data, now: Int64) async throws {
        try await write("put_document") { db in
            try db.cachedStatement(sql: """
                INSERT INTO documents (uid, body, updated_at) VALUES (?, ?, ?)
                ON CONFLICT (uid) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at
                """).execute(arguments: [uid, body, now])
        }
    }

    func keyBundle(uid: String) async throws -> Data? {
        try await read("key_bundle") { db in try Data.fetchOne(db.cachedStatement(sql: "SELECT bundle FROM key_bundles WHERE uid = ?"), arguments: [uid]) }
    }

    /// Publishes `uid`'s verified bundle with its key id (``KeyBundle/keyID``) and identity key;
    /// a bundle of another identity than the stored one erases `uid`'s prekeys with it.
    func putKeyBundle(uid: String, bundle: Data, keyID: String, identityKey: String, now: Int64) async throws {
        try await write("put_key_bundle") { db in
            let stored = try Row.fetchOne(db.cachedStatement(sql: "SELECT identity_key FROM key_bundles WHERE uid = ?"), arguments: [uid])
            // Identity keys are public: no need for a constant-time compare.
            if let stored, stored["identity_key"] as String? != identityKey {
                try db.cachedStatement(sql: "DELETE FROM prekeys WHERE uid = ?").execute(arguments: [uid])
            }
            try db.cachedStatement(sql: """
                INSERT INTO key_bundles (uid, bundle, key_id, identity_key, updated_at) VALUES (?, ?, ?, ?, ?)
                ON CONFLICT (uid) DO UPDATE SET bundle = excluded.bundle, key_id = excluded.key_id,
                    identity_key = excluded.identity_key, updated_at = excluded.updated_at
                """).execute(arguments: [uid, bundle, keyID, identityKey, now])
        }
    }

    @discardableResult
    func deleteDocument(uid: String) async throws -> Bool {
        try await write("delete_document") { db in
            try db.cachedStatement(sql: "DELETE FROM documents WHERE uid = ?").execute(arguments: [uid])
            return db.changesCount > 0
        }
    }

    @discardableResult
    func deleteKeyBundle(uid: String) async throws -> Bool {
        try await write("delete_key_bundle") { db in
            try db.cachedStatement(sql: "DELETE FROM key_bundles WHERE uid = ?").execute(arguments: [uid])
            let deleted = db.changesCount > 0
            // The prekeys belonged to the keys now withdrawn.
            try db.cachedStatement(sql: "DELETE FROM prekeys WHERE uid = ?").execute(arguments: [uid])
            return deleted
        }
    }

    /// The authors `owner` has blocked, in byte order, after `cursor`; at most `limit`.
    func blocked(owner: String, after cursor: String, limit: Int) async throws -> [String] {
        try await read("blocked") { db in
            try String.fetchAll(db.cachedStatement(sql: "SELECT author FROM blocked WHERE owner = ? AND author > ? ORDER BY author LIMIT ?"),
                                arguments: [owner, cursor, limit])
        }
    }

    /// Blocks `author` for `owner`, unless the block list already holds `limit` entries.
    func block(owner: String, author: String, now: Int64, limit: Int) async throws {
        try await write("block") { db in
            let count = try Int.fetchOne(db.cachedStatement(sql: "SELECT count(*) FROM blocked WHERE owner = ?"), arguments: [owner]) ?? 0
            if count >= limit,
               try Bool.fetchOne(db.cachedStatement(sql: "SELECT 1 FROM blocked WHERE owner = ? AND author = ?"), arguments: [owner, author]) == nil {
                throw StoreRefusal.blockListFull
            }
            try db.execute(sql: "INSERT OR IGNORE INTO blocked (owner, author, created_at) VALUES (?, ?, ?)",
                           arguments: [owner, author, now])
        }
    }

    @discardableResult
    func unblock(owner: String, author: String) async throws -> Bool {
        try await write("unblock") { db in
            try db.cachedStatement(sql: "DELETE FROM blocked WHERE owner = ? AND author = ?").execute(arguments: [owner, author])
            return db.changesCount > 0
        }
    }
}
