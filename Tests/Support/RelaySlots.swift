import Synchronization

/// How many PostgreSQL-backed test relays run at once in one test process. Every relay holds a
/// pool of up to 16 connections and a listening one, and the test cluster takes 100 (PostgreSQL's
/// default): the client suite's tests, all at once on two relays each, ran it out ("cannot
/// connect … within 15 s") and starved the two cores besides. Tests beyond the bound wait for a
/// slot — an awaited event, no polling — so the suite runs as a few tests at a time.
final class RelaySlots: Sendable {
    /// The bound, in relays (a ``TestStore/cluster(_:)`` of two takes two).
    static let shared = RelaySlots(limit: 8)

    private struct State {
        var used = 0
        var waiting: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }
    private let limit: Int
    private let state = Mutex(State())

    init(limit: Int) { self.limit = limit }

    /// Runs `body` holding `count` slots (at most the whole bound), waiting first until they are free.
    func with<T>(_ count: Int, isolation: isolated (any Actor)? = #isolation, _ body: () async throws -> T) async throws -> T {
        let count = min(count, limit)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state in
                guard state.waiting.isEmpty, state.used + count <= limit else {
                    state.waiting.append((count, continuation))
                    return false
                }
                state.used += count
                return true
            }
            if now { continuation.resume() }
        }
        defer { release(count) }
        return try await body()
    }

    private func release(_ count: Int) {
        // First come, first served: the oldest waiter goes first, so a cluster is not overtaken for ever.
        let woken = state.withLock { state in
            state.used -= count
            var woken: [CheckedContinuation<Void, Never>] = []
            while let first = state.waiting.first, state.used + first.count <= limit {
                state.waiting.removeFirst()
                state.used += first.count
                woken.append(first.continuation)
            }
            return woken
        }
        for continuation in woken { continuation.resume() }
    }
}
