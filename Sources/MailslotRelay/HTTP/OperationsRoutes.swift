import Hummingbird
import MailslotWire

/// The operator's routes: liveness, readiness and Prometheus metrics. None needs a user session;
/// /metrics needs the metrics token when one is configured, and is refused otherwise unless the
/// relay listens on a loopback address only.
struct OperationsRoutes: Sendable {
    let store: any RelayStore
    let metrics: RelayMetrics
    let configuration: RelayConfiguration

    func add(to router: Router<RelayContext>) {
        router.get("/healthz") { _, _ in JSONBody.response(["status": "ok"]) }

        // Not ready while the store cannot take writes, or the disk is too short of space for
        // new messages (they would be answered 507 storage_full).
        router.get("/readyz") { _, _ in
            guard await store.isReady() else {
                return JSONBody.response(["status": "unavailable", "reason": "store"], status: .serviceUnavailable)
            }
            if store.diskSpace?.isShort == true {
                return JSONBody.response(["status": "unavailable", "reason": "storage_full"], status: .serviceUnavailable)
            }
            return JSONBody.response(["status": "ready"])
        }

        router.get("/metrics") { request, _ in
            try authorizeScrape(request.headers[.authorization])
            // The store-wide gauges are read when scraped, not kept up to date on every write.
            let now = configuration.clock.now()
            if let summary = try? await store.pendingSummary(now: now) {
                metrics.messagesPending.record(summary.count)
                metrics.oldestPendingAge.record(summary.oldestCreatedAt.map { Double(max(0, now - $0)) / 1000 } ?? 0)
            }
            if let disk = store.diskSpace {
                metrics.storageFull.record(disk.isShort ? 1 : 0)
                if let free = disk.freeBytes { metrics.diskFreeBytes.record(free) }
            }
            return Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                            body: .init(byteBuffer: ByteBuffer(bytes: metrics.exposition())))
        }
    }

    private func authorizeScrape(_ authorization: String?) throws {
        guard let token = configuration.metricsToken else {
            guard configuration.listensOnLoopbackOnly else {
                throw Problem(.forbidden, "configure a metrics token (MAILSLOT_METRICS_TOKEN) to scrape a relay on a non-loopback address")
            }
            return
        }
        guard let authorization, authorization.hasPrefix("Bearer "),
              constantTimeEquals(Array(authorization.utf8.dropFirst(7)), Array(token.utf8)) else {
            throw Problem(.unauthenticated, "send Authorization: Bearer <metrics token>")
        }
    }
}
