import GRDB

/// Group commit: the small writes that arrive while a transaction is committing wait for the
/// next one and share it. Each write runs in a savepoint of its own, so one write's refusal or
/// error undoes only that write; each caller is answered only after the shared commit succeeded
/// (or with its error). No write waits for a timer: a lone write commits at once.
///
/// A write may ask to be told of its own success right after the commit (`committed`): those
/// calls run one after another in the order the writes were applied, which is the order of the
/// rows they inserted — unlike the callers' resumptions, which run concurrently.
final class GroupCommit: Sendable {
    /// One write, in a savepoint of its own.
    typealias Step = @Sendable (Database) throws -> Void

    private let batches: WriteBatches<Step>

    /// Commits to `pool`; a batch that finds the disk full is handled as every write is
    /// (``DiskSpace/retryingWhenFull(_:_:)``): rolled back as a whole, so every write of it may
    /// run again.
    init(pool: DatabasePool, diskSpace: DiskSpace? = nil) {
        batches = WriteBatches { steps in
            try await DiskSpace.retryingWhenFull(diskSpace) {
                try await pool.write { db in for step in steps { try step(db) } }
            }
        }
    }

    /// Queues `updates` for the next shared transaction at once, and returns the ticket its
    /// result will be on. Writes are applied in the order they were submitted: a caller that
    /// submits one write after another, without waiting in between, gets them in that order and
    /// still shares commits with them. `committed` gets the result first, in commit order, if
    /// `updates` succeeded and the transaction committed (the store publishes its commits
    /// there, ``CommitObservers``); `finished` runs when the ticket is resolved, either way.
    func submit<T: Sendable>(_ updates: @escaping @Sendable (Database) throws -> T,
                             committed: (@Sendable (T) -> Void)? = nil,
                             finished: (@Sendable () -> Void)? = nil) -> CommitTicket<T> {
        batches.submit({ outcome in Self.step(updates, outcome) }, committed: committed, finished: finished)
    }

    /// Queues `updates.count` writes as one unit (``WriteBatches/submitMany(_:_:committed:finished:)``):
    /// applied in order, each in its own savepoint, all in one transaction. `committed(i, value)`
    /// runs for each that succeeded, in apply order, after the commit.
    func submitMany<T: Sendable>(_ updates: [@Sendable (Database) throws -> T],
                                 committed: (@Sendable (Int, T) -> Void)? = nil,
                                 finished: (@Sendable () -> Void)? = nil) -> [CommitTicket<T>] {
        batches.submitMany(updates.count, { index, outcome in Self.step(updates[index], outcome) }, committed: committed, finished: finished)
    }

    /// The step that runs `updates` in a savepoint of its own and records its outcome.
    private static func step<T: Sendable>(_ updates: @escaping @Sendable (Database) throws -> T,
                                          _ outcome: WriteBatches<Step>.Outcome<T>) -> Step {
            { db in
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
            }
    }
}
