import MailslotWire
import Metrics
import Prometheus

// The wake-up metrics of spec/push.md §4.3 and docs/design/wakeups.md §5. Labels are only the
// provider and a reason from a fixed list: never a uid, token, host, endpoint or tag.

/// Counts what the wake-up dispatcher and the push service do.
struct PushMetrics: Sendable {
    private let factory: PrometheusMetricsFactory
    private let inFlightGauge: CoreMetrics.Gauge
    private let dueGauge: CoreMetrics.Gauge

    /// Metrics in the relay's registry (`GET /metrics`).
    init(registry: PrometheusCollectorRegistry) {
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.durationHistogramBuckets["mailslot_push_call_duration_seconds"] = [
            .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250),
            .milliseconds(500), .seconds(1), .seconds(2), .seconds(5), .seconds(10),
        ]
        self.factory = factory
        inFlightGauge = CoreMetrics.Gauge(label: "mailslot_push_in_flight", factory: factory)
        inFlightGauge.record(0)
        dueGauge = CoreMetrics.Gauge(label: "mailslot_push_due", factory: factory)
        dueGauge.record(0)
    }

    /// A call ended: sent, or failed for `reason`; and how long it took.
    func called(_ provider: PushProviderKind, outcome: PushOutcome, duration: Duration) {
        if let reason = outcome.reason {
            CoreMetrics.Counter(label: "mailslot_push_failed_total", dimensions: [("provider", provider.rawValue), ("reason", reason.rawValue)],
                                factory: factory).increment()
        } else {
            CoreMetrics.Counter(label: "mailslot_push_sent_total", dimensions: [("provider", provider.rawValue)], factory: factory).increment()
        }
        CoreMetrics.Timer(label: "mailslot_push_call_duration_seconds", dimensions: [("provider", provider.rawValue)], factory: factory)
            .recordNanoseconds(duration.milliseconds * 1_000_000)
    }

    /// A registration was created (not replaced) through `PUT /v1/users/{uid}/push/{id}`.
    func registrationCreated(_ provider: PushProviderKind) {
        CoreMetrics.Counter(label: "mailslot_push_registrations_created_total", dimensions: [("provider", provider.rawValue)],
                            factory: factory).increment()
    }

    /// A registration was removed: `dead` or `failing`.
    func removed(_ provider: PushProviderKind, reason: String) {
        CoreMetrics.Counter(label: "mailslot_push_registrations_removed_total",
                            dimensions: [("provider", provider.rawValue), ("reason", reason)], factory: factory).increment()
    }

    /// A wake-up was given up: after its last attempt, or because its stored registration cannot be read.
    func dropped(_ provider: PushProviderKind, reason: WakeDropReason = .retries) {
        CoreMetrics.Counter(label: "mailslot_push_dropped_total", dimensions: [("provider", provider.rawValue), ("reason", reason.rawValue)],
                            factory: factory).increment()
    }

    /// Whether a provider is paused for a configuration error.
    func paused(_ provider: PushProviderKind, _ isPaused: Bool) {
        CoreMetrics.Gauge(label: "mailslot_push_paused", dimensions: [("provider", provider.rawValue)], factory: factory)
            .record(isPaused ? 1 : 0)
    }

    /// A claim skipped `count` wake-ups for `reason`: `connected` (postponed: the owner was
    /// online) or `received` (dropped: the owner had the messages).
    func skipped(_ reason: WakeSkipReason, count: Int) {
        guard count > 0 else { return }
        CoreMetrics.Counter(label: "mailslot_push_skipped_total", dimensions: [("reason", reason.rawValue)], factory: factory)
            .increment(by: count)
    }

    /// Wake-ups due now, as the last claim left them.
    func due(_ count: Int) { dueGauge.record(count) }

    /// Calls in flight now.
    func inFlight(_ count: Int) { inFlightGauge.record(count) }
}

/// Why a claim did not hand a due wake-up out (the `reason` of `mailslot_push_skipped_total`).
enum WakeSkipReason: String, Sendable, CaseIterable {
    /// Postponed by an interval: the owner held a live subscription.
    case connected
    /// Dropped: the owner had received the messages.
    case received
}

/// Why a wake-up was given up (the `reason` of `mailslot_push_dropped_total`).
enum WakeDropReason: String, Sendable, CaseIterable {
    /// Its attempts ran out (spec/push.md §3.4): the provider would not take it.
    case retries
    /// Its stored registration cannot be read (written by something else): no provider was
    /// called, and an operator alerting on a provider's failures is not misled by it.
    case unreadable
}
