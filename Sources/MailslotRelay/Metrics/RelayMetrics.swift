import Metrics
import Prometheus

/// The relay's operational metrics, through swift-metrics into this relay's own Prometheus
/// registry (a registry per relay, not the process-global bootstrap, so that several relays in
/// one test process count separately). Labels carry routes, statuses, reasons and operation
/// names only: never a uid, a message id or a token.
final class RelayMetrics: Sendable {
    let registry = PrometheusCollectorRegistry()
    private let factory: PrometheusMetricsFactory

    let messagesCreated: CoreMetrics.Counter
    /// Messages sent to their owner over a subscription.
    let messagesDelivered: CoreMetrics.Counter
    /// Messages returned by HTTP reads (pages and single messages), which may read one again.
    let messagesRead: CoreMetrics.Counter
    let messagesAcked: CoreMetrics.Counter
    let messagesUnsent: CoreMetrics.Counter
    let messagesExpired: CoreMetrics.Counter
    let rateLimited: CoreMetrics.Counter
    /// Messages delivered over a subscription and not yet acknowledged.
    let messagesUnacked: CoreMetrics.Meter
    let webSocketsOpen: CoreMetrics.Meter
    /// Set when scraped, from the store.
    let messagesPending: CoreMetrics.Gauge
    let oldestPendingAge: CoreMetrics.Gauge
    /// Set when scraped: free bytes on the data folder's file system, and 1 while creates are
    /// refused for lack of space (`storage_full`).
    let diskFreeBytes: CoreMetrics.Gauge
    let storageFull: CoreMetrics.Gauge
    /// Several relays on one database: notifications this node sent (one per commit batch that
    /// created or unsent messages, and one per new subscription) and received from other nodes.
    let clusterNotificationsSent: CoreMetrics.Counter
    let clusterNotificationsReceived: CoreMetrics.Counter
    /// 1 while this node listens for the others' notifications; 0 while it reconnects.
    let clusterListening: CoreMetrics.Gauge
    /// Times this node re-read every live subscription (after it listened again).
    let clusterRechecks: CoreMetrics.Counter
    /// Blobs created, acknowledged by one recipient, erased (last ack or author delete) and
    /// expired; parts stored, parts refused for their digest; blob bytes in and out.
    let blobsCreated: CoreMetrics.Counter
    let blobsAcknowledged: CoreMetrics.Counter
    let blobsErased: CoreMetrics.Counter
    let blobsExpired: CoreMetrics.Counter
    let blobPartsReceived: CoreMetrics.Counter
    let blobPartsRefused: CoreMetrics.Counter
    let blobBytesReceived: CoreMetrics.Counter
    let blobBytesSent: CoreMetrics.Counter
    /// Sends to many (spec/protocol.md §4.25), HTTP and WebSocket alike: from the request's
    /// admission (its body read and parsed) to the commit of its admitted entries' transaction
    /// (``CommitTicket/resolvedAt``), before their deliveries are handed to the hub. Recorded only
    /// for a batch that stored something; `mailslot-bench group` reads it for the commit time.
    let batchSeconds: CoreMetrics.Timer
    /// The store's hot operations, made once: a lookup by name in the registry costs a lock.
    private let storeTimers: [String: CoreMetrics.Timer]

    init() {
        var factory = PrometheusMetricsFactory(registry: registry)
        // Store operations take microseconds to milliseconds; the default buckets start at 5 ms.
        factory.durationHistogramBuckets["mailslot_store_duration_seconds"] = [
            .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1), .microseconds(2500),
            .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(100), .milliseconds(500), .seconds(2),
        ]
        factory.durationHistogramBuckets["mailslot_http_request_duration_seconds"] = [
            .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10),
            .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250), .seconds(1), .seconds(5),
        ]
        // A 1,000-member group's batch should commit in ≤ 100 ms p50, ≤ 250 ms p99 (issue 30): fine
        // buckets around those figures, so that the histogram's own quantiles say which side it is on.
        factory.durationHistogramBuckets["mailslot_batch_seconds"] = [
            .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(20), .milliseconds(35),
            .milliseconds(50), .milliseconds(75), .milliseconds(100), .milliseconds(150), .milliseconds(200), .milliseconds(250),
            .milliseconds(350), .milliseconds(500), .seconds(1), .milliseconds(2500), .seconds(5),
        ]
        self.factory = factory
        batchSeconds = CoreMetrics.Timer(label: "mailslot_batch_seconds", factory: factory)
        messagesCreated = CoreMetrics.Counter(label: "mailslot_messages_created_total", factory: factory)
        messagesDelivered = CoreMetrics.Counter(label: "mailslot_messages_delivered_total", factory: factory)
        messagesRead = CoreMetrics.Counter(label: "mailslot_messages_read_total", factory: factory)
        messagesAcked = CoreMetrics.Counter(label: "mailslot_messages_acked_total", factory: factory)
        messagesUnsent = CoreMetrics.Counter(label: "mailslot_messages_unsent_total", factory: factory)
        messagesExpired = CoreMetrics.Counter(label: "mailslot_messages_expired_total", factory: factory)
        rateLimited = CoreMetrics.Counter(label: "mailslot_rate_limited_total", factory: factory)
        messagesUnacked = CoreMetrics.Meter(label: "mailslot_messages_unacked", factory: factory)
        webSocketsOpen = CoreMetrics.Meter(label: "mailslot_websockets_open", factory: factory)
        messagesPending = CoreMetrics.Gauge(label: "mailslot_messages_pending", factory: factory)
        oldestPendingAge = CoreMetrics.Gauge(label: "mailslot_messages_oldest_pending_age_seconds", factory: factory)
        diskFreeBytes = CoreMetrics.Gauge(label: "mailslot_disk_free_bytes", factory: factory)
        storageFull = CoreMetrics.Gauge(label: "mailslot_storage_full", factory: factory)
        clusterNotificationsSent = CoreMetrics.Counter(label: "mailslot_cluster_notifications_sent_total", factory: factory)
        clusterNotificationsReceived = CoreMetrics.Counter(label: "mailslot_cluster_notifications_received_total", factory: factory)
        clusterListening = CoreMetrics.Gauge(label: "mailslot_cluster_listening", factory: factory)
        clusterRechecks = CoreMetrics.Counter(label: "mailslot_cluster_rechecks_total", factory: factory)
        blobsCreated = CoreMetrics.Counter(label: "mailslot_blobs_created_total", factory: factory)
        blobsAcknowledged = CoreMetrics.Counter(label: "mailslot_blobs_acknowledged_total", factory: factory)
        blobsErased = CoreMetrics.Counter(label: "mailslot_blobs_erased_total", factory: factory)
        blobsExpired = CoreMetrics.Counter(label: "mailslot_blobs_expired_total", factory: factory)
        blobPartsReceived = CoreMetrics.Counter(label: "mailslot_blob_parts_received_total", factory: factory)
        blobPartsRefused = CoreMetrics.Counter(label: "mailslot_blob_parts_refused_total", factory: factory)
        blobBytesReceived = CoreMetrics.Counter(label: "mailslot_blob_bytes_received_total", factory: factory)
        blobBytesSent = CoreMetrics.Counter(label: "mailslot_blob_bytes_sent_total", factory: factory)
        var timers: [String: CoreMetrics.Timer] = [:]
        for operation in ["create_message", "message", "messages", "delete_message", "session", "pending_count"] {
            timers[operation] = CoreMetrics.Timer(label: "mailslot_store_duration_seconds", dimensions: [("operation", operation)],
                                                  factory: factory)
        }
        storeTimers = timers
        // Present from the start, so that a dashboard shows 0 rather than nothing.
        messagesUnacked.set(0)
        webSocketsOpen.set(0)
    }

    /// One HTTP request answered: `route` is the route template (never the path).
    func request(method: String, route: String, status: Int, duration: Duration) {
        CoreMetrics.Counter(label: "mailslot_http_requests_total",
                dimensions: [("method", method), ("route", route), ("status", String(status))], factory: factory).increment()
        CoreMetrics.Timer(label: "mailslot_http_request_duration_seconds", dimensions: [("method", method), ("route", route)],
                          factory: factory).recordNanoseconds(Self.nanoseconds(duration))
    }

    /// A send refused, by its problem code (mailbox_full, blocked, invalid_envelope, …).
    func rejected(reason: String) {
        CoreMetrics.Counter(label: "mailslot_messages_rejected_total", dimensions: [("reason", reason)], factory: factory).increment()
    }

    /// A prekey claim answered: `claimed`, `empty` (none left) or `limited` (429).
    func prekeyClaim(result: String) {
        CoreMetrics.Counter(label: "mailslot_prekey_claims_total", dimensions: [("result", result)], factory: factory).increment()
    }

    /// A sign-in: `ok`, or the token rejection reason.
    func signIn(outcome: String) {
        CoreMetrics.Counter(label: "mailslot_signins_total", dimensions: [("outcome", outcome)], factory: factory).increment()
    }

    /// A refresh: `ok`, or why it was refused.
    func refresh(outcome: String) {
        CoreMetrics.Counter(label: "mailslot_refreshes_total", dimensions: [("outcome", outcome)], factory: factory).increment()
    }

    /// How long one store operation took.
    func store(_ operation: String, _ duration: Duration) {
        (storeTimers[operation] ?? storeTimer(operation)).recordNanoseconds(Self.nanoseconds(duration))
    }

    /// A send to many admitted at `admitted` committed its entries at `committed`.
    func batchCommitted(admitted: ContinuousClock.Instant, committed: ContinuousClock.Instant) {
        batchSeconds.recordNanoseconds(Self.nanoseconds(committed - admitted))
    }

    private func storeTimer(_ operation: String) -> CoreMetrics.Timer {
        CoreMetrics.Timer(label: "mailslot_store_duration_seconds", dimensions: [("operation", operation)], factory: factory)
    }

    /// The Prometheus text exposition: the registry, then the process's own figures.
    func exposition() -> [UInt8] {
        var buffer: [UInt8] = []
        buffer.reserveCapacity(16 * 1024)
        registry.emit(into: &buffer)
        buffer.append(contentsOf: ProcessMetrics.current().exposition().utf8)
        return buffer
    }

    private static func nanoseconds(_ duration: Duration) -> Int64 {
        duration.components.seconds * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000
    }
}
