import Foundation
import Logging
import MailslotTestSupport
import PostgresNIO
@testable import MailslotRelay

/// A PostgreSQL database of its own for one test, on the cluster `tools/postgres run` started
/// (MAILSLOT_TEST_DATABASE_URL and MAILSLOT_TEST_DATABASE_ADMIN_URL): created empty, owned by the
/// test role, and dropped afterwards, so that no two tests see each other's rows.
enum TestDatabase {
    /// The test role's URL, when a cluster is there.
    static let url = ProcessInfo.processInfo.environment["MAILSLOT_TEST_DATABASE_URL"].flatMap { $0.isEmpty ? nil : $0 }
    static let adminURL = ProcessInfo.processInfo.environment["MAILSLOT_TEST_DATABASE_ADMIN_URL"].flatMap { $0.isEmpty ? nil : $0 }

    /// Why PostgreSQL tests cannot run here, or nil when they can.
    static var unavailable: String? {
        url == nil || adminURL == nil ? "MAILSLOT_TEST_DATABASE_URL is not set: run the tests under tools/postgres run" : nil
    }

    struct Unavailable: Error, CustomStringConvertible {
        var description: String { TestDatabase.unavailable ?? "" }
    }

    /// Runs `body` with the URL of a new, empty database, and drops it afterwards.
    static func with<T>(_ body: (String) async throws -> T) async throws -> T {
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
        let client = PostgresClient(configuration: try PostgresURL.configuration(url), backgroundLogger: TestRelay.logger)
        let running = Task { await client.run() }
        defer { running.cancel() }
        try await client.query(PostgresQuery(unsafeSQL: sql), logger: TestRelay.logger)
        running.cancel()
        await running.value
    }
}

/// The test URL lacks a part a database URL needs.
private struct MalformedTestURL: Error {}

private func unwrap<T>(_ value: T?) throws -> T {
    guard let value else { throw MalformedTestURL() }
    return value
}
