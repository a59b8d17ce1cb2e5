import Logging
import PostgresNIO
import Synchronization

/// Group commit on PostgreSQL, as ``GroupCommit`` does it on SQLite: one writer at a time drains
/// the queue of submitted writes, in submission order, several per transaction. Each write runs
/// in a savepoint of its own, so one write's refusal undoes only that write; each caller is
/// answered only after the shared COMMIT succeeded (or with its error); the `committed` calls run
/// after the commit, one after another, in apply order.
///
/// One writer keeps the order a caller submitted in (a socket's sends stay in order) and keeps a
/// node's creates from contending for the same mailbox locks. A batch that PostgreSQL aborts as
/// a deadlock or serialization failure (another transaction — a sweep, another node — locked the
/// same mailboxes in another order) was rolled back as a whole, so it is applied again, a few times.
final class PostgresGroupCommit: Sendable {
    private struct Pending: Sendable {
        /// Throws only when the transaction itself is broken (a savepoint would not roll back).
        let apply: @Sendable (PostgresConnection, Logger) async throws -> Void
        let committed: @Sendable () -> Void
        let complete: @Sendable ((any Error)?) -> Void
    }

    /// One write's outcome, set inside the transaction and read once it committed.
    private final class Outcome<T: Sendable>: @unchecked Sendable {
        // @unchecked: written by the one writer inside the transaction, read by `complete` after
        // it; the commit orders the two.
        var result: Result<T, any Error>?
    }

    /// Attempts of a batch that PostgreSQL aborted to resolve a lock conflict.
    static let attempts = 5

    private let client: PostgresClient
    private let logger: Logger
    private let state = Mutex<(queue: [Pending], draining: Bool)>(([], false))

    init(client: PostgresClient, logger: Logger) {
        self.client = client
        self.logger = logger
    }

    /// Queues `updates` for the next shared transaction at once and returns the ticket its result
    /// will be on; writes are applied in submission order. `committed` gets the result first, in
    /// commit order, if `updates` succeeded and the transaction committed; `finished` runs when
    /// the ticket is resolved, either way.
    func submit<T: Sendable>(_ updates: @escaping @Sendable (PostgresConnection, Logger) async throws -> T,
                             committed: (@Sendable (T) -> Void)? = nil,
                             finished: (@Sendable () -> Void)? = nil) -> CommitTicket<T> {
        let ticket = CommitTicket<T>()
        let outcome = Outcome<T>()
        let pending = Pending(
            apply: { connection, logger in
                try await connection.query("SAVEPOINT group_write", logger: logger)
                do {
                    let value = try await updates(connection, logger)
                    try await connection.query("RELEASE SAVEPOINT group_write", logger: logger)
                    outcome.result = .success(value)
                } catch let error as PSQLError where PostgresStore.isRetryable(error) {
                    throw error  // the batch as a whole is rolled back and applied again
                } catch {
                    outcome.result = .failure(error)
                    // Undo this write alone; if even that fails, the whole batch fails.
                    try await connection.query("ROLLBACK TO SAVEPOINT group_write", logger: logger)
                    try await connection.query("RELEASE SAVEPOINT group_write", logger: logger)
                }
            },
            committed: {
                if let committed, case .success(let value) = outcome.result { committed(value) }
            },
            complete: { commitError in
                finished?()
                ticket.resolve(commitError.map { .failure($0) } ?? outcome.result!)
            })
        let start = state.withLock { state -> Bool in
            state.queue.append(pending)
            defer { state.draining = true }
            return !state.draining
        }
        if start { Task { await self.drain() } }
        return ticket
    }

    /// Commits batch after batch until nothing waits.
    private func drain() async {
        while true {
            let batch = state.withLock { state -> [Pending] in
                let batch = state.queue
                state.queue.removeAll(keepingCapacity: true)
                if batch.isEmpty { state.draining = false }
                return batch
            }
            if batch.isEmpty { return }
            do {
                try await PostgresStore.transaction(client, logger: logger, attempts: Self.attempts) { connection, logger in
                    for pending in batch { try await pending.apply(connection, logger) }
                }
                for pending in batch { pending.committed() }
                for pending in batch { pending.complete(nil) }
            } catch {
                for pending in batch { pending.complete(error) }
            }
        }
    }
}
