import Foundation
import Logging
import MailslotAudit
import MailslotRelay
import MailslotWire
import Synchronization

/// A real relay on 127.0.0.1 and a free port, in a temporary folder of its own, with its own
/// issuer key; and the tests' typed HTTP client for it (TestRelay+HTTP.swift). Made and torn down
/// by ``withTestRelay(issuer:dataDirectory:logger:configure:_:)`` only, so no test leaves one running.
public final class TestRelay: Sendable {
    /// The relay itself, for tests that look inside (its store, its metrics).
    public let relay: Relay
    /// The port it listens on.
    public let port: Int
    /// The issuer key it trusts: ``token(_:lifetime:)`` mints with it.
    public let issuer: IdentityKeyPair
    /// The `aud` its tokens must carry.
    public let audience: String
    /// Its database folder.
    public let dataDirectory: String
    /// A temporary folder for the test's own files (client profiles, a CLI's home), removed with the relay.
    public let folder: String
    /// The typed HTTP client of this relay.
    public let http: AuditHTTP
    private let running: RunningRelay
    private let stopped = Mutex(false)

    /// Logs errors only: a passing test prints nothing.
    public static let logger: Logger = {
        var logger = Logger(label: "test-relay")
        logger.logLevel = .error
        return logger
    }()

    /// The configuration every test relay starts from: loopback, port 0, `issuer` trusted, a
    /// quick erasure and no disk reserve (DiskFullTests covers those).
    public static func configuration(issuer: IdentityKeyPair, dataDirectory: String) -> RelayConfiguration {
        var configuration = RelayConfiguration()
        configuration.host = "127.0.0.1"
        configuration.port = 0
        configuration.dataDirectory = dataDirectory
        configuration.issuerKeys = [issuer.publicKey]
        configuration.audience = "test.relay"
        configuration.erasureDelay = 0.05
        configuration.minFreeBytes = 0
        configuration.reserveBytes = 0
        return configuration
    }

    /// Starts a relay with `configuration`; on failure, removes `folder` and the data folder.
    fileprivate init(issuer: IdentityKeyPair, folder: String, configuration: RelayConfiguration, logger: Logger) async throws {
        do {
            let relay = try Relay(configuration: configuration, logger: logger)
            running = try await relay.start()
            self.relay = relay
        } catch {
            // Nothing listens: only the folders are left to remove.
            try? FileManager.default.removeItem(atPath: folder)
            try? FileManager.default.removeItem(atPath: configuration.dataDirectory)
            throw error
        }
        self.folder = folder
        self.issuer = issuer
        dataDirectory = configuration.dataDirectory
        audience = configuration.audience
        port = running.port
        http = AuditHTTP(base: URL(string: "http://127.0.0.1:\(running.port)")!)
    }

    /// The relay's base URL.
    public var url: URL { http.base }

    /// Stops the relay gracefully (and checkpoints, as `serve` does), keeping its data: a test
    /// may start another relay on ``dataDirectory``. Stopping twice stops once.
    public func stop() async throws {
        guard stopped.withLock({ stopped in defer { stopped = true }; return !stopped }) else { return }
        try await running.stop()
    }

    /// Stops the relay and deletes its folders.
    fileprivate func finish() async throws {
        defer {
            try? FileManager.default.removeItem(atPath: dataDirectory)
            try? FileManager.default.removeItem(atPath: folder)
        }
        try await stop()
    }
}

/// Runs `body` with a relay started for it, and awaits the relay's stop and the removal of its
/// folders before returning — whether `body` returned or threw. `configure` adjusts
/// ``TestRelay/configuration(issuer:dataDirectory:)``; `dataDirectory` reuses a database folder
/// (a restart), which is removed afterwards too. `body` runs in the caller's isolation.
///
/// A body whose only `try`s are inside `#expect` is written `{ relay async throws in … }`: the
/// compiler decides whether a closure throws before it expands the macros.
public func withTestRelay<T>(issuer: IdentityKeyPair = IdentityKeyPair(), dataDirectory: String? = nil,
                             logger: Logger = TestRelay.logger,
                             configure: (inout RelayConfiguration) throws -> Void = { _ in },
                             isolation: isolated (any Actor)? = #isolation,
                             _ body: (TestRelay) async throws -> T) async throws -> T {
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("mailslot-test-\(UUID().uuidString)").path
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    var configuration = TestRelay.configuration(issuer: issuer, dataDirectory: dataDirectory ?? folder + "/relay")
    do { try configure(&configuration) } catch {
        try? FileManager.default.removeItem(atPath: folder)
        throw error
    }
    let relay = try await TestRelay(issuer: issuer, folder: folder, configuration: configuration, logger: logger)
    let value: T
    do {
        value = try await body(relay)
    } catch {
        try? await relay.finish()
        throw error
    }
    try await relay.finish()
    return value
}

/// What a test helper found wrong before any assertion could: a sign-in refused, a first frame
/// that is not `ready`.
public struct TestRelayError: Error, CustomStringConvertible {
    /// What happened.
    public let description: String
    /// An error saying `description`.
    public init(_ description: String) { self.description = description }
}

/// A fresh, valid, time-ordered-looking message id.
public func messageID(_ n: Int = Int.random(in: 0..<1_000_000)) -> String {
    let digits = String(n)
    return "01KF" + String(repeating: "0", count: 22 - digits.count) + digits
}
