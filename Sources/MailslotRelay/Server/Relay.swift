import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import MailslotWire
import NIOCore
import ServiceLifecycle

/// The relay: its store, services and HTTP/WebSocket application, assembled from a
/// ``RelayConfiguration``. `mailslot-relay serve` runs one; tests run them on port 0.
public struct Relay: Sendable {
    /// The configuration it runs with.
    public let configuration: RelayConfiguration
    let store: any RelayStore
    let sessions: SessionService
    let mailboxes: MailboxService
    let erasure: ErasureScheduler
    let metrics: RelayMetrics

    /// This relay's metrics as `GET /metrics` serves them (Prometheus text), for the project's
    /// tests: they count what reached the relay without a request of their own.
    package func metricsText() -> String { String(decoding: metrics.exposition(), as: UTF8.self) }

    /// Blobs: the service of their routes, and the eraser of their bytes.
    let blobs: BlobService
    let blobEraser: BlobEraser
    /// Push registrations: the service of their routes.
    let push: PushService
    /// The wake-up sender and the providers' connections, run with the application; nil when no
    /// provider is configured.
    let wakeDispatcher: WakeDispatcher?
    let pushHTTP: OutboundHTTP?
    /// The object store's connections, run (and shut down) with the application; nil for files.
    let blobStorageService: (any Service)?
    let logger: Logger
    /// The subscriptions' tasks: waited for before the final checkpoint.
    let subscriberTasks = SubscriberTasks()

    /// Opens the store: the PostgreSQL database of ``RelayConfiguration/databaseURL`` when one is
    /// set (migrated when the relay starts: `RelayStore.prepare()`; its connection pool runs
    /// from here until the relay stops), otherwise the SQLite database in the data folder,
    /// created when needed and migrated now.
    ///
    /// ```swift
    /// var configuration = RelayConfiguration()
    /// configuration.issuerKeys = [try IdentityPublicKey(paserk: backendPublicKey)]
    /// let relay = try Relay(configuration: configuration, logger: Logger(label: "relay"))
    /// try await relay.run()   // until SIGTERM or SIGINT
    /// ```
    ///
    /// - Parameters:
    ///   - configuration: The settings; ``RelayConfiguration/problems`` must be empty.
    ///   - logger: Where the relay logs (never a token, secret or message content).
    /// - Throws: ``RelayConfigurationError`` for a configuration with ``RelayConfiguration/problems``;
    ///   the store's error when the database or the blob store cannot be opened.
    public init(configuration: RelayConfiguration, logger: Logger) throws {
        try configuration.validate()
        let metrics = RelayMetrics()
        let store = try Self.openStore(configuration: configuration, metrics: metrics, logger: logger)
        let erasure = ErasureScheduler(store: store, delay: configuration.erasureDelay)
        self.configuration = configuration
        self.store = store
        self.erasure = erasure
        self.metrics = metrics
        self.logger = logger
        sessions = SessionService(store: store, verifier: TokenVerifier(issuerKeys: configuration.issuerKeys, audience: configuration.audience),
                                  sessionLifetime: configuration.sessionLifetime * 1000, refreshLifetime: configuration.refreshLifetime * 1000,
                                  maxFamilies: configuration.maxSessionFamilies, metrics: metrics)
        mailboxes = MailboxService(store: store, configuration: configuration, hub: MailboxHub(),
                                   rateLimiter: RateLimiter(rate: configuration.createRate, burst: configuration.createBurst),
                                   prekeyClaims: PrekeyClaimLimiter(claimerRate: configuration.prekeyClaimRate,
                                                                    claimerBurst: configuration.prekeyClaimBurst,
                                                                    ownerRate: configuration.prekeyMailboxRate,
                                                                    ownerBurst: configuration.prekeyMailboxBurst,
                                                                    relays: configuration.relays),
                                   readLimiter: ReadLimiter(limit: configuration.maxConcurrentReads, relayLimit: configuration.maxReads),
                                   erasure: erasure, metrics: metrics,
                                   batchBudget: BatchBudget(capacity: configuration.maxBatchBytesInFlight))
        // The one route from a commit to the subscriptions: the hub hears the store's commits.
        store.commits.add(mailboxes.hub)
        let storage = try Self.openBlobStorage(configuration: configuration, logger: logger)
        blobStorageService = storage as? S3BlobStorage
        if configuration.storeBackend.isShared, configuration.blobStore == .files {
            // Other relays on the same database see these blobs' rows but cannot read their files.
            logger.warning("blobs are kept in this relay's data folder: other relays sharing the database cannot serve them; use --blob-store s3://… for several relays")
        }
        let now: @Sendable () -> Int64 = { [clock = configuration.clock] in clock.now() }
        blobEraser = BlobEraser(records: store, storage: storage, erasure: erasure, metrics: metrics, clock: now,
                                interval: configuration.sweepInterval,
                                orphans: (storage as? S3BlobStorage).map { S3OrphanUploadSweeper(storage: $0, records: store, clock: now) })
        blobs = BlobService(records: store, storage: storage, configuration: configuration, rateLimiter: mailboxes.rateLimiter,
                            transfers: TransferLimiter(limit: configuration.maxTransfersPerUID),
                            bandwidth: configuration.maxTransferRate > 0
                                ? TransferBandwidth(rate: configuration.maxTransferRate, clock: configuration.transferClock) : nil,
                            eraser: blobEraser, metrics: metrics,
                            logger: logger)
        let pushMetrics = PushMetrics(registry: metrics.registry)
        push = PushService(store: store, settings: configuration.push, rules: configuration.rules,
                           vapidPublicKey: try Self.vapidPublicKey(configuration.push), metrics: pushMetrics)
        (wakeDispatcher, pushHTTP) = try Self.makeWakeDispatcher(configuration: configuration, store: store, hub: mailboxes.hub,
                                                                 metrics: pushMetrics, logger: logger)
        // Commits that stored a message for a mailbox with registrations nudge the dispatcher.
        if let wakeDispatcher { store.commits.add(wakeDispatcher) }
    }

    /// The wake-up dispatcher and the providers' HTTP client when a provider is configured: every
    /// key file read and checked now, before the relay listens (docs/design/wakeups.md §6).
    private static func makeWakeDispatcher(configuration: RelayConfiguration, store: any RelayStore, hub: MailboxHub,
                                           metrics: PushMetrics, logger: Logger) throws -> (WakeDispatcher?, OutboundHTTP?) {
        let made: PushProviders?
        do { made = try PushProviders.make(settings: configuration.push, clock: configuration.clock, logger: logger) } catch {
            throw RelayConfigurationError("wake-ups are configured but cannot be sent: \(error)")
        }
        guard let made else { return (nil, nil) }
        let dispatcher = WakeDispatcher(
            store: store, providers: made.providers, clock: configuration.clock, interval: Int64(configuration.push.wakeInterval) * 1000,
            concurrency: configuration.push.concurrency, pollInterval: configuration.storeBackend.isShared ? .seconds(1) : nil,
            isLiveHere: { hub.isSubscribed($0) },
            metrics: metrics, logger: logger)
        return (dispatcher, made.http)
    }

    /// The VAPID public key `GET /v1/push` gives, read from the key file when Web Push is on
    /// (refused, naming the setting and never the contents, when the file cannot be used).
    private static func vapidPublicKey(_ settings: PushSettings) throws -> String? {
        guard settings.isEnabled(.webpush), let path = settings.webPush.keyFile else { return nil }
        do {
            let key = try VAPID.key(pem: try PushKeyFiles.read(path, setting: "vapid-key"))
            return Base64URL.encode(key.publicKey.x963Representation)
        } catch {
            throw RelayConfigurationError("Web Push is configured but its key cannot be used: \(error)")
        }
    }

    /// The blob storage the configuration names: files under the data folder, or an
    /// S3-compatible object store, whose credentials come from the process's environment only
    /// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`; docs/operations.md).
    private static func openBlobStorage(configuration: RelayConfiguration, logger: Logger) throws -> any BlobStorage {
        switch configuration.blobStore {
        case .files:
            return try FileBlobStorage(directory: (configuration.dataDirectory as NSString).appendingPathComponent("blobs"),
                                       probe: configuration.diskSpaceProbe)
        case .s3(let text):
            do {
                try FileManager.default.createDirectory(atPath: configuration.dataDirectory, withIntermediateDirectories: true,
                                                        attributes: [.posixPermissions: 0o700])
                return try S3BlobStorage.make(location: try S3Location(text), environment: configuration.credentialEnvironment(),
                                              dataDirectory: configuration.dataDirectory, minFreeBytes: configuration.minFreeBytes,
                                              probe: configuration.diskSpaceProbe, logger: logger)
            } catch let error as S3LocationError {
                throw RelayConfigurationError("--blob-store (MAILSLOT_BLOB_STORE): \(error)")
            }
        }
    }

    /// The store the configuration names — the one place the relay chooses a backend.
    private static func openStore(configuration: RelayConfiguration, metrics: RelayMetrics, logger: Logger) throws -> any RelayStore {
        switch configuration.storeBackend {
        case .postgresql(let url):
            return try PostgresStore(url: url, metrics: metrics, logger: logger, wakeInterval: .seconds(configuration.push.wakeInterval))
        case .sqlite(let path):
            try FileManager.default.createDirectory(atPath: configuration.dataDirectory, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
            let diskSpace = DiskSpace(directory: configuration.dataDirectory, minFreeBytes: configuration.minFreeBytes,
                                      reserveBytes: configuration.reserveBytes, probe: configuration.diskSpaceProbe, logger: logger)
            // The wake-up rows the create step writes are due `--push-wake-interval` after the last
            // wake-up: the store must get the operator's interval, not its default.
            return try SQLiteStore(path: path, durability: configuration.durability, metrics: metrics, diskSpace: diskSpace,
                                   wakeInterval: .seconds(configuration.push.wakeInterval))
        }
    }

    /// The HTTP + WebSocket application. `onServerRunning` receives the bound port.
    public func application(onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }) -> some ApplicationProtocol {
        let router = makeRouter()

        let subscription = Subscriptions(mailboxes: mailboxes, sessions: sessions, hub: mailboxes.hub,
                                               window: configuration.deliveryWindow, maxFrameBytes: configuration.maxFrameBytes,
                                               maxFragments: configuration.maxFrameFragments, maxReadBytes: configuration.maxPageBytes,
                                               maxJSONDepth: configuration.maxJSONDepth,
                                               sessionCheckInterval: configuration.sessionCheckInterval, logger: logger,
                                               metrics: metrics, tasks: subscriberTasks)
        let http1 = HTTP1Channel.Configuration(idleTimeout: .milliseconds(Int64(configuration.idleTimeout * 1000)),
                                               httpDecoderConfiguration: .init(maxHeaderFieldSize: 16 * 1024, maxHeaderListSize: 32 * 1024,
                                                                               maxHeaderFieldCount: 100))
        let server = HTTPServerBuilder { responder in
            RelayChildChannel(responder: responder, http1: http1, subscriptions: subscription, headerTimeout: configuration.headerTimeout,
                              idleTimeout: configuration.idleTimeout, maxRequestBodyBytes: configuration.maxRequestBodyBytes)
        }
        return Application(
            router: router,
            server: server,
            configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "mailslot",
                                 availableConnectionsDelegate: MaximumAvailableConnections(configuration.maxConnections)),
            services: [Sweeper(store: store, erasure: erasure, metrics: metrics, interval: configuration.sweepInterval,
                               batch: configuration.sweepBatch, clock: configuration.clock, logger: logger),
                       ErasureService(erasure: erasure, logger: logger), BlobEraserService(eraser: blobEraser, logger: logger),
                       SubscriberShutdown(tasks: subscriberTasks)] + (blobStorageService.map { [$0] } ?? [])
                + ([wakeDispatcher, pushHTTP] as [(any Service)?]).compactMap { $0 },
            onServerRunning: { channel in await onServerRunning(channel.localAddress?.port ?? 0) },
            logger: logger)
    }

    /// The HTTP router with every route (the WebSocket upgrade has its own).
    func makeRouter() -> Router<RelayContext> {
        let router = Router(context: RelayContext.self)
        router.add(middleware: AccessLogMiddleware(metrics: metrics))
        router.add(middleware: ProblemMiddleware())
        Routes(sessions: sessions, mailboxes: mailboxes, configuration: configuration).add(to: router)
        BlobRoutes(sessions: sessions, blobs: blobs, configuration: configuration).add(to: router)
        PushRoutes(sessions: sessions, push: push, configuration: configuration).add(to: router)
        OperationsRoutes(store: store, metrics: metrics, configuration: configuration).add(to: router)
        return router
    }

    /// Runs until SIGTERM or SIGINT: then stops accepting, lets requests finish, closes sockets,
    /// and checkpoints the database so the WAL is empty. The store is prepared (migrated) before
    /// the relay listens, and closed when it stops. To run a relay in the background of a
    /// process and stop it from code, use ``start()`` instead.
    ///
    /// - Parameter onServerRunning: Called with the bound port once the relay listens.
    /// - Throws: What kept the relay from listening (a port in use, a migration that failed), or
    ///   what stopped it; the store is closed either way.
    public func run(onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }) async throws {
        do {
            try await prepareStore()
            let group = ServiceGroup(configuration: .init(services: [application(onServerRunning: onServerRunning)],
                                                          gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
            try await group.run()
            try await finishSubscriptions()
            try await store.checkpoint()
        } catch {
            await store.close()
            throw error
        }
        await store.close()
        logger.info("stopped; database checkpointed")
    }
}

extension Relay {
    /// Readies the store before the relay listens (``RelayStore/prepare()``), and lets the other
    /// relays sharing it, if any, reach this one's hub: what they committed is published to the
    /// store's observers as this relay's own commits are (``CommittedChange/elsewhere(_:)``).
    func prepareStore() async throws {
        try await store.prepare()
        guard let cluster = store.cluster else { return }
        cluster.start { [commits = store.commits, hub = mailboxes.hub, logger] event in
            commits.publish(.elsewhere(event))
            guard event == .recheckAll else { return }
            // Announcements may have been missed too: end the subscriptions a newer one replaced elsewhere.
            Task {
                do {
                    for (uid, generation) in try await cluster.newestGenerations(of: hub.mailboxes) {
                        commits.publish(.elsewhere(.subscribed(mailbox: uid, generation: generation)))
                    }
                } catch {
                    logger.warning("could not compare subscriptions with the other relays'", metadata: ["error.type": "\(type(of: error))"])
                }
            }
        }
    }

    /// After the server stopped: subscriptions' last commits land before the final checkpoint.
    func finishSubscriptions() async throws {
        subscriberTasks.stop()
        await subscriberTasks.drained(within: .seconds(5))
    }
}

/// A configuration the relay refuses to start with.
public struct RelayConfigurationError: Error, CustomStringConvertible {
    /// What is wrong, for the operator.
    public let description: String
    init(_ description: String) { self.description = description }
}

/// Erases expired messages (and sessions) every `interval` seconds.
struct Sweeper: Service {
    let store: any RelayStore
    let erasure: ErasureScheduler
    let metrics: RelayMetrics
    let interval: Double
    let batch: Int
    let clock: RelayClock
    let logger: Logger

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do {
                    let erased = try await store.sweepExpired(now: clock.now(), batch: batch)
                    if erased > 0 {
                        logger.info("expired messages erased", metadata: ["count": "\(erased)"])
                        metrics.messagesExpired.increment(by: erased)
                        erasure.erased()
                    }
                } catch is CancellationError {
                    return
                } catch {
                    logger.error("sweep failed", metadata: ["error.type": "\(type(of: error))"])
                }
                try await Task.sleep(for: .seconds(interval))
            }
        }
    }
}

/// Runs the ``ErasureScheduler`` for the relay's lifetime.
struct ErasureService: Service {
    let erasure: ErasureScheduler
    let logger: Logger

    func run() async throws {
        await cancelWhenGracefulShutdown { await erasure.run(logger: logger) }
    }
}
