import Synchronization

/// The queue behind a store's group commit, whatever the backend: writes wait in submission
/// order, one drainer at a time commits everything that waits as one batch (what arrived while the
/// previous batch committed), and no write waits for a timer — a lone write commits at once.
/// Each caller is answered only after its batch committed (or with the batch's error); the
/// `committed` calls run after the commit, one after another, in apply order.
///
/// `Write` is the backend's own step: what one write is, and where its outcome goes. The backend's
/// `commit` applies a batch of them and records each outcome; when it throws, every write of the
/// batch fails with its error.
final class WriteBatches<Write: Sendable>: Sendable {
    /// One write's outcome, set by its step inside the transaction and read once it committed.
    final class Outcome<T: Sendable>: @unchecked Sendable {
        // @unchecked: written by the one drainer inside the transaction, read by `complete` after
        // it; the commit orders the two.
        var result: Result<T, any Error>?
    }

    private struct Pending: Sendable {
        let write: Write
        /// Runs after a successful commit, in apply order, before any caller resumes.
        let committed: @Sendable () -> Void
        /// Resolves the ticket: with the batch's error, or (nil) its outcome, committed at the instant given.
        let complete: @Sendable ((any Error)?, ContinuousClock.Instant) -> Void
    }

    private let commit: @Sendable ([Write]) async throws -> Void
    private let state = Mutex<(queue: [Pending], draining: Bool)>(([], false))

    /// Batches committed by `commit`, which runs the steps in order in one transaction.
    init(commit: @escaping @Sendable ([Write]) async throws -> Void) {
        self.commit = commit
    }

    /// Queues the step `step(outcome)` makes and returns the ticket its result will be on.
    /// `committed` gets the result first, in commit order, if the write succeeded and the batch
    /// committed; `finished` runs when the ticket is resolved, either way.
    func submit<T: Sendable>(_ step: (Outcome<T>) -> Write, committed: (@Sendable (T) -> Void)?,
                             finished: (@Sendable () -> Void)?) -> CommitTicket<T> {
        submitMany(1, { _, outcome in step(outcome) }, committed: { _, value in committed?(value) }, finished: finished)[0]
    }

    /// Queues `count` writes as one unit — `step(i, outcome)` makes the `i`th — and returns their
    /// tickets, in that order. They are appended under one lock, so one drain takes them all: they
    /// are applied one after another, in order, and commit in one transaction (with whatever
    /// other writes wait beside them), or fail together. Each write still has its own outcome
    /// (a refusal of one leaves the others as they are); `committed(i, value)` runs for each that
    /// succeeded, in apply order, once the transaction committed; `finished` runs once per ticket.
    func submitMany<T: Sendable>(_ count: Int, _ step: (Int, Outcome<T>) -> Write,
                                 committed: (@Sendable (Int, T) -> Void)?,
                                 finished: (@Sendable () -> Void)?) -> [CommitTicket<T>] {
        var tickets: [CommitTicket<T>] = []
        var pendings: [Pending] = []
        tickets.reserveCapacity(count)
        pendings.reserveCapacity(count)
        for index in 0..<count {
            let ticket = CommitTicket<T>()
            let outcome = Outcome<T>()
            tickets.append(ticket)
            pendings.append(Pending(
                write: step(index, outcome),
                committed: {
                    if let committed, case .success(let value) = outcome.result { committed(index, value) }
                },
                complete: { commitError, at in
                    finished?()
                    ticket.resolve(commitError.map { .failure($0) } ?? outcome.result!, at: at)
                }))
        }
        guard !pendings.isEmpty else { return tickets }
        let start = state.withLock { state -> Bool in
            state.queue.append(contentsOf: pendings)
            defer { state.draining = true }
            return !state.draining
        }
        if start { Task { await self.drain() } }
        return tickets
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
                try await commit(batch.map(\.write))
                // The commit's instant, before the deliveries are handed out: what a ticket's
                // `resolvedAt` says (mailslot_batch_seconds).
                let committedAt = ContinuousClock.now
                for pending in batch { pending.committed() }
                for pending in batch { pending.complete(nil, committedAt) }
            } catch {
                let failedAt = ContinuousClock.now
                for pending in batch { pending.complete(error, failedAt) }
            }
        }
    }
}
