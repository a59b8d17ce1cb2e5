import Foundation

/// What the bench must not leave behind, even when interrupted: spawned relays and their folders,
/// a throwaway PostgreSQL cluster. Each is registered while it exists; on SIGINT or SIGTERM the
/// registered clean-ups run, newest first (relays before the database they use), and the bench
/// exits 130.
enum Teardown {
    private static let pending = Locked<[(id: UUID, cleanUp: @Sendable () -> Void)]>([])
    private static let signalSources = Locked<[any DispatchSourceSignal]>([])

    /// Registers `cleanUp` for an interruption; returns the id that ``remove(_:)`` takes.
    static func add(_ cleanUp: @escaping @Sendable () -> Void) -> UUID {
        let id = UUID()
        pending.withLock { $0.append((id, cleanUp)) }
        return id
    }

    /// The thing is gone (cleaned up the ordinary way): nothing to do for it on an interruption.
    static func remove(_ id: UUID) {
        pending.withLock { $0.removeAll { $0.id == id } }
    }

    /// On SIGINT or SIGTERM: run every registered clean-up, then exit 130.
    static func installSignalHandlers() {
        for signalNumber in [SIGINT, SIGTERM] {
            signal(signalNumber, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .global())
            source.setEventHandler {
                // Under the lock to the end: whatever the run does meanwhile, it can register
                // nothing new (a relay it was about to start) that would outlive the bench.
                pending.withLock { entries in
                    for entry in entries.reversed() { entry.cleanUp() }
                    Console.error("mailslot-bench: interrupted")
                    exit(130)
                }
            }
            source.resume()
            signalSources.withLock { $0.append(source) }
        }
    }
}
