import Foundation
import Logging
@testable import MailslotAudit
@testable import MailslotRelay
import MailslotWire

/// An in-process relay on 127.0.0.1 and a free port, for the attack catalogue: its own issuer key
/// and data folder, optionally a broken rules table, and its log lines when asked.
final class SecurityRelay: Sendable {
    let issuer: IdentityKeyPair
    let url: URL
    let dataDirectory: String
    private let running: RunningRelay

    static let audience = "security.test"

    /// Starts a relay; `configure` adjusts the defaults (small rate limits, so floods are quick).
    static func start(logger: Logger = quiet, _ configure: (inout RelayConfiguration) -> Void = { _ in }) async throws -> SecurityRelay {
        let issuer = IdentityKeyPair()
        var configuration = RelayConfiguration()
        configuration.host = "127.0.0.1"
        configuration.port = 0
        configuration.dataDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("mailslot-security-\(UUID().uuidString)").path
        configuration.issuerKeys = [issuer.publicKey]
        configuration.audience = audience
        configuration.createRate = 20
        configuration.createBurst = 60
        // Short enough that the audit sees silent sockets closed in seconds.
        configuration.headerTimeout = 2
        // A test relay keeps no disk reserve and refuses no creates for lack of space (DiskFullTests covers those).
        configuration.minFreeBytes = 0
        configuration.reserveBytes = 0
        configure(&configuration)
        let relay = try Relay(configuration: configuration, logger: logger)
        return SecurityRelay(issuer: issuer, running: try await relay.start(), dataDirectory: configuration.dataDirectory)
    }

    private init(issuer: IdentityKeyPair, running: RunningRelay, dataDirectory: String) {
        self.running = running
        self.dataDirectory = dataDirectory
        url = URL(string: "http://127.0.0.1:\(running.port)")!
        self.issuer = issuer
    }

    /// Runs the black-box audit (or some of its groups) against this relay.
    func audit(_ groups: [Audit.Group] = Audit.Group.allCases) async -> [Audit.Outcome] {
        await Audit(.init(relay: url, issuer: issuer, audience: Self.audience)).run(groups)
    }

    /// Stops the relay and deletes its data.
    func finish() async {
        try? await running.stop()
        try? FileManager.default.removeItem(atPath: dataDirectory)
    }

    static let quiet: Logger = {
        var logger = Logger(label: "security-relay")
        logger.logLevel = .critical
        return logger
    }()
}
