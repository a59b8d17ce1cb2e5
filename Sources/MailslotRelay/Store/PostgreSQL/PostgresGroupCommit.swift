import Logging
import PostgresNIO

/// Group commit on PostgreSQL, as ``GroupCommit`` does it on SQLite: one writer at a time drains
/// the queue of submitted writes, in submission order, several per transaction. Each caller is
/// answered only after the shared COMMIT succeeded (or with its error); the `committed` calls run
/// after the commit, one after another, in apply order.
///
/// One writer keeps the order a caller submitted in (a socket's sends stay in order) and keeps a
/// node's creates from contending for the same mailbox locks. A batch that PostgreSQL aborts as
/// a deadlock or serialization failure (another transaction — a sweep, another node — locked the
/// same mailboxes in another order) was rolled back as a whole, so it is applied again, a few times.
///
/// Round trips are what a batch costs, so a write runs without a savepoint of its own: the
/// writes are single statements that either succeed or change nothing (a create's refusals are
/// decided inside its one statement, ``PostgresStore/submitCreateMessage``), and a refusal they
/// report leaves the transaction usable. Only when a write fails otherwise — the transaction is
/// then aborted — is the batch rolled back and applied again with a savepoint around each write,
/// so that the failure is that write's alone.
///
/// Batches of all nodes take turns (``PostgresStore/takeWriteLock(_:_:)``): a create locks its
/// mailbox's and its author's size rows, and an acknowledgement — through the erase trigger — the
/// same rows of the message it erases, in whatever order the batch holds them; two nodes'
/// batches would deadlock on them, and PostgreSQL finds a deadlock only after a second.
///
/// The mailboxes a batch's writes touched (those that say so) are announced once per batch, inside
/// its transaction, to the other relays (``PostgresNotifications``).
final class PostgresGroupCommit: Sendable {
    /// One write (in a savepoint of its own when `guarded`); the mailbox it touched, when other
    /// relays must hear of it.
    typealias Step = @Sendable (PostgresConnection, Logger, _ guarded: Bool) async throws -> String?
    /// Announces the mailboxes a batch touched, inside its transaction.
    typealias Announce = @Sendable ([String], PostgresConnection, Logger) async throws -> Void

    /// Attempts of a batch that PostgreSQL aborted to resolve a lock conflict.
    static let attempts = 5

    private let batches: WriteBatches<Step>

    init(pool: PostgresPool, logger: Logger, announce: Announce?) {
        @Sendable func apply(_ steps: [Step], guarded: Bool) async throws {
            try await PostgresStore.transaction(pool, logger: logger, attempts: Self.attempts) { connection, logger in
                try await PostgresStore.takeWriteLock(connection, logger)
                var touched: [String] = []
                var seen = Set<String>()
                for step in steps {
                    if let mailbox = try await step(connection, logger, guarded), seen.insert(mailbox).inserted { touched.append(mailbox) }
                }
                if !touched.isEmpty, let announce { try await announce(touched, connection, logger) }
            }
        }
        batches = WriteBatches { steps in
            do {
                try await apply(steps, guarded: false)
            } catch where !PostgresPool.isUnreachable(error) && !(error is StoreFailure) {
                try await apply(steps, guarded: true)
            }
        }
    }

    /// Queues `updates` for the next shared transaction at once and returns the ticket its result
    /// will be on; writes are applied in submission order. `touches` names the mailbox a
    /// successful result touched, to announce. `committed` gets the result first, in commit order,
    /// if `updates` succeeded and the transaction committed; `finished` runs when the ticket is
    /// resolved, either way.
    func submit<T: Sendable>(_ updates: @escaping @Sendable (PostgresConnection, Logger) async throws -> T,
                             touches: (@Sendable (T) -> String?)? = nil,
                             committed: (@Sendable (T) -> Void)? = nil,
                             finished: (@Sendable () -> Void)? = nil) -> CommitTicket<T> {
        batches.submit({ outcome in
            { connection, logger, guarded in
                guard guarded else {
                    do {
                        let value = try await updates(connection, logger)
                        outcome.result = .success(value)
                        return touches?(value)
                    } catch let refusal as StoreRefusal {
                        outcome.result = .failure(refusal)  // decided before anything changed
                        return nil
                    }
                }
                try await connection.query("SAVEPOINT group_write", logger: logger)
                do {
                    let value = try await updates(connection, logger)
                    try await connection.query("RELEASE SAVEPOINT group_write", logger: logger)
                    outcome.result = .success(value)
                    return touches?(value)
                } catch let error as PSQLError where PostgresStore.isRetryable(error) {
                    throw error  // the batch as a whole is rolled back and applied again
                } catch {
                    outcome.result = .failure(error)
                    // Undo this write alone; if even that fails, the whole batch fails.
                    try await connection.query("ROLLBACK TO SAVEPOINT group_write", logger: logger)
                    try await connection.query("RELEASE SAVEPOINT group_write", logger: logger)
                    return nil
                }
            }
        }, committed: committed, finished: finished)
    }
}
