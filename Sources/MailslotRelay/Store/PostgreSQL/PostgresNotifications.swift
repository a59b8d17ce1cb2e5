import Logging
import PostgresNIO
import Synchronization

/// ``ClusterSignals`` over PostgreSQL's `LISTEN`/`NOTIFY`, on channel ``ClusterNotification/channel``.
///
/// Sending: a node's group commit adds one `pg_notify` to each batch that created or unsent
/// messages, naming the mailboxes (``PostgresStore``), never one per message — every notifying
/// commit takes a database-wide lock, so their number, not their size, is what costs. A new
/// subscription announces itself with a generation from the `subscription_generations` sequence.
///
/// Listening: on one connection of its own, outside the store's pool (a pool of one), so that a
/// busy pool never delays it and it never holds a pooled connection. When that connection fails
/// — the server restarted, failed over, or a heartbeat went unanswered — the node connects
/// again, listens again and then re-reads every live subscription (``ClusterEvent/recheckAll``):
/// whatever was notified meanwhile is found in the store.
///
/// Presence, for wake-ups (docs/design/wakeups.md §2.3): each subscription's row in
/// `live_subscriptions` names the node holding it until it ends there, and the node proves it is
/// alive with a row in `relay_nodes`, renewed every ``presenceInterval`` on the pool; a node that
/// stops deletes that row and clears its subscriptions. A killed node's stop counting once its
/// row is older than the claims' presence window.
final class PostgresNotifications: ClusterSignals {
    /// This process's id in the payloads; its own notifications come back to it and are ignored.
    let node: String
    private let pool: PostgresPool
    private let listener: PostgresPool
    private let metrics: RelayMetrics?
    private let logger: Logger
    private let listening = Mutex<Task<Void, Never>?>(nil)
    private let beating = Mutex<Task<Void, Never>?>(nil)
    /// Whether the node listened before (then a new LISTEN re-reads everything), and whether it
    /// did since it last connected (then the next wait starts short again).
    private let listened = Atomic<Bool>(false)
    private let listenedSinceConnecting = Atomic<Bool>(false)

    /// The listening connection ended or stopped answering.
    struct ConnectionLost: Error {}

    /// The listening connection's `application_name`, to tell it apart in `pg_stat_activity`.
    static let applicationName = "mailslot-relay-listener"

    /// How often the listening connection is checked with a query, and how long the answer may take.
    static let heartbeat = (interval: Duration.seconds(10), timeout: Duration.seconds(5))

    /// How often the node renews its `relay_nodes` row.
    static let presenceInterval = Duration.seconds(10)

    init(node: String, pool: PostgresPool, configuration: PostgresClient.Configuration, metrics: RelayMetrics?, logger: Logger) {
        self.node = node
        self.pool = pool
        listener = PostgresPool(configuration: configuration, maximumConnections: 1, name: Self.applicationName, logger: logger)
        self.metrics = metrics
        self.logger = logger
    }

    /// Statements that send `event` as a notification, to run inside a transaction (delivered at its commit).
    func notify(_ event: ClusterEvent, on connection: PostgresConnection, logger: Logger) async throws {
        let payload = ClusterNotification(node: node, event: event).payload
        try await connection.query("SELECT pg_notify(\(ClusterNotification.channel), \(payload))", logger: logger)
        metrics?.clusterNotificationsSent.increment()
    }

    func announceSubscription(to mailbox: String) async throws -> Int64 {
        let generation = try await PostgresStore.transaction(pool, logger: logger) { [self] connection, logger in
            // The mailbox's row keeps the highest generation drawn, whichever commits last.
            guard let generation = try await PostgresStore.first(connection, """
                WITH drawn AS (SELECT nextval('subscription_generations') AS generation),
                kept AS (INSERT INTO live_subscriptions AS l (uid, generation, node) SELECT \(mailbox), generation, \(node) FROM drawn
                         ON CONFLICT (uid) DO UPDATE SET generation = greatest(l.generation, excluded.generation),
                             node = CASE WHEN excluded.generation > l.generation THEN excluded.node ELSE l.node END)
                SELECT generation FROM drawn
                """, logger)?.decode(Int64.self) else { throw PostgresSchema.Refusal(description: "nextval returned no row") }
            try await notify(.subscribed(mailbox: mailbox, generation: generation), on: connection, logger: logger)
            return generation
        }
        return generation
    }

    func subscriptionEnded(mailbox: String, generation: Int64) async throws {
        try await pool.withConnection { [node, logger] connection in
            // A newer generation's row (another node's, or a newer one here) is left as it is.
            _ = try await connection.query("""
                UPDATE live_subscriptions SET node = NULL WHERE uid = \(mailbox) AND generation = \(generation) AND node = \(node)
                """, logger: logger)
        }
    }

    func newestGenerations(of mailboxes: [String]) async throws -> [String: Int64] {
        guard !mailboxes.isEmpty else { return [:] }
        return try await pool.withConnection { [logger] connection in
            let rows = try await connection.query("SELECT uid, generation FROM live_subscriptions WHERE uid = ANY(\(mailboxes))",
                                                  logger: logger)
            var newest: [String: Int64] = [:]
            for try await (uid, generation) in rows.decode((String, Int64).self) { newest[uid] = generation }
            return newest
        }
    }

    func start(_ handler: @escaping @Sendable (ClusterEvent) -> Void) {
        let task = Task { await listen(handler) }
        listening.withLock { $0 = task }
        let heartbeat = Task { await beat() }
        beating.withLock { $0 = heartbeat }
    }

    func stop() async {
        let task = listening.withLock { task in defer { task = nil }; return task }
        task?.cancel()
        await task?.value
        await listener.close()
        guard let heartbeat = beating.withLock({ task in defer { task = nil }; return task }) else { return }
        heartbeat.cancel()
        await heartbeat.value
        // Gone gracefully: this node's subscriptions stop counting at once, not after the window.
        do {
            try await PostgresStore.transaction(pool, logger: logger) { [node] connection, logger in
                _ = try await connection.query("UPDATE live_subscriptions SET node = NULL WHERE node = \(node)", logger: logger)
                _ = try await connection.query("DELETE FROM relay_nodes WHERE node = \(node)", logger: logger)
            }
        } catch {
            // By type only: the driver's messages may quote statements. The window ends it anyway.
            logger.warning("could not withdraw this relay's presence", metadata: ["error.type": "\(type(of: error))"])
        }
    }

    /// Renews this node's `relay_nodes` row at once and every ``presenceInterval`` until
    /// cancelled; a failed renewal is tried again at the next one.
    private func beat() async {
        while !Task.isCancelled {
            do {
                try await pool.withConnection { [node, logger] connection in
                    try await PostgresStore.heartbeat(connection, logger, node: node, now: EpochMilliseconds.now())
                }
            } catch {
                if Task.isCancelled { break }
                logger.warning("could not renew this relay's presence", metadata: ["error.type": "\(type(of: error))"])
            }
            guard (try? await Task.sleep(for: Self.presenceInterval)) != nil else { break }
        }
    }

    /// Listens until cancelled, connecting again after every failure (waits growing to 2 s).
    private func listen(_ handler: @escaping @Sendable (ClusterEvent) -> Void) async {
        var pause = Duration.milliseconds(100)
        while !Task.isCancelled {
            listenedSinceConnecting.store(false, ordering: .relaxed)
            do {
                try await listener.withConnection { [self] connection in
                    try await connection.listen(on: ClusterNotification.channel) { notifications in
                        // A query after LISTEN on the same connection returns once LISTEN is in effect:
                        // from then on nothing is missed, so what was missed before can be re-read.
                        try await connection.query("SELECT 1", logger: logger)
                        metrics?.clusterListening.record(1)
                        listenedSinceConnecting.store(true, ordering: .relaxed)
                        if listened.exchange(true, ordering: .relaxed) {
                            metrics?.clusterRechecks.increment()
                            handler(.recheckAll)
                        }
                        try await withThrowingTaskGroup(of: Void.self) { group in
                            group.addTask { try await self.receive(notifications, handler) }
                            group.addTask { try await self.checkAlive(connection) }
                            try await group.next()
                            group.cancelAll()
                        }
                    }
                }
            } catch {
                if Task.isCancelled { break }
                // By type only: the driver's messages may quote statements.
                logger.warning("not listening to the other relays; connecting again", metadata: ["error.type": "\(type(of: error))"])
            }
            metrics?.clusterListening.record(0)
            if listenedSinceConnecting.load(ordering: .relaxed) { pause = .milliseconds(100) }
            guard (try? await Task.sleep(for: pause)) != nil else { break }
            pause = min(pause * 2, .seconds(2))
        }
        metrics?.clusterListening.record(0)
    }

    /// Hands every other node's notification to `handler`; returns when the connection ends.
    private func receive(_ notifications: PostgresNotificationSequence, _ handler: @Sendable (ClusterEvent) -> Void) async throws {
        for try await notification in notifications {
            guard let decoded = ClusterNotification(payload: notification.payload) else {
                handler(.recheckAll)  // a newer relay's signal: read everything rather than guess
                continue
            }
            guard decoded.node != node else { continue }
            metrics?.clusterNotificationsReceived.increment()
            handler(decoded.event)
        }
        throw ConnectionLost()
    }

    /// Runs a query every ``heartbeat`` interval; throws when one fails or takes too long, so that
    /// a connection the network silently dropped is replaced rather than listened to for ever.
    private func checkAlive(_ connection: PostgresConnection) async throws {
        while true {
            try await Task.sleep(for: Self.heartbeat.interval)
            do {
                try await PostgresPool.within(Self.heartbeat.timeout, orThrow: { ConnectionLost() }) { [logger] in
                    _ = try await connection.query("SELECT 1", logger: logger)
                }
            } catch {
                try? await connection.close()
                throw error
            }
        }
    }
}
