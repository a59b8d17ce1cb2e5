import Foundation
import MailslotRelay
import Synchronization

/// A clock a test moves: the wall clock plus an offset the test advances. Given to a relay as
/// ``RelayConfiguration/clock`` (`configure: { $0.clock = clock.relayClock }`), it makes sessions,
/// messages and uploads expire and rate limits refill when the test says — no waiting, and no
/// race with a loaded machine. It starts at the wall clock (tokens and timestamps a test makes
/// stay in range) and only moves forward.
public final class TestClock: Sendable {
    private let offset = Atomic<Int64>(0)

    /// A clock at the wall clock's time.
    public init() {}

    /// Moves the clock forward by `duration` (whole milliseconds).
    public func advance(by duration: Duration) {
        let (seconds, attoseconds) = duration.components
        precondition(duration >= .zero, "a test clock only moves forward")
        offset.add(seconds * 1000 + attoseconds / 1_000_000_000_000_000, ordering: .relaxed)
    }

    /// Now, in milliseconds since the epoch.
    public func now() -> Int64 { Int64((Date().timeIntervalSince1970 * 1000).rounded(.down)) + offset.load(ordering: .relaxed) }

    /// This clock, for ``RelayConfiguration/clock``.
    package var relayClock: RelayClock { RelayClock { [self] in now() } }
}
