import ArgumentParser
import Foundation
import Logging
import MailslotRelay
import MailslotWire

/// `mailslot-relay serve`: runs the relay until SIGTERM or SIGINT.
struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the relay.",
        discussion: """
            Every option can also be set with the environment variable in brackets; an option on the \
            command line wins. With no issuer key configured, the relay creates a development issuer \
            key in the data folder (and refuses to do so on a non-loopback address).
            """
    )

    @Option(help: ArgumentHelp("Address to listen on [MAILSLOT_LISTEN] (default 127.0.0.1:8080).", valueName: "HOST:PORT"))
    var listen: String?
    @Option(help: ArgumentHelp("Data folder [MAILSLOT_DATA] (default ./mailslot-data).", valueName: "DIR"))
    var data: String?
    @Option(help: ArgumentHelp("A trusted issuer public key, k4.public.… [MAILSLOT_ISSUER_PUBLIC_KEY, comma-separated]; repeat to trust several.", valueName: "KEY"))
    var issuerPublicKey: [String] = []
    @Option(help: ArgumentHelp("This relay's id, the `aud` tokens must carry [MAILSLOT_AUDIENCE] (default mailslot).", valueName: "ID"))
    var audience: String?
    @Option(help: ArgumentHelp("normal (survives a process crash) or full (fsync every commit; survives power loss) [MAILSLOT_DURABILITY].", valueName: "MODE"))
    var durability: String?
    @Option(help: ArgumentHelp("Largest envelope in bytes [MAILSLOT_MAX_ENVELOPE_BYTES] (default 65536).", valueName: "BYTES"))
    var maxEnvelopeBytes: Int?
    @Option(help: ArgumentHelp("Most pending messages per mailbox [MAILSLOT_MAX_PENDING] (default 10000).", valueName: "N"))
    var maxPending: Int?
    @Option(help: ArgumentHelp("Creates per second per author [MAILSLOT_CREATE_RATE] (default 100).", valueName: "N"))
    var createRate: Double?
    @Option(help: ArgumentHelp("Burst of creates per author [MAILSLOT_CREATE_BURST] (default 500).", valueName: "N"))
    var createBurst: Double?
    @Option(help: ArgumentHelp("Unacknowledged deliveries per subscription [MAILSLOT_WINDOW] (default 256).", valueName: "N"))
    var window: Int?
    @Option(help: ArgumentHelp("Most concurrent connections [MAILSLOT_MAX_CONNECTIONS] (default 10000).", valueName: "N"))
    var maxConnections: Int?
    @Option(help: ArgumentHelp("Seconds a new connection has to send its first request head [MAILSLOT_HEADER_TIMEOUT] (default 10).", valueName: "SECONDS"))
    var headerTimeout: Double?
    @Option(help: ArgumentHelp("Seconds an HTTP connection may stay silent [MAILSLOT_IDLE_TIMEOUT] (default 60).", valueName: "SECONDS"))
    var idleTimeout: Double?
    @Option(help: ArgumentHelp("Envelope bytes one author may have waiting in all mailboxes [MAILSLOT_MAX_AUTHOR_BYTES] (default 268435456).", valueName: "BYTES"))
    var maxAuthorBytes: Int64?
    @Option(help: ArgumentHelp("Live sign-ins per user; more revoke the least recently refreshed [MAILSLOT_MAX_SESSIONS_PER_USER] (default 32).", valueName: "N"))
    var maxSessionsPerUser: Int?
    @Option(help: ArgumentHelp("Refuse new messages while the data disk has less free space [MAILSLOT_MIN_FREE_BYTES] (default 268435456).", valueName: "BYTES"))
    var minFreeBytes: Int64?
    @Option(help: ArgumentHelp("Size of the reserve file released when the disk fills up [MAILSLOT_DISK_RESERVE_BYTES] (default 67108864).", valueName: "BYTES"))
    var diskReserveBytes: Int64?
    @Option(help: ArgumentHelp("Session lifetime in seconds [MAILSLOT_SESSION_TTL] (default 900).", valueName: "SECONDS"))
    var sessionTTL: Int64?
    @Option(help: ArgumentHelp("Refresh-token lifetime in seconds [MAILSLOT_REFRESH_TTL] (default 2592000).", valueName: "SECONDS"))
    var refreshTTL: Int64?
    @Option(help: ArgumentHelp("Lifetime of a message sent without ttl_seconds [MAILSLOT_MESSAGE_TTL] (default 604800).", valueName: "SECONDS"))
    var messageTTL: Int64?
    @Option(help: ArgumentHelp("Longest message lifetime a sender may ask for [MAILSLOT_MAX_MESSAGE_TTL] (default 2592000).", valueName: "SECONDS"))
    var maxMessageTTL: Int64?
    @Option(help: ArgumentHelp("Largest owner document in bytes [MAILSLOT_MAX_DOCUMENT_BYTES] (default 16384).", valueName: "BYTES"))
    var maxDocumentBytes: Int?
    @Option(help: ArgumentHelp("Seconds between sweeps of expired messages [MAILSLOT_SWEEP_INTERVAL] (default 60).", valueName: "SECONDS"))
    var sweepInterval: Double?
    @Option(help: ArgumentHelp("Bearer token for scraping /metrics, 16+ characters [MAILSLOT_METRICS_TOKEN]; prefer the variable. Without one, /metrics answers only on a loopback address.", valueName: "TOKEN"))
    var metricsToken: String?
    @Option(help: ArgumentHelp("trace, debug, info, notice, warning, error or critical [MAILSLOT_LOG_LEVEL] (default info).", valueName: "LEVEL"))
    var logLevel: String?

    func run() async throws {
        // The database, its WAL and the development key are for the relay's user only.
        umask(0o077)
        let environment = ProcessInfo.processInfo.environment
        MallocTuning.apply(environment: environment)
        func setting(_ flag: String?, _ variable: String) -> String? { flag ?? environment[variable].flatMap { $0.isEmpty ? nil : $0 } }
        func number<T: LosslessStringConvertible>(_ flag: T?, _ variable: String, _: String) throws -> T? {
            if let flag { return flag }
            guard let text = setting(nil, variable) else { return nil }
            guard let value = T(text) else { throw ValidationError("\(variable) must be a number, not '\(text)'") }
            return value
        }

        let level = setting(logLevel, "MAILSLOT_LOG_LEVEL") ?? "info"
        guard let logLevel = Logger.Level(rawValue: level) else { throw ValidationError("unknown log level '\(level)'") }
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardOutput(label: label)
            handler.logLevel = logLevel
            return handler
        }
        let logger = Logger(label: "mailslot-relay")

        var configuration = RelayConfiguration()
        let address = setting(listen, "MAILSLOT_LISTEN") ?? "127.0.0.1:8080"
        guard let colon = address.lastIndex(of: ":"), let port = Int(address[address.index(after: colon)...]),
              (0...65535).contains(port), colon > address.startIndex else {
            throw ValidationError("--listen takes HOST:PORT, e.g. 127.0.0.1:8080")
        }
        configuration.host = String(address[..<colon]).trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        configuration.port = port
        configuration.dataDirectory = setting(data, "MAILSLOT_DATA") ?? "./mailslot-data"
        configuration.audience = setting(audience, "MAILSLOT_AUDIENCE") ?? Defaults.audience
        configuration.durability = setting(durability, "MAILSLOT_DURABILITY") ?? "normal"
        if let value = try number(maxEnvelopeBytes, "MAILSLOT_MAX_ENVELOPE_BYTES", "max envelope") {
            guard (Envelope.minimumSize...Envelope.maximumSize).contains(value), value & (value - 1) == 0 else {
                throw ValidationError("--max-envelope-bytes must be a power of two from \(Envelope.minimumSize) to \(Envelope.maximumSize) (an envelope size class)")
            }
            configuration.maxEnvelopeBytes = value
            configuration.maxBodyBytes = value * 4 / 3 + 4096
            configuration.maxFrameBytes = value * 4 / 3 + 4096
        }
        func atLeast<T: Comparable>(_ value: T?, _ minimum: T, _ name: String) throws -> T? {
            if let value, value < minimum { throw ValidationError("\(name) must be at least \(minimum)") }
            return value
        }
        if let value = try atLeast(try number(maxPending, "MAILSLOT_MAX_PENDING", ""), 1, "--max-pending") { configuration.maxPendingPerMailbox = value }
        if let value = try atLeast(try number(createRate, "MAILSLOT_CREATE_RATE", ""), 0.01, "--create-rate") { configuration.createRate = value }
        if let value = try atLeast(try number(createBurst, "MAILSLOT_CREATE_BURST", ""), 1, "--create-burst") { configuration.createBurst = value }
        if let value = try atLeast(try number(window, "MAILSLOT_WINDOW", ""), 1, "--window") { configuration.deliveryWindow = value }
        if let value = try atLeast(try number(maxConnections, "MAILSLOT_MAX_CONNECTIONS", ""), 1, "--max-connections") { configuration.maxConnections = value }
        if let value = try atLeast(try number(headerTimeout, "MAILSLOT_HEADER_TIMEOUT", ""), 1, "--header-timeout") { configuration.headerTimeout = value }
        if let value = try atLeast(try number(idleTimeout, "MAILSLOT_IDLE_TIMEOUT", ""), 1, "--idle-timeout") { configuration.idleTimeout = value }
        if let value = try atLeast(try number(maxAuthorBytes, "MAILSLOT_MAX_AUTHOR_BYTES", ""), Int64(configuration.maxEnvelopeBytes), "--max-author-bytes (at least the largest envelope)") {
            configuration.maxAuthorBytes = value
        }
        if let value = try atLeast(try number(maxSessionsPerUser, "MAILSLOT_MAX_SESSIONS_PER_USER", ""), 1, "--max-sessions-per-user") { configuration.maxSessionFamilies = value }
        if let value = try atLeast(try number(minFreeBytes, "MAILSLOT_MIN_FREE_BYTES", ""), 0, "--min-free-bytes") { configuration.minFreeBytes = value }
        if let value = try atLeast(try number(diskReserveBytes, "MAILSLOT_DISK_RESERVE_BYTES", ""), 0, "--disk-reserve-bytes") { configuration.reserveBytes = value }
        if let value = try atLeast(try number(sessionTTL, "MAILSLOT_SESSION_TTL", ""), 60, "--session-ttl") { configuration.sessionLifetime = value }
        if let value = try atLeast(try number(refreshTTL, "MAILSLOT_REFRESH_TTL", ""), 60, "--refresh-ttl") { configuration.refreshLifetime = value }
        if let value = try atLeast(try number(messageTTL, "MAILSLOT_MESSAGE_TTL", ""), 1, "--message-ttl") { configuration.defaultMessageTTL = value }
        if let value = try atLeast(try number(maxMessageTTL, "MAILSLOT_MAX_MESSAGE_TTL", ""), 1, "--max-message-ttl") { configuration.maxMessageTTL = value }
        if let value = try atLeast(try number(maxDocumentBytes, "MAILSLOT_MAX_DOCUMENT_BYTES", ""), 2, "--max-document-bytes") { configuration.maxDocumentBytes = value }
        if let value = try atLeast(try number(sweepInterval, "MAILSLOT_SWEEP_INTERVAL", ""), 1, "--sweep-interval") { configuration.sweepInterval = value }
        configuration.metricsToken = setting(metricsToken, "MAILSLOT_METRICS_TOKEN")

        var keys = issuerPublicKey
        if keys.isEmpty, let variable = setting(nil, "MAILSLOT_ISSUER_PUBLIC_KEY") {
            keys = variable.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        }
        for text in keys {
            do { configuration.issuerKeys.append(try IdentityPublicKey(paserk: text)) } catch {
                throw ValidationError("an issuer public key must be PASERK k4.public.… (mailslot-relay keygen prints one)")
            }
        }
        if configuration.issuerKeys.isEmpty {
            configuration.issuerKeys = [try developmentIssuerKey(configuration, logger: logger)]
        }
        let developmentKey = try? IssuerKeyFile.read(DevelopmentKey.path(in: configuration.dataDirectory)).publicKey
        let problems = ConfigurationCheck.problems(configuration, developmentKeyTrusted: configuration.issuerKeys.contains { $0 == developmentKey },
                                                   logLevel: level)
        guard problems.isEmpty else {
            throw ValidationError("refusing to start:\n" + problems.map { "  - " + $0 }.joined(separator: "\n"))
        }

        let relay: Relay
        do { relay = try Relay(configuration: configuration, logger: logger) } catch let error as RelayConfigurationError {
            throw ValidationError(error.description)
        }
        let configured = configuration
        try await relay.run { port in
            logger.info("listening", metadata: ["address": "\(configured.host):\(port)", "data": "\(configured.dataDirectory)",
                                                "audience": "\(configured.audience)",
                                                "issuer_kids": "\(configured.issuerKeys.map(\.paserkID).joined(separator: ","))"])
        }
    }

    /// Loads, or creates on first run, the development issuer key in the data folder, and says so loudly.
    private func developmentIssuerKey(_ configuration: RelayConfiguration, logger: Logger) throws -> IdentityPublicKey {
        guard configuration.listensOnLoopbackOnly else {
            throw ValidationError("""
                no issuer public key is configured, and the development key is only for loopback addresses. \
                Give --issuer-public-key k4.public.… (or MAILSLOT_ISSUER_PUBLIC_KEY) when listening on \(configuration.host).
                """)
        }
        try FileManager.default.createDirectory(atPath: configuration.dataDirectory, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        let path = DevelopmentKey.path(in: configuration.dataDirectory)
        if !FileManager.default.fileExists(atPath: path) { try IssuerKeyFile.create(path, key: IdentityKeyPair()) }
        let key = try IssuerKeyFile.read(path)
        let banner = """

            ********************************************************************************
            DEVELOPMENT ISSUER KEY in use: \(path)
            Anyone who can read that file can sign in as any user. For anything but local
            development, run `mailslot-relay keygen` and start with --issuer-public-key.
            Mint a token:  mailslot-relay token mint --uid alice --data \(configuration.dataDirectory)
            ********************************************************************************

            """
        FileHandle.standardError.write(Data(banner.utf8))
        logger.warning("using the development issuer key", metadata: ["kid": "\(key.publicKey.paserkID)"])
        return key.publicKey
    }
}

/// Where the development issuer key lives in a data folder.
enum DevelopmentKey {
    static func path(in dataDirectory: String) -> String {
        (dataDirectory as NSString).appendingPathComponent("dev-issuer.key")
    }
}
