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
    @Option(help: ArgumentHelp("PostgreSQL database instead of SQLite in the data folder, postgres://USER:PASSWORD@HOST:PORT/DATABASE [MAILSLOT_DATABASE_URL]; prefer the variable.", valueName: "URL"))
    var databaseURL: String?
    @Option(help: ArgumentHelp("A trusted issuer public key, k4.public.… [MAILSLOT_ISSUER_PUBLIC_KEY, comma-separated]; repeat to trust several.", valueName: "KEY"))
    var issuerPublicKey: [String] = []
    @Option(help: ArgumentHelp("This relay's id, the `aud` tokens must carry [MAILSLOT_AUDIENCE] (default mailslot).", valueName: "ID"))
    var audience: String?
    @Option(help: ArgumentHelp("normal (survives a process crash) or full (fsync every commit; survives power loss) [MAILSLOT_DURABILITY].", valueName: "MODE"))
    var durability: String?
    @Option(help: ArgumentHelp("Largest envelope in bytes [MAILSLOT_MAX_ENVELOPE_BYTES] (default 65536).", valueName: "BYTES"))
    var maxEnvelopeBytes: String?
    @Option(help: ArgumentHelp("Most pending messages per mailbox [MAILSLOT_MAX_PENDING] (default 10000).", valueName: "N"))
    var maxPending: String?
    @Option(help: ArgumentHelp("Creates per second per author, each entry of a send to many one [MAILSLOT_CREATE_RATE] (default 167).", valueName: "N"))
    var createRate: String?
    @Option(help: ArgumentHelp("Burst of creates per author, at least --max-batch-entries [MAILSLOT_CREATE_BURST] (default 2000).", valueName: "N"))
    var createBurst: String?
    @Option(help: ArgumentHelp("Most entries of one send to many, 1 to 10000 [MAILSLOT_MAX_BATCH_ENTRIES] (default 1000).", valueName: "N"))
    var maxBatchEntries: String?
    @Option(help: ArgumentHelp("Largest send-to-many body in bytes, 1 MiB to 64 MiB [MAILSLOT_MAX_BATCH_BYTES] (default 8388608).", valueName: "BYTES"))
    var maxBatchBytes: String?
    @Option(help: ArgumentHelp("Most one-time prekeys stored per user [MAILSLOT_MAX_PREKEYS] (default 200).", valueName: "N"))
    var maxPrekeys: String?
    @Option(help: ArgumentHelp("Prekey claims per second per claimer [MAILSLOT_PREKEY_CLAIM_RATE] (default 1).", valueName: "N"))
    var prekeyClaimRate: String?
    @Option(help: ArgumentHelp("Burst of prekey claims per claimer [MAILSLOT_PREKEY_CLAIM_BURST] (default 60).", valueName: "N"))
    var prekeyClaimBurst: String?
    @Option(help: ArgumentHelp("Prekey claims per second of one user's prekeys, all claimers together [MAILSLOT_PREKEY_MAILBOX_RATE] (default 0.2).", valueName: "N"))
    var prekeyMailboxRate: String?
    @Option(help: ArgumentHelp("Burst of prekey claims of one user's prekeys [MAILSLOT_PREKEY_MAILBOX_BURST] (default 30).", valueName: "N"))
    var prekeyMailboxBurst: String?
    @Option(help: ArgumentHelp("Relays sharing the database; the prekey claim rates and bursts are for all of them, each relay counting its share [MAILSLOT_RELAYS] (default 1).", valueName: "N"))
    var relays: String?
    @Option(help: ArgumentHelp("Reads in progress on this relay, all mailboxes together; half are kept for mailboxes with none in progress [MAILSLOT_MAX_READS] (default 64).", valueName: "N"))
    var maxReads: String?
    @Option(help: ArgumentHelp("Unacknowledged deliveries per subscription [MAILSLOT_WINDOW] (default 256).", valueName: "N"))
    var window: String?
    @Option(help: ArgumentHelp("Most concurrent connections [MAILSLOT_MAX_CONNECTIONS] (default 10000).", valueName: "N"))
    var maxConnections: String?
    @Option(help: ArgumentHelp("Seconds a new connection has to send its first request head [MAILSLOT_HEADER_TIMEOUT] (default 10).", valueName: "SECONDS"))
    var headerTimeout: String?
    @Option(help: ArgumentHelp("Seconds an HTTP connection may stay silent [MAILSLOT_IDLE_TIMEOUT] (default 60).", valueName: "SECONDS"))
    var idleTimeout: String?
    @Option(help: ArgumentHelp("Envelope bytes one author may have waiting in all mailboxes [MAILSLOT_MAX_AUTHOR_BYTES] (default 268435456).", valueName: "BYTES"))
    var maxAuthorBytes: String?
    @Option(help: ArgumentHelp("Live sign-ins per user; more revoke the least recently refreshed [MAILSLOT_MAX_SESSIONS_PER_USER] (default 32).", valueName: "N"))
    var maxSessionsPerUser: String?
    @Option(help: ArgumentHelp("Refuse new messages while the data disk has less free space [MAILSLOT_MIN_FREE_BYTES] (default 268435456).", valueName: "BYTES"))
    var minFreeBytes: String?
    @Option(help: ArgumentHelp("Size of the reserve file released when the disk fills up [MAILSLOT_DISK_RESERVE_BYTES] (default 67108864).", valueName: "BYTES"))
    var diskReserveBytes: String?
    @Option(help: ArgumentHelp("Session lifetime in seconds [MAILSLOT_SESSION_TTL] (default 900).", valueName: "SECONDS"))
    var sessionTTL: String?
    @Option(help: ArgumentHelp("Refresh-token lifetime in seconds [MAILSLOT_REFRESH_TTL] (default 2592000).", valueName: "SECONDS"))
    var refreshTTL: String?
    @Option(help: ArgumentHelp("Lifetime of a message sent without ttl_seconds [MAILSLOT_MESSAGE_TTL] (default 604800).", valueName: "SECONDS"))
    var messageTTL: String?
    @Option(help: ArgumentHelp("Longest message lifetime a sender may ask for [MAILSLOT_MAX_MESSAGE_TTL] (default 2592000).", valueName: "SECONDS"))
    var maxMessageTTL: String?
    @Option(help: ArgumentHelp("Largest owner document in bytes [MAILSLOT_MAX_DOCUMENT_BYTES] (default 16384).", valueName: "BYTES"))
    var maxDocumentBytes: String?
    @Option(help: ArgumentHelp("Seconds between sweeps of expired messages [MAILSLOT_SWEEP_INTERVAL] (default 60).", valueName: "SECONDS"))
    var sweepInterval: String?
    @Option(help: ArgumentHelp("Largest file in an attachment, in bytes, up to 64 GiB [MAILSLOT_MAX_FILE_BYTES] (default 104857600).", valueName: "BYTES"))
    var maxFileBytes: String?
    @Option(help: ArgumentHelp("Attachment bytes, finished and unfinished, one author may hold [MAILSLOT_MAX_AUTHOR_BLOB_BYTES] (default 2147483648).", valueName: "BYTES"))
    var maxAuthorBlobBytes: String?
    @Option(help: ArgumentHelp("Unfinished attachment uploads per author [MAILSLOT_MAX_UPLOADS_PER_AUTHOR] (default 8).", valueName: "N"))
    var maxUploadsPerAuthor: String?
    @Option(help: ArgumentHelp("Bytes per attachment upload part, 1 MiB to 64 MiB [MAILSLOT_BLOB_PART_BYTES] (default 8388608).", valueName: "BYTES"))
    var blobPartBytes: String?
    @Option(help: ArgumentHelp("Seconds an unfinished attachment upload is kept [MAILSLOT_BLOB_UPLOAD_TTL] (default 86400).", valueName: "SECONDS"))
    var blobUploadTTL: String?
    @Option(help: ArgumentHelp("Most recipients of one attachment [MAILSLOT_MAX_BLOB_RECIPIENTS] (default 1000).", valueName: "N"))
    var maxBlobRecipients: String?
    @Option(help: ArgumentHelp("Attachment bytes per second, uploads and downloads of all users together, e.g. 200MB; 0: no cap [MAILSLOT_MAX_TRANSFER_RATE] (default 0).", valueName: "BYTES_PER_S"))
    var maxTransferRate: String?
    @Option(help: ArgumentHelp("Where attachments live: files (under the data folder) or s3://BUCKET[/PREFIX]?endpoint=URL; credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY [MAILSLOT_BLOB_STORE] (default files).", valueName: "STORE"))
    var blobStore: String?
    @Option(help: ArgumentHelp("Bearer token for scraping /metrics, 16+ characters [MAILSLOT_METRICS_TOKEN]; prefer the variable. Without one, /metrics answers only on a loopback address.", valueName: "TOKEN"))
    var metricsToken: String?
    @Option(help: ArgumentHelp("At most one wake-up per push registration per this many seconds, 5 to 3600 [MAILSLOT_PUSH_WAKE_INTERVAL] (default 30).", valueName: "SECONDS"))
    var pushWakeInterval: String?
    @Option(help: ArgumentHelp("Most push registrations per user, 1 to 100 [MAILSLOT_MAX_PUSH_REGISTRATIONS] (default 10).", valueName: "N"))
    var maxPushRegistrations: String?
    @Option(help: ArgumentHelp("Wake-up calls in flight on this relay, 1 to 256 [MAILSLOT_PUSH_CONCURRENCY] (default 16).", valueName: "N"))
    var pushConcurrency: String?
    @Option(help: ArgumentHelp("Seconds one wake-up call may take, 2 to 60 [MAILSLOT_PUSH_TIMEOUT] (default 10).", valueName: "SECONDS"))
    var pushTimeout: String?
    @Flag(help: ArgumentHelp("Let Web Push endpoints be loopback, private or special addresses, and http:// on loopback (tests, a private distributor) [MAILSLOT_PUSH_ALLOW_PRIVATE_ADDRESSES=true]."))
    var pushAllowPrivateAddresses = false
    @Option(help: ArgumentHelp("PEM certificates trusted besides the system's for push provider connections [MAILSLOT_PUSH_CA_FILE].", valueName: "FILE"))
    var pushCaFile: String?
    @Option(help: ArgumentHelp("VAPID P-256 private key, PEM, mode 0600 (`mailslot-relay keygen --vapid FILE` makes one); turns Web Push on with --vapid-subject [MAILSLOT_VAPID_KEY].", valueName: "FILE"))
    var vapidKey: String?
    @Option(help: ArgumentHelp("The operator's contact in VAPID tokens, mailto: or https: [MAILSLOT_VAPID_SUBJECT].", valueName: "URI"))
    var vapidSubject: String?
    @Option(help: ArgumentHelp("APNs token signing key (.p8); APNs needs it with --apns-key-id, --apns-team-id and --apns-topic [MAILSLOT_APNS_KEY].", valueName: "FILE"))
    var apnsKey: String?
    @Option(help: ArgumentHelp("The APNs key's 10-character id [MAILSLOT_APNS_KEY_ID].", valueName: "ID"))
    var apnsKeyID: String?
    @Option(help: ArgumentHelp("The Apple team's 10-character id [MAILSLOT_APNS_TEAM_ID].", valueName: "ID"))
    var apnsTeamID: String?
    @Option(help: ArgumentHelp("The app's bundle id, apns-topic [MAILSLOT_APNS_TOPIC].", valueName: "TOPIC"))
    var apnsTopic: String?
    @Option(help: ArgumentHelp("APNs production URL [MAILSLOT_APNS_URL] (default https://api.push.apple.com).", valueName: "URL"))
    var apnsURL: String?
    @Option(help: ArgumentHelp("APNs development URL [MAILSLOT_APNS_SANDBOX_URL] (default https://api.sandbox.push.apple.com).", valueName: "URL"))
    var apnsSandboxURL: String?
    @Option(help: ArgumentHelp("FCM service account JSON from Google; turns FCM on [MAILSLOT_FCM_SERVICE_ACCOUNT].", valueName: "FILE"))
    var fcmServiceAccount: String?
    @Option(help: ArgumentHelp("FCM URL [MAILSLOT_FCM_URL] (default https://fcm.googleapis.com).", valueName: "URL"))
    var fcmURL: String?
    @Option(help: ArgumentHelp("OAuth token URL for FCM [MAILSLOT_FCM_TOKEN_URL] (default: the service account's token_uri).", valueName: "URL"))
    var fcmTokenURL: String?
    @Option(help: ArgumentHelp("The operator's webhook for wake-ups; needs --webhook-secret-file [MAILSLOT_WEBHOOK_URL].", valueName: "URL"))
    var webhookURL: String?
    @Option(help: ArgumentHelp("whsec_… secrets, one per line, each signing (`mailslot-relay keygen --webhook-secret FILE` makes one) [MAILSLOT_WEBHOOK_SECRET_FILE].", valueName: "FILE"))
    var webhookSecretFile: String?
    @Option(help: ArgumentHelp("trace, debug, info, notice, warning, error or critical [MAILSLOT_LOG_LEVEL] (default info).", valueName: "LEVEL"))
    var logLevel: String?

    /// The flags given, by the ``RelaySetting/flag`` they set: `serve` maps them to the
    /// configuration through ``RelayConfiguration/settings`` and decides nothing itself.
    var flags: [String: String] {
        let given: [(String, String?)] = [
            ("listen", listen), ("data", data), ("database-url", databaseURL), ("issuer-public-key", issuerPublicKey.isEmpty ? nil : issuerPublicKey.joined(separator: ",")),
            ("audience", audience), ("durability", durability), ("max-envelope-bytes", maxEnvelopeBytes), ("max-pending", maxPending),
            ("create-rate", createRate), ("create-burst", createBurst), ("max-batch-entries", maxBatchEntries),
            ("max-batch-bytes", maxBatchBytes), ("max-prekeys", maxPrekeys), ("prekey-claim-rate", prekeyClaimRate),
            ("prekey-claim-burst", prekeyClaimBurst), ("prekey-mailbox-rate", prekeyMailboxRate), ("prekey-mailbox-burst", prekeyMailboxBurst),
            ("relays", relays), ("max-reads", maxReads),
            ("window", window), ("max-connections", maxConnections),
            ("header-timeout", headerTimeout), ("idle-timeout", idleTimeout), ("max-author-bytes", maxAuthorBytes),
            ("max-sessions-per-user", maxSessionsPerUser), ("min-free-bytes", minFreeBytes), ("disk-reserve-bytes", diskReserveBytes),
            ("session-ttl", sessionTTL), ("refresh-ttl", refreshTTL), ("message-ttl", messageTTL), ("max-message-ttl", maxMessageTTL),
            ("max-document-bytes", maxDocumentBytes), ("sweep-interval", sweepInterval),
            ("max-file-bytes", maxFileBytes), ("max-author-blob-bytes", maxAuthorBlobBytes), ("max-uploads-per-author", maxUploadsPerAuthor),
            ("blob-part-bytes", blobPartBytes), ("blob-upload-ttl", blobUploadTTL), ("max-blob-recipients", maxBlobRecipients),
            ("max-transfer-rate", maxTransferRate), ("blob-store", blobStore), ("metrics-token", metricsToken),
            ("push-wake-interval", pushWakeInterval), ("max-push-registrations", maxPushRegistrations), ("push-concurrency", pushConcurrency),
            ("push-timeout", pushTimeout), ("push-allow-private-addresses", pushAllowPrivateAddresses ? "true" : nil),
            ("push-ca-file", pushCaFile), ("vapid-key", vapidKey), ("vapid-subject", vapidSubject), ("apns-key", apnsKey),
            ("apns-key-id", apnsKeyID), ("apns-team-id", apnsTeamID), ("apns-topic", apnsTopic), ("apns-url", apnsURL),
            ("apns-sandbox-url", apnsSandboxURL), ("fcm-service-account", fcmServiceAccount), ("fcm-url", fcmURL),
            ("fcm-token-url", fcmTokenURL), ("webhook-url", webhookURL), ("webhook-secret-file", webhookSecretFile),
        ]
        return Dictionary(uniqueKeysWithValues: given.compactMap { flag, value in value.map { (flag, $0) } })
    }

    func run() async throws {
        // The database, its WAL and the development key are for the relay's user only.
        umask(0o077)
        let environment = ProcessInfo.processInfo.environment
        MallocTuning.apply(environment: environment)

        let level = logLevel ?? environment["MAILSLOT_LOG_LEVEL"].flatMap { $0.isEmpty ? nil : $0 } ?? "info"
        guard let logLevel = Logger.Level(rawValue: level) else { throw ValidationError("unknown log level '\(level)'") }
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardOutput(label: label)
            handler.logLevel = logLevel
            return handler
        }
        let logger = Logger(label: "mailslot-relay")

        var configuration: RelayConfiguration
        do { configuration = try RelayConfiguration(flags: flags, environment: environment) } catch let error as RelayConfigurationError {
            throw ValidationError(error.description)
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
        for warning in ConfigurationCheck.warnings(configuration) { logger.warning("\(warning)") }

        let relay: Relay
        do { relay = try Relay(configuration: configuration, logger: logger) } catch let error as RelayConfigurationError {
            throw ValidationError(error.description)
        }
        let configured = configuration
        try await relay.run { port in
            logger.info("listening", metadata: ["address": "\(configured.host):\(port)", "data": "\(configured.dataDirectory)",
                                                "store": "\(configured.storeBackend)",
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
