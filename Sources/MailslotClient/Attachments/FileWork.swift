import Foundation

/// Blocking file work — reading, sealing, opening and syncing files of any size — on a thread of
/// its own, never on Swift's cooperative pool. That pool has one thread per core (two on small
/// machines): a file sealed or opened there for seconds, `fsync`s included, would stall every
/// other task of the app (and, in the project's tests, the relays running in the same process).
enum FileWork {
    /// Runs `work` on a new thread and returns its result.
    static func run<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let thread = Thread { continuation.resume(with: Result { try work() }) }
            thread.name = "mailslot-file-work"
            thread.start()
        }
    }
}
