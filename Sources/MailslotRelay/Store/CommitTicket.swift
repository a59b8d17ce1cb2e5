import Synchronization

/// The result a submitted write will have once its transaction committed (or failed). Awaited by
/// one task, once. A store hands one out for each write it queues (``RelayStore``).
final class CommitTicket<T: Sendable>: Sendable {
    private enum State {
        case waiting(CheckedContinuation<T, any Error>?)
        case resolved(Result<T, any Error>, at: ContinuousClock.Instant)
    }

    private let state = Mutex<State>(.waiting(nil))

    /// A ticket whose result is not known yet.
    init() {}

    /// Gives the write's result, decided at `at` (its transaction's commit), once; later results
    /// are ignored.
    func resolve(_ result: Result<T, any Error>, at: ContinuousClock.Instant = .now) {
        let waiter = state.withLock { state -> CheckedContinuation<T, any Error>? in
            guard case .waiting(let waiter) = state else { return nil }
            state = .resolved(result, at: at)
            return waiter
        }
        waiter?.resume(with: result)
    }

    /// When the result was decided (its transaction's commit, before the deliveries it makes are
    /// handed to the hub): nil while it waits. The awaiting task may run much later on a busy relay, so a
    /// commit's time is read here (`mailslot_batch_seconds`), not when the value is awaited.
    var resolvedAt: ContinuousClock.Instant? {
        state.withLock { state in
            if case .resolved(_, let at) = state { at } else { nil }
        }
    }

    /// The write's result: waits for the commit if it has not happened yet.
    var value: T {
        get async throws {
            try await withCheckedThrowingContinuation { continuation in
                let result = state.withLock { state -> Result<T, any Error>? in
                    switch state {
                    case .resolved(let result, _): return result
                    case .waiting: state = .waiting(continuation); return nil
                    }
                }
                if let result { continuation.resume(with: result) }
            }
        }
    }
}
