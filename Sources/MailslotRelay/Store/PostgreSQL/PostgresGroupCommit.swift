import Logging
import PostgresNIO

/// Group commit on PostgreSQL, as ``GroupCommit`` does it on SQLite: one writer at a time drains
/// the queue of submitted writes, in submission order, several per transaction. Each caller is
/// answered only after the shared COMMIT succeeded (or with its error); the `committed` calls run
/// after the commit, one after another, in apply order.
///
/// A statement costs the relay and the database more than the row it writes, so a batch is one
/// statement, `mailslot_write_batch` (``PostgresSchema``, migration 4), between `BEGIN` and
/// `COMMIT`: three round trips whatever the batch holds. Inside it the batch takes the write lock
/// (``PostgresStore/takeWriteLock(_:_:)``: size-changing writes of all nodes take turns, so they
/// neither deadlock on size rows nor commit out of `seq` order), applies the writes in submission
/// order, each refusal decided before anything is written, and announces the mailboxes of its
/// creates and unsends to the other relays (``PostgresNotifications``), once.
///
/// The COMMIT is its own statement, not the implicit one at the end of a lone statement:
/// postgres-nio ends a statement's rows before the server has committed, and no answer may come
/// before the commit. A batch that PostgreSQL aborts as a deadlock or serialization failure is
/// applied again, a few times. A batch that fails in a way one write can cause (bad data, a
/// constraint, a raise) was rolled back as a whole; its writes are then applied one per
/// transaction, in order, so that the failure is one write's alone. Any other failure (the
/// database read-only after a failover, out of disk, a timeout) fails the batch's writes at once.
final class PostgresGroupCommit: Sendable {
    typealias Row = WriteBatchStatement.Row

    /// One queued write and where its answer goes.
    struct Step: Sendable {
        let write: PostgresWrite
        /// Takes the write's row inside the transaction, or its failure.
        let answer: @Sendable (Result<Row, any Error>) -> Void
    }

    /// Attempts of a batch that PostgreSQL aborted to resolve a lock conflict.
    static let attempts = 5
    /// The most writes, and about the most envelope bytes, one statement carries; a larger batch
    /// is several statements in one transaction.
    static let maxStatementWrites = 256
    static let maxStatementBytes = 4 << 20

    private let batches: WriteBatches<Step>

    /// `node` is this relay's notification id (``ClusterNotification``); `wakeInterval` the least
    /// time between two wake-ups of one registration (ms); `notified` counts the notifications
    /// sent (a metric).
    init(pool: PostgresPool, node: String, wakeInterval: Int64, logger: Logger, notified: @escaping @Sendable () -> Void) {
        @Sendable func apply(_ steps: [Step]) async throws {
            let notifications = try await PostgresStore.transaction(pool, logger: logger, attempts: Self.attempts) { connection, logger in
                var notifications = 0
                for chunk in Self.chunks(steps) {
                    let (rows, announced) = try await Self.run(chunk.map(\.write), node: node, wakeInterval: wakeInterval, on: connection, logger: logger)
                    for (step, row) in zip(chunk, rows) { step.answer(.success(row)) }
                    notifications += announced
                }
                return notifications
            }
            for _ in 0..<notifications { notified() }  // sent: the transaction committed
        }
        batches = WriteBatches { steps in
            do {
                try await apply(steps)
            } catch let error as PSQLError where Self.isOneWritesFault(error) && steps.count > 1 {
                // One write broke the batch (bad data, a constraint, a raise): find which by
                // applying them one by one. Any other failure is the batch's, and would be each write's.
                logger.warning("a write batch failed; applying its writes one by one", metadata: [
                    "sqlstate": "\(error.serverInfo?[.sqlState] ?? "-")", "writes": "\(steps.count)",
                ])
                for (index, step) in steps.enumerated() {
                    do {
                        try await apply([step])
                    } catch let error as PSQLError where Self.isOneWritesFault(error) {
                        step.answer(.failure(error))
                    } catch {
                        // Not this write's fault (the database out of reach, read-only, full): the
                        // rest would fail alike, one transaction each.
                        for rest in steps[index...] { rest.answer(.failure(error)) }
                        return
                    }
                }
            }
        }
    }

    /// Whether `error` can be the fault of one write rather than of the batch: a data exception
    /// (SQLSTATE class 22), an integrity constraint (23) or a PL/pgSQL raise (P0).
    static func isOneWritesFault(_ error: PSQLError) -> Bool {
        guard let state = error.serverInfo?[.sqlState] else { return false }
        return state.hasPrefix("22") || state.hasPrefix("23") || state.hasPrefix("P0")
    }

    /// Runs `writes` as one `mailslot_write_batch` statement; their rows, in the writes' order, and
    /// the notifications sent. The statement sends the first; when the mailboxes do not fit in one
    /// payload (a send to many's), the others follow as `pg_notify` calls in the same transaction,
    /// delivered with its commit like the first (``ClusterNotification/changed(node:mailboxes:)``).
    private static func run(_ writes: [PostgresWrite], node: String, wakeInterval: Int64, on connection: PostgresConnection,
                            logger: Logger) async throws -> (rows: [Row], announced: Int) {
        var announced: [String] = []
        var seen = Set<String>()
        for write in writes where write.announced && seen.insert(write.recipient).inserted { announced.append(write.recipient) }
        let payloads = ClusterNotification.changed(node: node, mailboxes: announced)
        let notify = payloads.first
        var rows = [Row?](repeating: nil, count: writes.count)
        for try await row in try await connection.execute(WriteBatchStatement(writes: writes, notify: notify, wakeInterval: wakeInterval), logger: logger) {
            guard row.ord >= 1, row.ord <= writes.count, rows[Int(row.ord) - 1] == nil else {
                throw PostgresSchema.Refusal(description: "mailslot_write_batch answered an unexpected row")
            }
            rows[Int(row.ord) - 1] = row
        }
        let answered = try rows.map { row in
            guard let row else { throw PostgresSchema.Refusal(description: "mailslot_write_batch left a write unanswered") }
            return row
        }
        for payload in payloads.dropFirst() {
            try await connection.query("SELECT pg_notify(\(ClusterNotification.channel), \(payload))", logger: logger)
        }
        return (answered, payloads.count)
    }

    /// `steps` cut into statements of at most ``maxStatementWrites`` writes and about
    /// ``maxStatementBytes`` of envelopes (one larger envelope goes alone).
    private static func chunks(_ steps: [Step]) -> [ArraySlice<Step>] {
        var chunks: [ArraySlice<Step>] = []
        var start = steps.startIndex
        var bytes = 0
        for index in steps.indices {
            let size = steps[index].write.envelope.utf8.count
            if index > start, index - start >= maxStatementWrites || bytes + size > maxStatementBytes {
                chunks.append(steps[start..<index])
                start = index
                bytes = 0
            }
            bytes += size
        }
        if start < steps.endIndex { chunks.append(steps[start...]) }
        return chunks
    }

    /// Queues `write` for the next shared transaction at once and returns the ticket its result
    /// will be on; writes are applied in submission order. `decode` reads the write's row inside
    /// the transaction (a ``StoreRefusal`` it throws is the write's answer). `committed` gets the
    /// result first, in commit order, if the write succeeded and the transaction committed;
    /// `finished` runs when the ticket is resolved, either way.
    func submit<T: Sendable>(_ write: PostgresWrite,
                             decode: @escaping @Sendable (Row) throws -> T,
                             committed: (@Sendable (T) -> Void)? = nil,
                             finished: (@Sendable () -> Void)? = nil) -> CommitTicket<T> {
        batches.submit({ outcome in
            Step(write: write) { row in
                outcome.result = Result { try decode(row.get()) }
            }
        }, committed: committed, finished: finished)
    }

    /// Queues `writes` as one unit (``WriteBatches/submitMany(_:_:committed:finished:)``): applied
    /// in order in one transaction, each answered by its own row (`decode(i, row)`).
    /// `committed(i, value)` runs for each that succeeded, in apply order, after the commit.
    func submitMany<T: Sendable>(_ writes: [PostgresWrite],
                                 decode: @escaping @Sendable (Int, Row) throws -> T,
                                 committed: (@Sendable (Int, T) -> Void)? = nil,
                                 finished: (@Sendable () -> Void)? = nil) -> [CommitTicket<T>] {
        batches.submitMany(writes.count, { index, outcome in
            Step(write: writes[index]) { row in
                outcome.result = Result { try decode(index, row.get()) }
            }
        }, committed: committed, finished: finished)
    }
}
