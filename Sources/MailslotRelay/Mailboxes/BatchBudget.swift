import Synchronization

/// The bytes of send-to-many bodies (spec/protocol.md §4.25, §5.5) a relay reads or holds at
/// once: `POST /v1/messages` bodies (a `send_many` frame is bounded by the frame size instead). A
/// body up to `--max-batch-bytes` may be far larger than any other request; without a relay-wide
/// bound, many connections could each park one in memory.
/// A reader reserves the body's bytes before reading it; when the budget has no room, it waits
/// (in arrival order) — its body stays unread, and TCP pushes back on its sender — until earlier
/// reservations are released. A wait is never refused: the request goes on once there is room.
final class BatchBudget: Sendable {
    /// A reservation: released when it is released or dropped, whichever comes first.
    final class Reservation: Sendable {
        private let budget: BatchBudget
        private let bytes: Int
        private let released = Atomic<Bool>(false)

        fileprivate init(budget: BatchBudget, bytes: Int) {
            self.budget = budget
            self.bytes = bytes
        }

        /// Gives the bytes back (once; later calls do nothing).
        func release() {
            guard !released.exchange(true, ordering: .acquiringAndReleasing) else { return }
            budget.give(bytes)
        }

        deinit { release() }
    }

    private struct Waiter {
        let id: Int
        let bytes: Int
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var available: Int
        var waiters: [Waiter] = []
        var nextID = 0
    }

    /// The whole budget, in bytes.
    let capacity: Int
    private let state: Mutex<State>

    /// A budget of `capacity` bytes.
    init(capacity: Int) {
        self.capacity = capacity
        state = Mutex(State(available: capacity))
    }

    /// The bytes not reserved now (for tests and metrics).
    var available: Int { state.withLock { $0.available } }

    /// The readers waiting for room now (for tests and metrics).
    var waiting: Int { state.withLock { $0.waiters.count } }

    /// Reserves `bytes` (at most the whole budget), waiting for room in arrival order. Throws
    /// `CancellationError` when the task is cancelled while it waits (its connection went away).
    func reserve(_ bytes: Int) async throws -> Reservation {
        let bytes = min(max(bytes, 0), capacity)
        let id = state.withLock { state -> Int? in
            // First come, first served: no one overtakes a waiter, however small.
            if state.waiters.isEmpty && state.available >= bytes {
                state.available -= bytes
                return nil
            }
            defer { state.nextID += 1 }
            return state.nextID
        }
        guard let id else { return Reservation(budget: self, bytes: bytes) }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let resumeNow = state.withLock { state -> Bool in
                    if Task.isCancelled { return true }
                    state.waiters.append(Waiter(id: id, bytes: bytes, continuation: continuation))
                    return false
                }
                if resumeNow { continuation.resume(throwing: CancellationError()) }
                else { give(0) }  // the room may have come back before this waiter was queued
            }
        } onCancel: {
            let waiter = state.withLock { state -> Waiter? in
                guard let index = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return state.waiters.remove(at: index)
            }
            waiter?.continuation.resume(throwing: CancellationError())
            give(0)  // a waiter behind it may fit now
        }
        return Reservation(budget: self, bytes: bytes)
    }

    /// Returns `bytes` and wakes the waiters that now fit, in order.
    fileprivate func give(_ bytes: Int) {
        let ready = state.withLock { state -> [Waiter] in
            state.available += bytes
            var ready: [Waiter] = []
            while let first = state.waiters.first, first.bytes <= state.available {
                state.available -= first.bytes
                ready.append(state.waiters.removeFirst())
            }
            return ready
        }
        for waiter in ready { waiter.continuation.resume() }
    }
}
