import Foundation

/// A value behind a lock, for the little state that tasks share (counters, handles, results).
/// The lock is held only for the closure: never across an `await`.
final class Locked<Value>: @unchecked Sendable {
    private var value: Value
    private let lock = NSLock()

    init(_ value: Value) { self.value = value }

    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }

    /// A copy of the value.
    var current: Value { withLock { $0 } }
}

/// Monotonic time in nanoseconds: one `clock_gettime`, no allocation, so it can stamp every message.
/// Every timestamp the bench compares comes from this one clock in this one process.
enum Monotonic {
    @inline(__always)
    static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_nsec)
    }

    /// Sleeps until `deadline` (a ``now()`` value); returns at once if it has passed.
    static func sleep(until deadline: UInt64) async throws {
        let now = now()
        if deadline > now { try await Task.sleep(nanoseconds: deadline - now) }
    }

    /// Seconds between two ``now()`` values.
    static func seconds(_ from: UInt64, _ to: UInt64) -> Double { Double(to &- from) / 1e9 }
}

/// Why the bench stopped, with the exit status it should have.
struct BenchFailure: Error, CustomStringConvertible {
    /// The text after `mailslot-bench: error:`.
    let description: String
    /// The process exit status.
    let status: Int32

    /// The relay could not be reached or started (EX_UNAVAILABLE).
    static func unreachable(_ text: String) -> BenchFailure { BenchFailure(description: text, status: 69) }
    /// The relay answered something the protocol does not allow, or the run could not proceed (EX_SOFTWARE).
    static func failed(_ text: String) -> BenchFailure { BenchFailure(description: text, status: 70) }
    /// A file or setting the user gave is unusable (EX_USAGE).
    static func usage(_ text: String) -> BenchFailure { BenchFailure(description: text, status: 64) }
}

/// Progress and warnings go to stderr, so that stdout holds only the summary (and the JSON line).
enum Console {
    static func error(_ text: String) {
        FileHandle.standardError.write(Data((text + "\n").utf8))
    }
}

/// Runs `operation` for at most `seconds`. Nil on timeout; the operation is then cancelled and not
/// awaited, so a peer that never answers cannot hold the bench.
func withDeadline<T: Sendable>(seconds: Double, _ operation: @escaping @Sendable () async throws -> T) async throws -> T? {
    let outcome = Locked<CheckedContinuation<T?, any Error>?>(nil)
    let work = Locked<Task<Void, Never>?>(nil)
    let timer = Locked<Task<Void, Never>?>(nil)
    return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T?, any Error>) in
        outcome.withLock { $0 = continuation }
        func finish(_ result: Result<T?, any Error>) {
            guard let pending = outcome.withLock({ value -> CheckedContinuation<T?, any Error>? in
                defer { value = nil }
                return value
            }) else { return }
            pending.resume(with: result)
        }
        work.withLock {
            $0 = Task {
                do { finish(.success(try await operation())) } catch { finish(.failure(error)) }
                timer.withLock { $0?.cancel() }
            }
        }
        timer.withLock {
            $0 = Task {
                try? await Task.sleep(nanoseconds: UInt64(max(0, seconds) * 1e9))
                if Task.isCancelled { return }
                finish(.success(nil))
                work.withLock { $0?.cancel() }
            }
        }
    }
}

/// Maps `items` with at most `limit` operations at a time, keeping the order; the first error wins.
func boundedMap<Item: Sendable, Mapped: Sendable>(_ items: [Item], limit: Int,
                                                  _ transform: @escaping @Sendable (Item) async throws -> Mapped) async throws -> [Mapped] {
    var results = [Mapped?](repeating: nil, count: items.count)
    try await withThrowingTaskGroup(of: (Int, Mapped).self) { group in
        var next = 0
        while next < min(limit, items.count) {
            let index = next, item = items[index]
            group.addTask { (index, try await transform(item)) }
            next += 1
        }
        while let (index, value) = try await group.next() {
            results[index] = value
            if next < items.count {
                let index = next, item = items[index]
                group.addTask { (index, try await transform(item)) }
                next += 1
            }
        }
    }
    return results.map { $0! }
}

/// Polls `condition` every `interval` seconds until it holds or `seconds` pass; true if it held.
func waitUntil(seconds: Double, interval: Double = 0.02, _ condition: () -> Bool) async -> Bool {
    let deadline = Monotonic.now() + UInt64(seconds * 1e9)
    while !condition() {
        if Monotonic.now() >= deadline { return false }
        try? await Task.sleep(nanoseconds: UInt64(interval * 1e9))
    }
    return true
}
