import Foundation
import Logging
import PostgresNIO

/// The PostgreSQL database the relay nodes share, as the bench measures it: its commit count
/// (`xact_commit` in `pg_stat_database`, over a connection of its own) and, when the server's data
/// folder is known, the server's CPU time and memory (the postmaster and its children, in `/proc`).
struct DatabaseProbe: Sendable {
    /// The database's URL (it holds a password, never printed); nil: no commit count.
    let url: String?
    /// The server's data folder; nil: no server CPU or memory.
    let pgdata: String?

    private static let logger: Logger = {
        var logger = Logger(label: "mailslot-bench.postgres")
        logger.logLevel = .critical
        return logger
    }()

    /// Transactions committed in the database so far; nil when it cannot be read (within 10 s).
    func commits() async -> Int? {
        guard let url, let configuration = Self.configuration(url) else { return nil }
        let outcome = try? await withDeadline(seconds: 10) { () async throws -> Int? in
            let client = PostgresClient(configuration: configuration, backgroundLogger: Self.logger)
            let running = Task { await client.run() }
            defer { running.cancel() }
            let rows = try await client.query("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
                                              logger: Self.logger)
            for try await count in rows.decode(Int64.self) { return Int(count) }
            return nil
        }
        return outcome ?? nil
    }

    /// The statistics a backend keeps are flushed at most once a second, and within about a
    /// second of it going idle: wait that long before reading a count that must include them.
    static let statisticsDelay: UInt64 = 1_500_000_000

    /// The server's processes: the postmaster (`postmaster.pid`'s first line) and its children.
    func serverProcesses() -> [Int32] {
        guard let pgdata, let text = try? String(contentsOfFile: pgdata + "/postmaster.pid", encoding: .utf8),
              let first = text.split(separator: "\n").first, let postmaster = Int32(first.trimmingCharacters(in: .whitespaces)),
              ProcessStats.cpuSeconds(pid: postmaster) != nil else { return [] }
        return [postmaster] + ProcessStats.children(of: postmaster)
    }

    /// CPU time of the server so far, in seconds: its processes', with that of children it has
    /// already reaped (backends of closed connections) — so a delta counts them too.
    func serverCPUSeconds() -> Double? {
        let processes = serverProcesses()
        guard !processes.isEmpty else { return nil }
        return processes.reduce(0) { $0 + (ProcessStats.cpuSeconds(pid: $1, includingReapedChildren: true) ?? 0) }
    }

    /// The server's memory now, in bytes: the sum of its processes' RSS (shared memory counted in
    /// every process that touched it) and of their PSS (shared pages divided among their users).
    func serverMemory() -> (rss: Int?, pss: Int?) {
        let processes = serverProcesses()
        guard !processes.isEmpty else { return (nil, nil) }
        let rss = processes.compactMap(ProcessStats.residentBytes(pid:))
        let pss = processes.compactMap(ProcessStats.proportionalBytes(pid:))
        return (rss.isEmpty ? nil : rss.reduce(0, +), pss.isEmpty ? nil : pss.reduce(0, +))
    }

    /// A client configuration from a `postgres://` URL: `sslmode` disable, prefer (the default)
    /// or require (then the certificate is verified).
    private static func configuration(_ text: String) -> PostgresClient.Configuration? {
        guard let url = URLComponents(string: text), let host = url.host, !host.isEmpty,
              let user = url.user?.removingPercentEncoding else { return nil }
        let database = String(url.path.dropFirst()).removingPercentEncoding
        let tls: PostgresClient.Configuration.TLS
        switch url.queryItems?.last(where: { $0.name == "sslmode" })?.value ?? "prefer" {
        case "disable": tls = .disable
        case "prefer": tls = .prefer(.makeClientConfiguration())
        default: tls = .require(.makeClientConfiguration())
        }
        let address = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        return PostgresClient.Configuration(host: address, port: url.port ?? 5432, username: user,
                                            password: url.password?.removingPercentEncoding, database: database, tls: tls)
    }
}
