import GRDB
import Synchronization

/// Group commit: the small writes that arrive while a transaction is committing wait for the
/// next one and share it. Each write runs in a savepoint of its own, so one write's refusal or
/// error undoes only that write; each caller is answered only after the shared commit succeeded
/// (or with its error). No write waits for a timer: a lone write commits at once.
///
/// A write may ask to be told of its own success right after the commit (`committed`): those
/// calls run one after another in the order the writes were applied, which is the order of the
/// rows they inserted — unlike the callers' resumptions, which run concurrently.
final class GroupCommit: Sendable {
    private struct Pending: Sendable {
        /// Throws only when the transaction itself is broken (a savepoint would not roll back).
        let apply: @Sendable (Database) throws -> Void
        /// Runs after a successful commit, in apply order, before any caller resumes.
        let committed: @Sendable () -> Void
        let complete: @Sendable ((any Error)?) -> Void
    }

    /// One write's outcome, set inside the transaction and read once it committed.
    private final class Outcome<T: Sendable>: @unchecked Sendable {
        // @unchecked: written by the writer inside the transaction, read by `complete` after it;
        // the commit orders the two.
        var result: Result<T, any Error>?
    }

    private let pool: DatabasePool
    private let diskSpace: DiskSpace?
    private let state = Mutex<(queue: [Pending], draining: Bool)>(([], false))

    /// Commits to `pool`; a batch that finds the disk full is handled as every write is
    /// (``DiskSpace/retryingWhenFull(_:_:)``).
    init(pool: DatabasePool, diskSpace: DiskSpace? = nil) {
        self.pool = pool
        self.diskSpace = diskSpace
    }

    /// Runs `updates` in the next shared transaction and returns its result once committed.
    /// `committed` gets the result first, in commit order, if `updates` succeeded and the
    /// transaction committed.
    func write<T: Sendable>(_ updates: @escaping @Sendable (Database) throws -> T,
                            committed: (@Sendable (T) -> Void)? = nil) async throws -> T {
        try await submit(updates, committed: committed).value
    }

    /// Queues `updates` for the next shared transaction at once, and returns the ticket its
    /// result will be on. Writes are applied in the order they were submitted: a caller that
    /// submits one write after another, without waiting in between, gets them in that order and
    /// still shares commits with them. `finished` runs when the ticket is resolved, either way.
    func submit<T: Sendable>(_ updates: @escaping @Sendable (Database) throws -> T,
                             committed: (@Sendable (T) -> Void)? = nil,
                             finished: (@Sendable () -> Void)? = nil) -> CommitTicket<T> {
        let ticket = CommitTicket<T>()
        let outcome = Outcome<T>()
        let pending = Pending(
            apply: { db in
                // GRDB's inSavepoint compiles its SAVEPOINT statements each time; these are
                // compiled once per connection, and run directly (DirectStatement): two of them
                // for every write.
                try db.cachedStatement(sql: "SAVEPOINT group_write").run()
                do {
                    let value = try updates(db)
                    try db.cachedStatement(sql: "RELEASE SAVEPOINT group_write").run()
                    outcome.result = .success(value)
                } catch let error as DatabaseError where error.resultCode == .SQLITE_FULL {
                    throw error  // the disk, not this write: the batch as a whole fails (and may be retried)
                } catch {
                    outcome.result = .failure(error)
                    // Undo this write alone; if even that fails, the whole batch fails.
                    try db.cachedStatement(sql: "ROLLBACK TO SAVEPOINT group_write").run()
                    try db.cachedStatement(sql: "RELEASE SAVEPOINT group_write").run()
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
                // Rolled back as a whole when the disk is full: every write of the batch may run again.
                try await DiskSpace.retryingWhenFull(diskSpace) {
                    try await pool.write { db in for pending in batch { try pending.apply(db) } }
                }
                for pending in batch { pending.committed() }
                for pending in batch { pending.complete(nil) }
            } catch {
                for pending in batch { pending.complete(error) }
            }
        }
    }
}
