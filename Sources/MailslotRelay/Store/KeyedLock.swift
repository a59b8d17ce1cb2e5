import Synchronization

/// Mutual exclusion per key, for async work: one holder of a key at a time, the others waiting
/// in arrival order, and keys never held cost nothing. What completes a blob on a store only
/// this process opens (SQLite): the storage's completion runs under it, outside any database
/// transaction, so a slow object store holds up no other write.
final class KeyedLock: Sendable {
    /// Held keys, each with the tasks waiting for it, oldest first.
    private let held = Mutex<[String: [CheckedContinuation<Void, Never>]]>([:])

    init() {}

    /// Runs `body` while holding `key`.
    func withLock<T: Sendable>(_ key: String, _ body: () async throws -> T) async throws -> T {
        await acquire(key)
        defer { release(key) }
        return try await body()
    }

    private func acquire(_ key: String) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let acquired = held.withLock { held -> Bool in
                guard held[key] != nil else {
                    held[key] = []
                    return true
                }
                held[key]!.append(continuation)
                return false
            }
            if acquired { continuation.resume() }
        }
    }

    private func release(_ key: String) {
        // The key passes to the oldest waiter still held; with none waiting it is free.
        let next = held.withLock { held -> CheckedContinuation<Void, Never>? in
            guard var waiting = held[key], !waiting.isEmpty else {
                held[key] = nil
                return nil
            }
            let next = waiting.removeFirst()
            held[key] = waiting
            return next
        }
        next?.resume()
    }
}
