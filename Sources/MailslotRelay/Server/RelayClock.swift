/// Where the relay reads the time, in milliseconds since the epoch (``EpochMilliseconds``):
/// every expiry, deadline and rate limit that is measured in wall-clock time asks
/// ``RelayConfiguration/clock``, so that tests move time instead of waiting for it. Durations
/// the relay measures for itself (timeouts of sockets and of the database) keep Swift's
/// monotonic clocks.
package struct RelayClock: Sendable {
    private let read: @Sendable () -> Int64

    /// A clock that answers `read()`; it must not go backwards by much (expiry compares its values).
    package init(_ read: @escaping @Sendable () -> Int64) {
        self.read = read
    }

    /// The wall clock.
    package static let system = RelayClock { EpochMilliseconds.now() }

    /// Now, in milliseconds since the epoch.
    package func now() -> Int64 { read() }
}
