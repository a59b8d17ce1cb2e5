import Testing

/// Runs `body` and returns what it returns, unless `timeout` passes first: then `body` is
/// cancelled and ``DeadlinePassed`` (a failure of the test, saying what did not finish) is
/// thrown. For an operation that might otherwise wait for ever — a client that reconnects
/// without end when it refuses a frame, a start that should fail but hangs — so that such a
/// defect fails the test instead of hanging the suite. The bound is paid only when it fails.
public func withDeadline<T: Sendable>(_ timeout: Duration, _ what: String = "the operation",
                                      sourceLocation: SourceLocation = #_sourceLocation,
                                      _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            // The deadline itself (cancelled as soon as `body` finishes), not a wait for an event.
            try await ContinuousClock().sleep(for: timeout)
            return nil
        }
        defer { group.cancelAll() }
        guard let first = try await group.next(), let value = first else {
            throw DeadlinePassed(what: what, timeout: timeout, sourceLocation: sourceLocation)
        }
        return value
    }
}

/// ``withDeadline(_:_:sourceLocation:_:)``'s operation did not finish in time.
public struct DeadlinePassed: Error, CustomStringConvertible {
    /// What was waited for.
    public let what: String
    /// How long.
    public let timeout: Duration
    /// Where the test waited.
    public let sourceLocation: SourceLocation
    /// "… did not finish within … (File.swift:12)".
    public var description: String { "\(what) did not finish within \(timeout) (\(sourceLocation.fileName):\(sourceLocation.line))" }
}
