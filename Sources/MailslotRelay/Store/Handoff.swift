import Synchronization

/// One value handed from one task to another that waits for it: the first given is the one
/// taken, later ones are ignored. What ``PostgresStore/completeBlob(id:now:finish:)`` passes
/// between its transaction and the task that runs the storage's completion.
final class Handoff<Value: Sendable>: Sendable {
    private enum State {
        case empty
        case waiting(CheckedContinuation<Value, Never>)
        case given(Value)
    }

    private let state = Mutex<State>(.empty)

    init() {}

    /// Gives `value`, unless one was given before.
    func give(_ value: Value) {
        let waiter = state.withLock { state -> CheckedContinuation<Value, Never>? in
            switch state {
            case .given: return nil
            case .empty:
                state = .given(value)
                return nil
            case .waiting(let waiter):
                state = .given(value)
                return waiter
            }
        }
        waiter?.resume(returning: value)
    }

    /// The value given, once it is; one taker only.
    func take() async -> Value {
        await withCheckedContinuation { continuation in
            let value = state.withLock { state -> Value? in
                switch state {
                case .given(let value): return value
                case .empty, .waiting:
                    state = .waiting(continuation)
                    return nil
                }
            }
            if let value { continuation.resume(returning: value) }
        }
    }
}
