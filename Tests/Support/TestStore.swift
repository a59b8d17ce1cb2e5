import Foundation

/// What a test relay keeps its state in: ``withTestRelay(store:issuer:dataDirectory:logger:configure:isolation:_:)``
/// starts one relay on SQLite or on a fresh PostgreSQL database, or several relays sharing one.
///
/// The default, ``configured``, follows `MAILSLOT_TEST_STORE` (`sqlite`, `postgres` or
/// `cluster`, which is two relays), so that one suite runs unchanged on every backend:
/// `tools/test` runs the client suite, and the parts of the security and CLI suites that
/// exercise the store or delivery, again under `tools/postgres run` with it set. Tests that look
/// inside a backend (``TestRelay/relay``'s store) name their store instead.
public enum TestStore: Sendable, Equatable, CustomStringConvertible {
    /// One relay on its own SQLite database (the relay's default backend).
    case sqlite
    /// One relay on a new PostgreSQL database (``TestDatabase``); the test is skipped when no
    /// PostgreSQL is there.
    case postgres
    /// `n` relays (two or more) sharing one new PostgreSQL database, as a deployment behind a
    /// load balancer: ``TestRelay/nodes``. Skipped when no PostgreSQL is there.
    case cluster(Int)

    /// The store `MAILSLOT_TEST_STORE` names (SQLite when it is unset); throws, saying what it
    /// accepts, when it names none.
    public static var configured: TestStore {
        get throws(TestRelayError) {
            switch ProcessInfo.processInfo.environment["MAILSLOT_TEST_STORE"] ?? "" {
            case "", "sqlite": return .sqlite
            case "postgres": return .postgres
            case "cluster": return .cluster(2)
            case let other: throw TestRelayError("MAILSLOT_TEST_STORE=\(other): expected sqlite, postgres or cluster")
            }
        }
    }

    /// The same backend on one relay: `.cluster` becomes `.postgres`. For tests of what one relay
    /// alone holds — files under its data folder (blobs without S3), its in-memory limits.
    public var singleNode: TestStore {
        if case .cluster = self { return .postgres }
        return self
    }

    /// Whether the relays of this store keep their state in PostgreSQL.
    public var isPostgres: Bool { self != .sqlite }

    /// `sqlite`, `postgres` or `cluster(n)`.
    public var description: String {
        switch self {
        case .sqlite: "sqlite"
        case .postgres: "postgres"
        case .cluster(let n): "cluster(\(n))"
        }
    }
}
