import Testing

/// Waits until `condition` holds, asking it again every few milliseconds, for at most `timeout`;
/// throws ``EventuallyTimedOut`` (a failure of the test, saying what did not happen and where)
/// when it still does not hold then. For what a test cannot await directly — a relay's
/// background work (an erasure, a WAL checkpoint), another task reaching a wait — instead of a
/// sleep that guesses how long that takes: it returns as soon as the condition holds, and the
/// bound is generous because it is only paid when the test fails.
///
/// ```swift
/// try await eventually("bob's subscription is registered") { relay.relay.mailboxes.hub.count == 1 }
/// ```
public func eventually(within timeout: Duration = .seconds(10), _ what: String = "the condition",
                       sourceLocation: SourceLocation = #_sourceLocation,
                       isolation: isolated (any Actor)? = #isolation,
                       _ condition: () async throws -> Bool) async throws {
    let clock = ContinuousClock()
    let deadline = clock.now + timeout
    while true {
        if try await condition() { return }
        guard clock.now < deadline else { throw EventuallyTimedOut(what: what, timeout: timeout, sourceLocation: sourceLocation) }
        // The poll interval: short, and bounded by the deadline above.
        try await clock.sleep(for: .milliseconds(5))
    }
}

/// ``eventually(within:_:sourceLocation:isolation:_:)``'s condition did not hold in time.
public struct EventuallyTimedOut: Error, CustomStringConvertible {
    /// What was waited for.
    public let what: String
    /// How long.
    public let timeout: Duration
    /// Where the test waited.
    public let sourceLocation: SourceLocation
    /// "… did not hold within … (File.swift:12)".
    public var description: String { "\(what) did not hold within \(timeout) (\(sourceLocation.fileName):\(sourceLocation.line))" }
}
