import Foundation
import Logging
import MailslotCrypto
import MailslotWire
import ServiceLifecycle
import Synchronization

// Runs the wake-up scheduler (``WakeScheduler``) against the store's pending wake-ups, the
// providers and the relay clock (docs/design/wakeups.md §3.2). It is woken by a commit that
// stored a message for a mailbox with registrations (through the store's one commit observer
// route), by a 1 s tick on PostgreSQL (rows other relays wrote), by the next `due_at` on SQLite,
// and by each call's end. Nothing of it runs on the message path: calls never hold a store
// connection, and in memory there are only the calls in flight.

/// The relay's wake-up sender, run with the relay.
final class WakeDispatcher: Service, CommitObserver, Sendable {
    /// What the loop hears.
    private enum Event: Sendable {
        case tick
        case claimed([Wake])
        case claimFailed
        case finished(Wake, PushOutcome)
    }

    private let store: any PushRecords
    private let providers: [PushProviderKind: any PushProvider]
    private let clock: RelayClock
    private let interval: Int64
    private let pollInterval: Duration?
    private let isLiveHere: @Sendable (String) -> Bool
    private let metrics: PushMetrics
    private let logger: Logger
    private let configuration: WakeScheduler.Configuration
    private let events: AsyncStream<Event>
    private let input: AsyncStream<Event>.Continuation
    /// A tick is already waiting in the stream: nudges coalesce into it.
    private let tickQueued = Mutex(false)
    /// Wake-ups the claims skipped since start, by reason (what `mailslot_push_skipped_total`
    /// counts): in-process tests wait for it to move to know the relay decided, before they
    /// check that nothing was sent.
    private let skippedCounts = Mutex<[WakeSkipReason: Int]>([:])
    /// Claims answered since start.
    private let claimCount = Mutex(0)
    /// Nudges heard since start (commits and ticks that asked for a look).
    private let nudgeCount = Mutex(0)

    /// Claims are at most this frequent (10 a second).
    static let minimumClaimSpacing: Duration = .milliseconds(100)
    /// How long a PostgreSQL node counts as alive after its last heartbeat (ms).
    static let presence: Int64 = 30_000

    /// - Parameters:
    ///   - interval: The wake-up interval (ms).
    ///   - pollInterval: A tick this often (PostgreSQL: rows other relays wrote); nil on SQLite,
    ///     which asks the store for the next due time instead.
    ///   - isLiveHere: Whether a mailbox has a live subscription on this relay.
    init(store: any PushRecords, providers: [PushProviderKind: any PushProvider], clock: RelayClock, interval: Int64,
         concurrency: Int, pollInterval: Duration?, isLiveHere: @escaping @Sendable (String) -> Bool,
         metrics: PushMetrics, logger: Logger) {
        self.store = store
        self.providers = providers
        self.clock = clock
        self.interval = interval
        self.pollInterval = pollInterval
        self.isLiveHere = isLiveHere
        self.metrics = metrics
        self.logger = logger
        var configuration = WakeScheduler.Configuration()
        configuration.concurrency = concurrency
        self.configuration = configuration
        (events, input) = AsyncStream.makeStream(of: Event.self)
    }

    /// Wake-ups the claims skipped since start for `reason`.
    func skipped(_ reason: WakeSkipReason) -> Int { skippedCounts.withLock { $0[reason] ?? 0 } }

    /// Claims the store answered since start.
    var claims: Int { claimCount.withLock { $0 } }

    /// Nudges heard since start (tests: a commit that must not nudge leaves it unchanged).
    var nudges: Int { nudgeCount.withLock { $0 } }

    /// A commit stored a message and queued its wake-ups (as the store says): they may be due now.
    func committed(_ change: CommittedChange) {
        guard case .created(_, wakeups: true) = change else { return }
        nudge()
    }

    /// Asks the loop to look at the store again (coalesced).
    func nudge() {
        nudgeCount.withLock { $0 += 1 }
        let queue = tickQueued.withLock { queued in
            defer { queued = true }
            return !queued
        }
        if queue { input.yield(.tick) }
    }

    func run() async throws {
        let disabled = PushProviderKind.allCases.filter { providers[$0] == nil }
        var scheduler = WakeScheduler(configuration: configuration)
        var timer: Task<Void, Never>?
        var lastClaim = ContinuousClock.now - Self.minimumClaimSpacing
        await withDiscardingTaskGroup { group in
            group.addTask { [input] in
                try? await gracefulShutdown()
                input.finish()
            }
            nudge()
            for await event in events {
                let now = clock.now()
                let actions: [WakeScheduler.Action]
                switch event {
                case .tick:
                    tickQueued.withLock { $0 = false }
                    actions = scheduler.tick(now: now)
                case .claimed(let wakes): actions = scheduler.claimed(wakes, now: now)
                case .claimFailed: actions = scheduler.claimFailed(now: now)
                case .finished(let wake, let outcome): actions = scheduler.finished(wake, outcome, now: now, jitter: Double.random(in: -1...1))
                }
                var nextWake: Int64?
                for action in actions {
                    switch action {
                    case .claim(let limit, let routes, let paused):
                        let start = max(ContinuousClock.now, lastClaim + Self.minimumClaimSpacing)
                        lastClaim = start
                        let excluded = Array(Set(paused + disabled))
                        group.addTask { await self.claim(limit: limit, routes: routes, providers: excluded, notBefore: start) }
                    case .wakeAt(let time): nextWake = min(nextWake ?? time, time)
                    case .send(let wake):
                        group.addTask { await self.call(wake) }
                    case .record(let wake, let verdict):
                        group.addTask { await self.record(wake, verdict) }
                    case .requeue(let wake, let dueAt):
                        group.addTask { await self.requeue(wake, dueAt: dueAt) }
                    case .drop(let wake):
                        metrics.dropped(wake.provider)
                    case .logMisconfigured(let provider, let reason):
                        // The type and provider only: never a token, endpoint or key.
                        logger.error("push provider refused the relay's configuration; wake-ups wait", metadata: [
                            "provider": "\(provider.rawValue)", "reason": "\(reason.rawValue)"])
                    }
                }
                metrics.inFlight(scheduler.inFlight.count)
                for provider in providers.keys { metrics.paused(provider, scheduler.isPaused(.provider(provider), now: now)) }
                // The next look: a pause's end, the next tick (PostgreSQL) or the next due row (SQLite).
                switch event {
                case .claimed: nextWake = await self.nextDue(now: now, pauseEnd: nextWake)
                case .claimFailed: nextWake = min(nextWake ?? .max, now + 1_000)  // the store may be back in a second
                case .tick, .finished: if nextWake == nil { continue }
                }
                if let nextWake {
                    timer?.cancel()
                    let delay = Duration.milliseconds(max(0, min(nextWake - now, 3_600_000)))
                    timer = Task { [weak self] in
                        try? await Task.sleep(for: delay)
                        if !Task.isCancelled { self?.nudge() }
                    }
                }
            }
            timer?.cancel()
            group.cancelAll()
        }
    }

    /// When to look again after a claim: the earliest of a pause's end, the poll tick
    /// (PostgreSQL) and the store's next due row (SQLite).
    private func nextDue(now: Int64, pauseEnd: Int64?) async -> Int64? {
        var next = pauseEnd
        if let pollInterval {
            next = min(next ?? .max, now + pollInterval.milliseconds)
        } else if let due = try? await store.nextWakeupDue() {
            next = min(next ?? .max, max(due, now + Self.minimumClaimSpacing.milliseconds))
        }
        return next
    }

    private func claim(limit: Int, routes: [String], providers excluded: [PushProviderKind], notBefore: ContinuousClock.Instant) async {
        try? await Task.sleep(until: notBefore)
        do {
            let claim = try await store.claimWakeups(now: clock.now(), limit: limit, excludedRoutes: routes, excludedProviders: excluded,
                                                     interval: interval, presence: Self.presence, isLiveHere: isLiveHere)
            metrics.skipped(.connected, count: claim.postponed)
            metrics.skipped(.received, count: claim.received)
            metrics.due(claim.due)
            skippedCounts.withLock { counts in
                counts[.connected, default: 0] += claim.postponed
                counts[.received, default: 0] += claim.received
            }
            claimCount.withLock { $0 += 1 }
            var wakes: [Wake] = []
            for row in claim.wakeups {
                guard let target = try? PushTarget(provider: row.provider, storedJSON: row.target) else {
                    // A row this relay cannot read (written by something else): not a device's fault, not sendable.
                    logger.error("a stored push registration cannot be read; its wake-up is dropped", metadata: ["provider": "\(row.provider.rawValue)"])
                    metrics.dropped(row.provider, reason: .unreadable)
                    continue
                }
                wakes.append(Wake(claimed: row, target: target, webhookID: row.event ?? Self.newWebhookID()))
            }
            input.yield(.claimed(wakes))
        } catch {
            logger.warning("claiming wake-ups failed", metadata: ["error": "\(type(of: error))"])
            input.yield(.claimFailed)
        }
    }

    private func call(_ wake: Wake) async {
        let outcome: PushOutcome
        let start = ContinuousClock.now
        if let provider = providers[wake.provider] {
            outcome = await provider.send(wake)
        } else {
            outcome = .misconfigured(.config, pause: .seconds(3600))
        }
        metrics.called(wake.provider, outcome: outcome, duration: ContinuousClock.now - start)
        input.yield(.finished(wake, outcome))
    }

    private func record(_ wake: Wake, _ verdict: RegistrationVerdict) async {
        do {
            if try await store.recordWakeOutcome(uid: wake.uid, id: wake.registrationID, version: wake.version, verdict) {
                metrics.removed(wake.provider, reason: verdict == .dead ? "dead" : "failing")
            }
        } catch {
            logger.warning("recording a wake-up's outcome failed", metadata: ["error": "\(type(of: error))"])
        }
    }

    private func requeue(_ wake: Wake, dueAt: Int64) async {
        do {
            try await store.requeueWakeup(wake.claimed, event: wake.webhookID, dueAt: dueAt)
        } catch {
            logger.warning("requeueing a wake-up failed; it is lost", metadata: ["error": "\(type(of: error))"])
        }
        nudge()
    }

    /// `msg_` and 22 characters of 16 random bytes: the webhook id every attempt of a wake-up shares.
    static func newWebhookID() -> String {
        "msg_" + Base64URL.encode(randomBytes(16))
    }
}
