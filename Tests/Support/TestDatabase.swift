import Foundation
import Logging
import PostgresNIO

/// A PostgreSQL database of its own for one test, on the cluster `tools/postgres run` started
/// (MAILSLOT_TEST_DATABASE_URL and MAILSLOT_TEST_DATABASE_ADMIN_URL): created empty, owned by the
/// test role, and dropped afterwards, so that no two tests see each other's rows.
/// ``withTestRelay(store:issuer:dataDirectory:logger:configure:isolation:_:)`` uses it for
/// ``TestStore/postgres`` and ``TestStore/cluster(_:)``.
public enum TestDatabase {
    /// The test role's URL, when a cluster is there.
    public static let url = ProcessInfo.processInfo.environment["MAILSLOT_TEST_DATABASE_URL"].flatMap { $0.isEmpty ? nil : $0 }
    /// The cluster superuser's URL (creates and drops the tests' databases).
    public static let adminURL = ProcessInfo.processInfo.environment["MAILSLOT_TEST_DATABASE_ADMIN_URL"].flatMap { $0.isEmpty ? nil : $0 }

    /// Why PostgreSQL tests cannot run here, or nil when they can.
    public static var unavailable: String? {
        url == nil || adminURL == nil ? "MAILSLOT_TEST_DATABASE_URL is not set: run the tests under tools/postgres run" : nil
    }

    /// Thrown by the helpers when no cluster is there; says how to get one.
    public struct Unavailable: Error, CustomStringConvertible {
        public var description: String { TestDatabase.unavailable ?? "" }
    }

    /// Runs `body` with the URL of a new, empty database, and drops it afterwards (whether `body`
    /// returned or threw). `body` runs in the caller's isolation.
    public static func with<T>(isolation: isolated (any Actor)? = #isolation, _ body: (String) async throws -> T) async throws -> T {
        guard let url, let adminURL else { throw Unavailable() }
        let name = "mailslot_test_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        var components = try unwrap(URLComponents(string: url))
        let owner = try unwrap(components.user)
        components.path = "/" + name
        let databaseURL = try unwrap(components.string)
        // Names of our own making (hex and a role name from the URL), quoted: no user text reaches the SQL.
        try await admin(adminURL, "CREATE DATABASE \"\(name)\" OWNER \"\(owner)\"")
        do {
            let value = try await body(databaseURL)
            try await admin(adminURL, "DROP DATABASE \"\(name)\" WITH (FORCE)")
            return value
        } catch {
            try? await admin(adminURL, "DROP DATABASE \"\(name)\" WITH (FORCE)")
            throw error
        }
    }

    /// Runs one statement as the cluster's superuser, outside any transaction.
    private static func admin(_ url: String, _ sql: String) async throws {
        _ = try await adminQuery(url, sql)
    }

    /// The first column of the first row of `sql`, run as the cluster's superuser (0 when none).
    public static func admin(_ sql: String) async throws -> Int64 {
        guard let adminURL else { throw Unavailable() }
        return try await adminQuery(adminURL, sql)
    }

    private static func adminQuery(_ url: String, _ sql: String) async throws -> Int64 {
        let logger = Logger(label: "test-database", factory: { _ in SwiftLogNoOpLogHandler() })
        let client = PostgresClient(configuration: try configuration(url), backgroundLogger: logger)
        let running = Task { await client.run() }
        defer { running.cancel() }
        let rows = try await client.query(PostgresQuery(unsafeSQL: sql), logger: logger).collect()
        let value = (try? rows.first?.decode(Int64.self)) ?? 0
        running.cancel()
        await running.value
        return value
    }

    /// A client configuration for the test cluster's URLs (`postgres://USER[:PASSWORD]@HOST[:PORT]/DB`,
    /// loopback, no TLS: tools/postgres makes them so). The relay's own parser is internal to it.
    private static func configuration(_ url: String) throws -> PostgresClient.Configuration {
        let components = try unwrap(URLComponents(string: url))
        return PostgresClient.Configuration(host: try unwrap(components.host), port: components.port ?? 5432,
                                            username: try unwrap(components.user), password: components.password,
                                            database: String(components.path.drop(while: { $0 == "/" })), tls: .disable)
    }

    /// The database name in a URL `with(_:)` made.
    public static func name(of url: String) -> String {
        URLComponents(string: url).map { String($0.path.drop(while: { $0 == "/" })) } ?? ""
    }

    /// pg_ctl for the test cluster (`tools/postgres` sets MAILSLOT_TEST_PGCTL), to stop and start it.
    public static let pgctl = ProcessInfo.processInfo.environment["MAILSLOT_TEST_PGCTL"].flatMap { $0.isEmpty ? nil : $0 }

    /// Runs pg_ctl with `arguments`; throws when it fails.
    public static func pgctl(_ arguments: [String]) async throws {
        guard let pgctl else { throw Unavailable() }
        let result = try await ProcessRunner.run(URL(fileURLWithPath: pgctl), arguments)
        guard result.status == 0 else { throw PgctlFailed(description: "pg_ctl \(arguments.joined(separator: " ")): \(result.stderr)") }
    }

    /// pg_ctl failed; what it printed.
    public struct PgctlFailed: Error, CustomStringConvertible {
        public let description: String
    }
}

/// The test URL lacks a part a database URL needs.
private struct MalformedTestURL: Error {}

private func unwrap<T>(_ value: T?) throws -> T {
    guard let value else { throw MalformedTestURL() }
    return value
}
