import Foundation
import Logging
import MailslotAudit
import MailslotRelay
import MailslotWire
import Synchronization
import Testing

/// A real relay on 127.0.0.1 and a free port, in a temporary folder of its own, with its own
/// issuer key; and the tests' typed HTTP client for it (TestRelay+HTTP.swift). Made and torn down
/// by ``withTestRelay(store:issuer:dataDirectory:logger:configure:isolation:_:)`` only, so no test
/// leaves one running. On a ``TestStore/cluster(_:)`` it is the first node, and ``peers`` are the
/// others, on the same database.
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
    /// What it keeps its state in.
    public let store: TestStore
    /// The PostgreSQL database it shares with ``peers`` (``TestStore/postgres``, ``TestStore/cluster(_:)``).
    public let databaseURL: String?
    /// The other relays on the same database (``TestStore/cluster(_:)``); none otherwise.
    public let peers: [TestRelay]
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
    fileprivate init(issuer: IdentityKeyPair, folder: String, configuration: RelayConfiguration, logger: Logger,
                     store: TestStore = .sqlite, peers: [TestRelay] = []) async throws {
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
        self.store = store
        self.peers = peers
        databaseURL = configuration.databaseURL
        dataDirectory = configuration.dataDirectory
        audience = configuration.audience
        port = running.port
        http = AuditHTTP(base: URL(string: "http://127.0.0.1:\(running.port)")!)
    }

    /// The relay's base URL.
    public var url: URL { http.base }

    /// Every relay of the test: this one first, then ``peers``.
    public var nodes: [TestRelay] { [self] + peers }

    /// The node `uid`'s clients use: always the same one for a uid, and on two nodes "alice" on
    /// the first and "bob" on the second (the sum of the uid's bytes, modulo the nodes), so that a
    /// test's sender and recipient are on different relays and delivery crosses between them.
    public func node(for uid: String) -> TestRelay {
        let nodes = nodes
        return nodes[uid.utf8.reduce(0) { $0 + Int($1) } % nodes.count]
    }

    /// The URL of ``node(for:)``: where `uid`'s client (a CLI profile, a library client) connects.
    public func url(for uid: String) -> URL { node(for: uid).url }

    /// Stops the relay gracefully (and checkpoints, as `serve` does), keeping its data: a test
    /// may start another relay on ``dataDirectory``. Stopping twice stops once.
    public func stop() async throws {
        guard stopped.withLock({ stopped in defer { stopped = true }; return !stopped }) else { return }
        try await running.stop()
    }

    /// Stops the relay and its peers (all of them, even when one fails to stop) and deletes their folders.
    fileprivate func finish() async throws {
        var failure: (any Error)?
        for node in nodes {
            do {
                try await node.stop()
            } catch {
                failure = failure ?? error
            }
            try? FileManager.default.removeItem(atPath: node.dataDirectory)
            try? FileManager.default.removeItem(atPath: node.folder)
        }
        if let failure { throw failure }
    }
}

/// Runs `body` with a relay started for it on `store`, and awaits the relay's stop and the
/// removal of its folders (and of its database) before returning — whether `body` returned or
/// threw. `configure` adjusts ``TestRelay/configuration(issuer:dataDirectory:)`` (of every node);
/// `dataDirectory` reuses a database folder (a restart), which is removed afterwards too. `body`
/// runs in the caller's isolation.
///
/// `store` defaults to ``TestStore/configured`` (`MAILSLOT_TEST_STORE`). On
/// ``TestStore/postgres`` the relay gets a new PostgreSQL database of its own; on
/// ``TestStore/cluster(_:)`` that many relays share one, and `body` gets the first with the
/// others as its ``TestRelay/peers`` (``TestRelay/node(for:)`` spreads uids over them). Without
/// a PostgreSQL cluster (`tools/postgres run`), those two skip the test, saying why.
///
/// A body whose only `try`s are inside `#expect` is written `{ relay async throws in … }`: the
/// compiler decides whether a closure throws before it expands the macros.
public func withTestRelay<T>(store: TestStore? = nil, issuer: IdentityKeyPair = IdentityKeyPair(), dataDirectory: String? = nil,
                             logger: Logger = TestRelay.logger,
                             configure: (inout RelayConfiguration) throws -> Void = { _ in },
                             isolation: isolated (any Actor)? = #isolation,
                             _ body: (TestRelay) async throws -> T) async throws -> T {
    let store = try store ?? TestStore.configured
    switch store {
    case .sqlite:
        let relay = try await startTestRelay(store: store, issuer: issuer, dataDirectory: dataDirectory, databaseURL: nil,
                                             logger: logger, configure: configure, peers: [])
        return try await runThenFinish(relay, body)
    case .postgres, .cluster:
        if let reason = TestDatabase.unavailable { try Test.cancel("\(store): \(reason)") }
        let count: Int
        if case .cluster(let n) = store { count = n } else { count = 1 }
        guard count >= 1 else { throw TestRelayError("\(store): a cluster has at least one relay") }
        return try await RelaySlots.shared.with(count) { try await TestDatabase.with { url in
            // The others first, each in folders of its own; the first node owns them from then on.
            var peers: [TestRelay] = []
            do {
                for _ in 1..<count {
                    peers.append(try await startTestRelay(store: store, issuer: issuer, dataDirectory: nil, databaseURL: url,
                                                          logger: logger, configure: configure, peers: []))
                }
            } catch {
                for peer in peers { try? await peer.finish() }
                throw error
            }
            let relay: TestRelay
            do {
                relay = try await startTestRelay(store: store, issuer: issuer, dataDirectory: dataDirectory, databaseURL: url,
                                                 logger: logger, configure: configure, peers: peers)
            } catch {
                for peer in peers { try? await peer.finish() }
                throw error
            }
            return try await runThenFinish(relay, body)
        } }
    }
}

/// One relay in a new temporary folder, with `configure` applied.
private func startTestRelay(store: TestStore, issuer: IdentityKeyPair, dataDirectory: String?, databaseURL: String?, logger: Logger,
                            configure: (inout RelayConfiguration) throws -> Void, peers: [TestRelay],
                            isolation: isolated (any Actor)? = #isolation) async throws -> TestRelay {
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("mailslot-test-\(UUID().uuidString)").path
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    var configuration = TestRelay.configuration(issuer: issuer, dataDirectory: dataDirectory ?? folder + "/relay")
    configuration.databaseURL = databaseURL
    do { try configure(&configuration) } catch {
        try? FileManager.default.removeItem(atPath: folder)
        throw error
    }
    return try await TestRelay(issuer: issuer, folder: folder, configuration: configuration, logger: logger, store: store, peers: peers)
}

/// Runs `body`, then stops `relay` (and its peers) whatever `body` did.
private func runThenFinish<T>(_ relay: TestRelay, isolation: isolated (any Actor)? = #isolation,
                              _ body: (TestRelay) async throws -> T) async throws -> T {
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
