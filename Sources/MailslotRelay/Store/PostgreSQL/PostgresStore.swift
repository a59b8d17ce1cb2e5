import Foundation
import Logging
import PostgresNIO

/// The relay's store on PostgreSQL (``RelayStore``), through a pooled `PostgresClient`, for relays
/// that share one database. Selected by `--database-url`; the tables are ``PostgresSchema``'s.
///
/// The client's `run()` (its pool) runs in a task this store owns, from `init` until ``close()``,
/// rather than as a service of the relay's ServiceGroup: the store outlives the group — the
/// subscriptions' last acks and the final ``checkpoint()`` come after the server stopped — and a
/// store used without a relay (the tests) needs it too. ``prepare()`` applies the migrations
/// before the relay serves.
///
/// Creates and erasures share transactions (``PostgresGroupCommit``); the other writes run in
/// transactions of their own. Times are milliseconds since the epoch, passed in.
final class PostgresStore: RelayStore {
    let pool: PostgresPool
    let metrics: RelayMetrics?
    let logger: Logger
    /// The database's URL with its password replaced (``PostgresURL/redacted(_:)``), for messages.
    let location: String
    /// No local disk to watch: the database server's space is its operator's.
    var diskSpace: DiskSpace? { nil }
    private let group: PostgresGroupCommit
    let commits = CommitObservers()
    /// What this relay tells the others sharing the database, and hears from them.
    let notifications: PostgresNotifications
    var cluster: (any ClusterSignals)? { notifications }
    /// The least time between two wake-ups of one registration, in ms (`--push-wake-interval`).
    let wakeInterval: Int64

    /// A store on the database at `url` (``PostgresURL``); nothing is connected until it is used.
    /// Throws a ``RelayConfigurationError`` (without the password) for a URL it cannot read.
    /// `wakeInterval`: the least time between two wake-ups of one registration (design §2.1).
    init(url: String, metrics: RelayMetrics? = nil, logger: Logger, wakeInterval: Duration = .seconds(30)) throws {
        let configuration = try PostgresURL.configuration(url)
        var logger = logger
        // The driver logs statements and their bound values below `info`: envelopes and session
        // hashes have no place in a log.
        if logger.logLevel < .info { logger.logLevel = .info }
        let pool = PostgresPool(configuration: configuration, maximumConnections: Self.poolSize, name: "mailslot-relay", logger: logger)
        self.pool = pool
        self.metrics = metrics
        self.logger = logger
        location = PostgresURL.redacted(url)
        let node = ClusterNotification.newNode()
        notifications = PostgresNotifications(node: node, pool: pool, configuration: configuration, metrics: metrics, logger: logger)
        self.wakeInterval = wakeInterval.wholeMilliseconds
        group = PostgresGroupCommit(pool: pool, node: node, wakeInterval: self.wakeInterval, logger: logger) {
            metrics?.clusterNotificationsSent.increment()
        }
    }

    /// Connections each relay opens to the database at most (besides its listening one).
    static let poolSize = 16

    /// A store on `url`, migrated and ready.
    static func open(url: String, metrics: RelayMetrics? = nil, logger: Logger, wakeInterval: Duration = .seconds(30)) async throws -> PostgresStore {
        let store = try PostgresStore(url: url, metrics: metrics, logger: logger, wakeInterval: wakeInterval)
        do { try await store.prepare() } catch {
            await store.close()
            throw error
        }
        return store
    }

    /// Applies pending migrations (``PostgresSchema/migrate(_:logger:)``); a database it cannot
    /// reach or use is a sentence for the operator, naming it without its password.
    func prepare() async throws {
        do {
            try await connected(within: Self.startTimeout)
            try await PostgresSchema.migrate(pool, logger: logger)
        } catch let failure as StoreFailure where failure.isTemporary {
            throw PostgresSchema.Refusal(description: "lost the database at \(location) while migrating it (the log says why)")
        } catch let error as PSQLError {
            // PSQLError's own description is generic on purpose; the server's message carries no secret.
            let detail = error.serverInfo?[.message].map { ": \($0)" } ?? ""
            throw PostgresSchema.Refusal(description: "cannot open the database at \(location) (\(error.code))\(detail)")
        }
    }

    /// How long ``prepare()`` waits for a first connection before it gives up.
    static let startTimeout: Duration = .seconds(15)

    /// Waits for a connection from the pool, at most `timeout`: the pool itself retries a failing
    /// connection (a wrong password, a server not up) for ever, logging each failure, and a relay
    /// must not wait silently at start.
    private func connected(within timeout: Duration) async throws {
        try await within(timeout) { [pool] in try await pool.client.withConnection { _ in } }
    }

    /// `body`'s result, or a ``PostgresSchema/Refusal`` naming the database once `timeout` passed.
    private func within<T: Sendable>(_ timeout: Duration, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
        try await PostgresPool.within(timeout, orThrow: { [location] in
            PostgresSchema.Refusal(description: "cannot connect to the database at \(location) within \(timeout) (the log says why)")
        }, body)
    }

    /// How long ``isReady()`` waits for the database: `/readyz` answers while it is down.
    static let readinessTimeout: Duration = .seconds(2)

    /// Stops the pool: connections close; later operations fail.
    func close() async {
        await notifications.stop()
        await pool.close()
    }

    // MARK: Transactions

    /// Whether PostgreSQL aborted a statement to resolve a conflict between transactions (a
    /// deadlock, a serialization failure): nothing of the transaction stayed, and running it
    /// again may succeed.
    static func isRetryable(_ error: PSQLError) -> Bool {
        guard let state = error.serverInfo?[.sqlState] else { return false }
        return state == "40P01" || state == "40001"
    }

    /// Runs `body` in a transaction on a pooled connection: committed when it returns, rolled back
    /// when it throws (its error, as thrown, not wrapped). A transaction aborted by a conflict
    /// (``isRetryable(_:)``) runs again, up to `attempts` times in all.
    static func transaction<T: Sendable>(_ pool: PostgresPool, logger: Logger, attempts: Int = 3,
                                         _ body: @escaping @Sendable (PostgresConnection, Logger) async throws -> T) async throws -> T {
        var attempt = 1
        while true {
            do {
                return try await pool.withConnection { connection in
                    try await connection.query("BEGIN", logger: logger)
                    do {
                        let value = try await body(connection, logger)
                        try await connection.query("COMMIT", logger: logger)
                        return value
                    } catch {
                        // A broken connection cannot roll back; the pool closes it, and the server
                        // rolls back what it had.
                        _ = try? await connection.query("ROLLBACK", logger: logger)
                        throw error
                    }
                }
            } catch let error as PSQLError where isRetryable(error) && attempt < attempts {
                attempt += 1
                // A short, varied pause, so the two sides of a deadlock do not meet again at once.
                try await Task.sleep(for: .milliseconds(Int.random(in: 1...10) * attempt))
            }
        }
    }

    /// A write transaction, timed as `operation` (a fixed name, never data).
    func write<T: Sendable>(_ operation: String, _ body: @escaping @Sendable (PostgresConnection, Logger) async throws -> T) async throws -> T {
        let start = ContinuousClock.now
        defer { metrics?.store(operation, ContinuousClock.now - start) }
        return try await Self.transaction(pool, logger: logger, body)
    }

    /// A write that shares a transaction with others (``PostgresGroupCommit``), queued at once;
    /// `decode` reads its row of `mailslot_write_batch`.
    func groupSubmit<T: Sendable>(_ operation: String, _ write: PostgresWrite, decode: @escaping @Sendable (PostgresGroupCommit.Row) throws -> T,
                                  committed: (@Sendable (T) -> Void)? = nil) -> CommitTicket<T> {
        let start = ContinuousClock.now
        return group.submit(write, decode: decode, committed: committed,
                            finished: { [metrics] in metrics?.store(operation, ContinuousClock.now - start) })
    }

    /// A read on a pooled connection (one statement: its own snapshot), timed as `operation`.
    func read<T: Sendable>(_ operation: String, _ body: @escaping @Sendable (PostgresConnection, Logger) async throws -> T) async throws -> T {
        let start = ContinuousClock.now
        defer { metrics?.store(operation, ContinuousClock.now - start) }
        return try await pool.withConnection { [logger] connection in try await body(connection, logger) }
    }

    /// The first row `query` returns, if any.
    static func first(_ connection: PostgresConnection, _ query: PostgresQuery, _ logger: Logger) async throws -> PostgresRow? {
        try await connection.query(query, logger: logger).collect().first
    }

    /// Whether the store can take writes: the database answers and its schema is this binary's.
    func isReady() async -> Bool {
        guard !pool.recentlyFailed else { return false }
        do {
            return try await within(Self.readinessTimeout) { [pool, logger] in
                try await pool.withConnection { connection in
                    try await PostgresSchema.version(connection, logger: logger) == PostgresSchema.latestVersion
                }
            }
        } catch {
            return false
        }
    }

    /// All mailboxes together: pending (unexpired) messages and the creation time of the oldest.
    func pendingSummary(now: Int64) async throws -> (count: Int, oldestCreatedAt: Int64?) {
        try await read("pending_summary") { connection, logger in
            let row = try await Self.first(connection, "SELECT count(*), min(created_at) FROM messages WHERE expires_at > \(now)", logger)
            guard let (count, oldest) = try row?.decode((Int64, Int64?).self) else { return (0, nil) }
            return (Int(count), oldest)
        }
    }

    // MARK: Messages

    /// Stores a message, with the refusals of ``SQLiteStore`` in the same order: an identical retry
    /// is answered as a duplicate before any limit; then conflict, blocked, stale keys, the
    /// pending limit, the author quota. Queued at once (``groupSubmit(_:_:decode:committed:)``):
    /// `mailslot_write_batch` decides every refusal before it writes anything, under the write
    /// lock, so creates on all nodes commit one after another, in `seq` order. A created message
    /// with `wake` queues its wake-ups in the same statement (design §2.2).
    func createMessage(recipient: String, id: String, author: String, envelope: String, size: Int, keyID: String?, now: Int64,
                       expiresAt: Int64, limits: CreateLimits, wake: Bool) -> CommitTicket<CreateOutcome> {
        let create = MessageCreate(recipient: recipient, id: id, author: author, envelope: envelope, size: size, keyID: keyID,
                                   expiresAt: expiresAt)
        return groupSubmit("create_message", Self.write(create, now: now, limits: limits, wake: wake),
                           decode: { row in try Self.createOutcome(row, of: create) },
                           committed: { [commits] outcome in
            // Whether the recipient has registrations is the database's to know: the
            // dispatcher's claim finds out (it is rate-limited, and finds nothing cheaply).
            if case .created(let message, _) = outcome { commits.publish(.created(message, wakeups: wake)) }
        })
    }

    /// Queues `creates` as one unit (``PostgresGroupCommit/submitMany(_:decode:committed:finished:)``):
    /// `mailslot_write_batch` applies them in order, deciding each as it decides a lone create,
    /// in one transaction (several statements when they are many or large).
    func createMessages(_ creates: [MessageCreate], now: Int64, limits: CreateLimits, wake: Bool) -> [CommitTicket<CreateOutcome>] {
        let start = ContinuousClock.now
        return group.submitMany(creates.map { Self.write($0, now: now, limits: limits, wake: wake) },
                                decode: { index, row in try Self.createOutcome(row, of: creates[index]) },
                                committed: { [commits] _, outcome in
            if case .created(let message, _) = outcome { commits.publish(.created(message, wakeups: wake)) }
        }, finished: { [metrics] in metrics?.store("create_message", ContinuousClock.now - start) })
    }

    /// The write of one create.
    private static func write(_ create: MessageCreate, now: Int64, limits: CreateLimits, wake: Bool) -> PostgresWrite {
        PostgresWrite(kind: .create, recipient: create.recipient, id: create.id, author: create.author, envelope: create.envelope,
                      size: Int64(create.size), keyID: create.keyID ?? "", now: now, expiresAt: create.expiresAt, limits: limits, wake: wake)
    }

    /// What `mailslot_write_batch`'s row says of `create`.
    private static func createOutcome(_ row: PostgresGroupCommit.Row, of create: MessageCreate) throws -> CreateOutcome {
        func stored() throws -> StoredMessage {
            guard let seq = row.seq, let createdAt = row.createdAt, let storedExpiresAt = row.expiresAt else {
                throw PostgresSchema.Refusal(description: "mailslot_write_batch returned no message")
            }
            return StoredMessage(seq: seq, recipient: create.recipient, id: create.id, author: create.author, createdAt: createdAt,
                                 expiresAt: storedExpiresAt, envelope: create.envelope, size: create.size, leaseUntil: row.leaseUntil,
                                 leaseHolder: row.leaseHolder)
        }
        switch row.outcome {
        case .created: return .created(try stored(), erasedExpired: row.erasedExpired)
        case .duplicate: return .duplicate(try stored())
        case .conflict: throw StoreRefusal.conflict
        case .blocked: throw StoreRefusal.blocked
        case .staleKeys: throw StoreRefusal.staleKeys
        case .mailboxFull: throw StoreRefusal.mailboxFull
        case .authorQuota: throw StoreRefusal.authorQuota
        case .erased, .absent: throw PostgresSchema.Refusal(description: "mailslot_write_batch answered an erasure's outcome for a create")
        }
    }

    /// The unexpired message `id` of `recipient`'s mailbox.
    func message(recipient: String, id: String, now: Int64) async throws -> StoredMessage? {
        try await read("message") { connection, logger in
            try await Self.first(connection, """
                SELECT \(unescaped: StoredMessage.columns) FROM messages WHERE recipient = \(recipient) AND id = \(id) AND expires_at > \(now)
                """, logger).map(StoredMessage.init(postgres:))
        }
    }

    /// Unexpired messages of a mailbox after `seq`, oldest first: at most `limit`, and no more
    /// than `maxBytes` of envelope text unless the first alone is larger. `more`: a message
    /// after the last one returned is waiting (as far as this read could tell).
    func messages(recipient: String, after seq: Int64, limit: Int, maxBytes: Int, now: Int64) async throws -> (messages: [StoredMessage], more: Bool) {
        try await read("messages") { connection, logger in
            let rows = try await connection.execute(MailboxPageStatement(recipient: recipient, after: seq, now: now, limit: Int64(limit) + 1),
                                                    logger: logger)
            var page: [StoredMessage] = []
            var bytes = 0
            for try await message in rows {
                bytes += message.envelope.utf8.count
                // The rest of the rows are drained by the sequence's end; at most one more was asked for.
                guard page.count < limit, page.isEmpty || bytes <= maxBytes else { return (page, true) }
                page.append(message)
            }
            return (page, false)
        }
    }

    /// The number of unexpired messages waiting in a mailbox.
    func pendingCount(recipient: String, now: Int64) async throws -> Int {
        try await read("pending_count") { connection, logger in
            let stored = try await Self.first(connection, "SELECT stored FROM mailbox_sizes WHERE recipient = \(recipient)", logger)?
                .decode(Int64.self) ?? 0
            return try await Self.pending(connection, logger, recipient: recipient, stored: stored, now: now)
        }
    }

    /// The unexpired messages of a mailbox that stores `stored` rows: those less the expired ones
    /// the sweeper has not erased yet.
    private static func pending(_ connection: PostgresConnection, _ logger: Logger, recipient: String, stored: Int64, now: Int64) async throws -> Int {
        guard stored > 0 else { return 0 }
        let expired = try await first(connection, """
            SELECT count(*) FROM messages WHERE recipient = \(recipient) AND expires_at <= \(now)
            """, logger)?.decode(Int64.self) ?? 0
        return Int(stored - expired)
    }

    /// Erases message `id` of `recipient`'s mailbox — only if `author` wrote it, when given (an
    /// unsend must not erase a newer message that reuses the id). True if an unexpired message
    /// was erased; an expired one is erased too, but reported as absent. Queued at once; an unsend
    /// is announced to the other relays, whose subscription may hold the message in memory (the
    /// owner's own acknowledgement needs no announcement: docs/architecture.md).
    func deleteMessage(recipient: String, id: String, author: String?, now: Int64) -> CommitTicket<Bool> {
        let write = PostgresWrite(kind: author == nil ? .ack : .unsend, recipient: recipient, id: id, author: author ?? "")
        return groupSubmit("delete_message", write, decode: { row in
            switch row.outcome {
            case .erased: return (row.expiresAt ?? now) > now
            case .absent: return false
            default: throw PostgresSchema.Refusal(description: "mailslot_write_batch answered a create's outcome for an erasure")
            }
        }, committed: { [commits] erased in
            if erased { commits.publish(.erased(recipient: recipient, id: id)) }
        })
    }

    /// Takes (`until` set) or releases (`until` nil) the processing lease on a message, as
    /// `holder`. The row is locked while it is checked, so a running lease of another holder is
    /// never overwritten, however many workers (and nodes) race for it.
    func setLease(recipient: String, id: String, until: Int64?, holder: String, now: Int64) async throws -> LeaseOutcome {
        try await write("set_lease") { connection, logger in
            guard let row = try await Self.first(connection, """
                SELECT \(unescaped: StoredMessage.columns) FROM messages
                WHERE recipient = \(recipient) AND id = \(id) AND expires_at > \(now) FOR UPDATE
                """, logger) else { return .notFound }
            let current = try StoredMessage(postgres: row)
            if let leaseUntil = current.leaseUntil, leaseUntil > now, current.leaseHolder != holder { return .held }
            let leaseHolder: String? = until == nil ? nil : holder
            guard let updated = try await Self.first(connection, """
                UPDATE messages SET lease_until = \(until), lease_holder = \(leaseHolder) WHERE seq = \(current.seq)
                RETURNING \(unescaped: StoredMessage.columns)
                """, logger) else { return .notFound }
            return .updated(try StoredMessage(postgres: updated))
        }
    }

    /// Erases every expired message and session, and the push registrations of sign-ins that
    /// ended, in transactions of at most `batch` rows and
    /// about `batchBytes` of envelopes each, so that no write waits long behind a sweep. Safe to
    /// run beside another sweep: a row already erased is simply not erased again. The number of
    /// messages erased.
    func sweepExpired(now: Int64, batch: Int, batchBytes: Int) async throws -> Int {
        var erased = 0
        while true {
            let (selected, deleted) = try await write("sweep_expired") { connection, logger -> (Int, Int) in
                try await Self.takeWriteLock(connection, logger)
                let rows = try await connection.query("""
                    SELECT seq, size FROM messages WHERE expires_at <= \(now) ORDER BY expires_at LIMIT \(Int64(batch))
                    """, logger: logger)
                var seqs: [Int64] = []
                var bytes: Int64 = 0
                for try await (seq, size) in rows.decode((Int64, Int64).self) where seqs.isEmpty || bytes < Int64(batchBytes) {
                    seqs.append(seq)
                    bytes += size
                }
                guard !seqs.isEmpty else { return (0, 0) }
                // Rows another sweep erased meanwhile are simply not erased again.
                let deleted = try await Self.first(connection, """
                    WITH erased AS (DELETE FROM messages WHERE seq = ANY(\(seqs)) RETURNING 1) SELECT count(*) FROM erased
                    """, logger)?.decode(Int64.self) ?? 0
                return (seqs.count, Int(deleted))
            }
            erased += deleted
            if selected == 0 || Task.isCancelled { break }
        }
        // Expired sessions are kept a day, so that using one says `session_expired`, not `unauthenticated`.
        let sessionBatch = Int64(batch * 4)
        while try await write("sweep_sessions", { connection, logger in
            try await Self.first(connection, """
                WITH erased AS (DELETE FROM sessions WHERE hash IN (
                    SELECT hash FROM sessions WHERE expires_at <= \(now - 24 * 3600 * 1000) LIMIT \(sessionBatch)) RETURNING 1)
                SELECT count(*) FROM erased
                """, logger)?.decode(Int64.self) ?? 0
        }) == sessionBatch, !Task.isCancelled {}
        // Push registrations whose sign-in ended without a sign-out (design §1.5), and nodes
        // not seen for an hour (their subscriptions stopped counting long ago).
        while try await sweepPushRegistrations(now: now, batch: PushRegistrationRow.sweepBatch) == PushRegistrationRow.sweepBatch,
              !Task.isCancelled {}
        try await write("sweep_relay_nodes") { connection, logger in
            _ = try await connection.query("DELETE FROM relay_nodes WHERE seen_at < \(now - 3600 * 1000)", logger: logger)
        }
        return erased
    }

    /// Erased rows are gone for every reader at once, but their bytes stay in PostgreSQL's files
    /// until VACUUM frees the space and later rows overwrite it (and in WAL segments until they are
    /// recycled; SECURITY.md "Erasure on PostgreSQL"). So after erasures the relay vacuums the
    /// messages table (the ``ErasureScheduler`` calls this at most once per erasure delay): one
    /// node at a time, the others skip — the running VACUUM serves them. Always complete.
    @discardableResult
    func checkpoint() async throws -> Bool {
        try await read("vacuum") { connection, logger in
            // A session-level lock, not a transaction's: VACUUM cannot run inside a transaction.
            guard try await Self.first(connection, "SELECT pg_try_advisory_lock(\(PostgresSchema.vacuumLockKey))", logger)?
                .decode(Bool.self) == true else { return }
            do {
                try await connection.query("VACUUM messages", logger: logger)
            } catch {
                _ = try? await connection.query("SELECT pg_advisory_unlock(\(PostgresSchema.vacuumLockKey))", logger: logger)
                throw error
            }
            try await connection.query("SELECT pg_advisory_unlock(\(PostgresSchema.vacuumLockKey))", logger: logger)
        }
        return true
    }

    // MARK: Documents, key bundles, block lists

    func document(uid: String) async throws -> Data? {
        try await read("document") { connection, logger in
            try await Self.first(connection, "SELECT body FROM documents WHERE uid = \(uid)", logger)?.decode(Data.self)
        }
    }

    func putDocument(uid: String, body: Data, now: Int64) async throws {
        try await write("put_document") { connection, logger in
            _ = try await connection.query("""
                INSERT INTO documents (uid, body, updated_at) VALUES (\(uid), \(body), \(now))
                ON CONFLICT (uid) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at
                """, logger: logger)
        }
    }

    @discardableResult
    func deleteDocument(uid: String) async throws -> Bool {
        try await write("delete_document") { connection, logger in
            try await Self.first(connection, "DELETE FROM documents WHERE uid = \(uid) RETURNING 1", logger) != nil
        }
    }

    func keyBundle(uid: String) async throws -> Data? {
        try await read("key_bundle") { connection, logger in
            try await Self.first(connection, "SELECT bundle FROM key_bundles WHERE uid = \(uid)", logger)?.decode(Data.self)
        }
    }

    /// Publishes `uid`'s verified bundle with its key id (``KeyBundle/keyID``) and identity key;
    /// a bundle of another identity than the stored one erases `uid`'s prekeys with it. Holds the
    /// owner's prekey lock, so that no upload counts prekeys that are being erased.
    func putKeyBundle(uid: String, bundle: Data, keyID: String, identityKey: String, now: Int64) async throws {
        try await write("put_key_bundle") { connection, logger in
            try await Self.lock(connection, logger, space: .prekeys, key: uid)
            if let stored = try await Self.first(connection, "SELECT identity_key FROM key_bundles WHERE uid = \(uid) FOR UPDATE", logger),
               try stored.decode(String?.self) != identityKey {
                // Identity keys are public: no need for a constant-time compare.
                try await connection.query("DELETE FROM prekeys WHERE uid = \(uid)", logger: logger)
            }
            _ = try await connection.query("""
                INSERT INTO key_bundles (uid, bundle, key_id, identity_key, updated_at) VALUES (\(uid), \(bundle), \(keyID), \(identityKey), \(now))
                ON CONFLICT (uid) DO UPDATE SET bundle = excluded.bundle, key_id = excluded.key_id,
                    identity_key = excluded.identity_key, updated_at = excluded.updated_at
                """, logger: logger)
        }
    }

    /// Erases `uid`'s bundle and its prekeys; whether a bundle was stored.
    @discardableResult
    func deleteKeyBundle(uid: String) async throws -> Bool {
        try await write("delete_key_bundle") { connection, logger in
            try await Self.lock(connection, logger, space: .prekeys, key: uid)
            let deleted = try await Self.first(connection, "DELETE FROM key_bundles WHERE uid = \(uid) RETURNING 1", logger) != nil
            try await connection.query("DELETE FROM prekeys WHERE uid = \(uid)", logger: logger)
            return deleted
        }
    }

    /// The authors `owner` has blocked, in byte order, after `cursor`; at most `limit`.
    func blocked(owner: String, after cursor: String, limit: Int) async throws -> [String] {
        try await read("blocked") { connection, logger in
            // The column's collation is "C": byte order, as SQLite's, whatever the database's.
            let rows = try await connection.query("""
                SELECT author FROM blocked WHERE owner = \(owner) AND author > \(cursor) ORDER BY author LIMIT \(Int64(limit))
                """, logger: logger)
            var authors: [String] = []
            for try await author in rows.decode(String.self) { authors.append(author) }
            return authors
        }
    }

    /// Blocks `author` for `owner`, unless the block list already holds `limit` entries. The
    /// owner's list is locked (an advisory lock for the transaction) while it is counted, so
    /// concurrent blocks cannot together pass the limit.
    func block(owner: String, author: String, now: Int64, limit: Int) async throws {
        try await write("block") { connection, logger in
            try await Self.lock(connection, logger, space: .blockList, key: owner)
            let count = try await Self.first(connection, "SELECT count(*) FROM blocked WHERE owner = \(owner)", logger)?.decode(Int64.self) ?? 0
            if count >= limit,
               try await Self.first(connection, "SELECT 1 FROM blocked WHERE owner = \(owner) AND author = \(author)", logger) == nil {
                throw StoreRefusal.blockListFull
            }
            try await connection.query("""
                INSERT INTO blocked (owner, author, created_at) VALUES (\(owner), \(author), \(now)) ON CONFLICT DO NOTHING
                """, logger: logger)
        }
    }

    @discardableResult
    func unblock(owner: String, author: String) async throws -> Bool {
        try await write("unblock") { connection, logger in
            try await Self.first(connection, "DELETE FROM blocked WHERE owner = \(owner) AND author = \(author) RETURNING 1", logger) != nil
        }
    }

    /// Takes the lock that writes changing mailbox or author sizes (group-commit batches, sweeps)
    /// hold until their transaction ends, so that they run one at a time across every node: each
    /// locks several size rows in an order of its own, and two at once could deadlock.
    static func takeWriteLock(_ connection: PostgresConnection, _ logger: Logger) async throws {
        try await connection.query("SELECT pg_advisory_xact_lock(\(PostgresSchema.writeLockKey))", logger: logger)
    }

    /// What a transaction-level advisory lock of ``lock(_:_:space:key:)`` guards; the two-key
    /// form keeps these apart from the migrations' one-key lock.
    enum LockSpace: Int32 {
        case blockList = 1
        case signIns = 2
        case prekeys = 3
        /// An author's blob creates, while they count its bounds (PostgresStore+Blobs.swift).
        case blobAuthor = 4
        /// A blob's completion, while the storage completes it (PostgresStore+Blobs.swift).
        case blobCompletion = 5
        /// A uid's push registrations, while they are counted (PostgresStore+Push.swift).
        case pushRegistrations = 6
    }

    /// Takes the advisory lock on `key` in `space` until the transaction ends.
    static func lock(_ connection: PostgresConnection, _ logger: Logger, space: LockSpace, key: String) async throws {
        try await connection.query("SELECT pg_advisory_xact_lock(\(space.rawValue), hashtext(\(key)))", logger: logger)
    }
}

extension StoredMessage {
    /// A row selected with ``columns``, from PostgreSQL.
    init(postgres row: PostgresRow) throws {
        let (seq, recipient, id, author, createdAt, expiresAt, size, envelope, leaseUntil, leaseHolder) =
            try row.decode((Int64, String, String, String, Int64, Int64, Int64, String, Int64?, String?).self)
        self.init(seq: seq, recipient: recipient, id: id, author: author, createdAt: createdAt, expiresAt: expiresAt,
                  envelope: envelope, size: Int(size), leaseUntil: leaseUntil, leaseHolder: leaseHolder)
    }
}
