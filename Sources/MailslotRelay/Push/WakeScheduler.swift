import MailslotWire

// The wake-up dispatcher's decisions as a pure state machine (docs/design/wakeups.md §3.2): events
// in — a tick, a claim's result, a call's outcome — and actions out — claim, send, record,
// requeue, drop, log. No I/O and no clock: `now` (ms, the relay clock) and the jitter are inputs,
// so every row of the table is tested directly (WakeSchedulerTests). In memory it holds only the
// wake-ups it claimed (never more than `concurrency`), the pauses and the failure streaks (each
// at most `maxEntries`): the queue itself is the store's table.

/// Decides what the wake-up dispatcher does next.
struct WakeScheduler: Sendable {
    /// The bounds and timings (spec/push.md §4.3).
    struct Configuration: Sendable, Equatable {
        /// Calls in flight on this relay, claimed wake-ups waiting for their route included.
        var concurrency = 16
        /// Calls in flight to one Web Push host.
        var webPushRouteCap = 4
        /// Calls in flight to one of the operator's routes (`apns`, `apns-sandbox`, `fcm`, `webhook`).
        var otherRouteCap = 8
        /// Backoff before attempt 2, 3, 4, 5 (ms).
        var backoff: [Int64] = [5_000, 30_000, 120_000, 600_000]
        /// ± this fraction of the backoff, so that retries of many wake-ups spread out.
        var jitter = 0.2
        /// Attempts before a wake-up is dropped.
        var maxAttempts = 5
        /// A `Retry-After` longer than this is cut to it (ms).
        var maxRetryAfter: Int64 = 3_600_000
        /// A route's pause after a rate limit without `Retry-After` (ms).
        var rateLimitPause: Int64 = 60_000
        /// Consecutive retryable failures of a route that pause it ...
        var streakLimit = 3
        /// ... for this long (ms).
        var streakPause: Int64 = 30_000
        /// A misconfigured provider's error is logged at most once per this (ms).
        var logInterval: Int64 = 60_000
        /// The most pauses and streaks kept (each).
        var maxEntries = 256
    }

    /// What the dispatcher is to do.
    enum Action: Sendable, Equatable {
        /// Claim up to `limit` due wake-ups, skipping these routes and providers.
        case claim(limit: Int, excludedRoutes: [String], excludedProviders: [PushProviderKind])
        /// Run the scheduler again at this time (ms): the earliest pause ends then.
        case wakeAt(Int64)
        /// Call the wake-up's provider, then report ``WakeScheduler/finished(_:_:now:jitter:)``.
        case send(Wake)
        /// Apply a provider's verdict to the registration (the store removes it when dead or failing).
        case record(Wake, RegistrationVerdict)
        /// Put the wake-up back in the store, due then (ms), one attempt more.
        case requeue(Wake, dueAt: Int64)
        /// Give the wake-up up after its last attempt.
        case drop(Wake)
        /// Log that a provider is misconfigured (at most once a minute per provider).
        case logMisconfigured(PushProviderKind, PushFailureReason)
    }

    /// What a pause applies to.
    enum PauseKey: Sendable, Hashable {
        case route(String)
        case provider(PushProviderKind)
    }

    let configuration: Configuration
    /// Calls in flight, by registration (uid, id).
    private(set) var inFlight: [String: Wake] = [:]
    /// Claimed wake-ups waiting for a slot of their route.
    private(set) var waiting: [Wake] = []
    /// Calls in flight per route.
    private(set) var perRoute: [String: Int] = [:]
    /// Pauses and when they end (ms).
    private(set) var paused: [PauseKey: Int64] = [:]
    /// Consecutive retryable failures per route.
    private(set) var routeStreak: [String: Int] = [:]
    /// When each provider's misconfiguration was last logged.
    private var lastLogged: [PushProviderKind: Int64] = [:]
    /// A claim was asked for and its answer has not come: no second one meanwhile.
    private(set) var claimPending = false
    /// The limit of the last claim asked for.
    private var lastClaimLimit = 0

    init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
    }

    /// Slots neither in flight nor held by a waiting wake-up.
    var freeSlots: Int { configuration.concurrency - inFlight.count - waiting.count }

    /// A tick, a nudge (a commit inserted wake-ups), or a pause's end.
    mutating func tick(now: Int64) -> [Action] {
        schedule(now: now)
    }

    /// The claim's answer: each wake-up is sent when its route has a slot, else waits for one.
    /// Only a full answer is followed by another claim at once; after a short one, nothing more is
    /// due now, and the next tick or nudge looks again.
    mutating func claimed(_ wakes: [Wake], now: Int64) -> [Action] {
        claimPending = false
        waiting += wakes
        return schedule(now: now, mayClaim: wakes.count >= lastClaimLimit)
    }

    /// The claim failed (the store); nothing was taken. The next tick tries again.
    mutating func claimFailed(now: Int64) -> [Action] {
        claimPending = false
        return schedule(now: now, mayClaim: false)
    }

    /// A call ended with `outcome`. `jitter` in −1 … 1 spreads the retry (tests pass 0).
    mutating func finished(_ wake: Wake, _ outcome: PushOutcome, now: Int64, jitter: Double) -> [Action] {
        let key = Self.key(wake)
        guard inFlight.removeValue(forKey: key) != nil else { return [] }
        perRoute[wake.route, default: 1] -= 1
        if perRoute[wake.route] ?? 0 <= 0 { perRoute[wake.route] = nil }
        var actions: [Action] = []
        switch outcome {
        case .sent:
            routeStreak[wake.route] = nil
            actions.append(.record(wake, .ok))
        case .retry(let after, _, let pausesRoute):
            let afterMs = after.map { min(max($0.milliseconds, 0), configuration.maxRetryAfter) }
            if pausesRoute {
                pause(.route(wake.route), until: now + (afterMs ?? configuration.rateLimitPause))
            }
            let streak = (routeStreak[wake.route] ?? 0) + 1
            if streak >= configuration.streakLimit {
                routeStreak[wake.route] = nil
                pause(.route(wake.route), until: max(paused[.route(wake.route)] ?? 0, now + configuration.streakPause))
            } else {
                setStreak(wake.route, streak)
            }
            actions.append(retryOrDrop(wake, now: now, after: afterMs, jitter: jitter))
        case .blamed, .refused:
            actions.append(.record(wake, .blamed))
        case .dead:
            actions.append(.record(wake, .dead))
        case .misconfigured(let reason, let pauseFor):
            pause(.provider(wake.provider), until: now + max(pauseFor.milliseconds, 0))
            if let last = lastLogged[wake.provider], now - last < configuration.logInterval {} else {
                lastLogged[wake.provider] = now
                actions.append(.logMisconfigured(wake.provider, reason))
            }
            // The wake-up waits for the operator rather than being blamed on a device.
            if wake.attempt + 1 >= configuration.maxAttempts {
                actions.append(.drop(wake))
            } else {
                actions.append(.requeue(wake, dueAt: now + max(pauseFor.milliseconds, 0)))
            }
        }
        return actions + schedule(now: now)
    }

    /// Whether `key` is paused at `now`.
    func isPaused(_ key: PauseKey, now: Int64) -> Bool { (paused[key] ?? .min) > now }

    // MARK: - Internals

    private static func key(_ wake: Wake) -> String { wake.uid + "\u{0}" + wake.registrationID }

    private func cap(_ wake: Wake) -> Int {
        wake.provider == .webpush ? configuration.webPushRouteCap : configuration.otherRouteCap
    }

    /// The retry of a failed attempt, or its drop after the last.
    private func retryOrDrop(_ wake: Wake, now: Int64, after: Int64?, jitter: Double) -> Action {
        guard wake.attempt + 1 < configuration.maxAttempts else { return .drop(wake) }
        let base = configuration.backoff[min(wake.attempt, configuration.backoff.count - 1)]
        let spread = Double(base) * configuration.jitter * min(max(jitter, -1), 1)
        let backoff = base + Int64(spread.rounded())
        return .requeue(wake, dueAt: now + max(backoff, after ?? 0))
    }

    /// Starts what may start, asks for a claim when slots are free, and says when to look again.
    private mutating func schedule(now: Int64, mayClaim: Bool = true) -> [Action] {
        paused = paused.filter { $0.value > now }
        var actions: [Action] = []
        // Waiting wake-ups whose route has a slot (and is not paused meanwhile: they were claimed, so they go).
        var still: [Wake] = []
        for wake in waiting {
            if (perRoute[wake.route] ?? 0) < cap(wake) {
                perRoute[wake.route, default: 0] += 1
                inFlight[Self.key(wake)] = wake
                actions.append(.send(wake))
            } else {
                still.append(wake)
            }
        }
        waiting = still
        if mayClaim, freeSlots > 0, !claimPending {
            var routes = Set(paused.keys.compactMap { if case .route(let route) = $0 { route } else { nil } })
            for (route, count) in perRoute where count >= (route.isProviderRoute ? configuration.otherRouteCap : configuration.webPushRouteCap) {
                routes.insert(route)
            }
            let providers = Set(paused.keys.compactMap { if case .provider(let provider) = $0 { provider } else { nil } })
            claimPending = true
            lastClaimLimit = freeSlots
            actions.append(.claim(limit: freeSlots, excludedRoutes: routes.sorted(),
                                  excludedProviders: providers.sorted { $0.storeCode < $1.storeCode }))
        }
        if let next = paused.values.min() { actions.append(.wakeAt(next)) }
        return actions
    }

    /// Pauses `key` until `end`, dropping the pause that ends soonest when the table is full.
    private mutating func pause(_ key: PauseKey, until end: Int64) {
        if paused[key] == nil, paused.count >= configuration.maxEntries,
           let soonest = paused.min(by: { $0.value < $1.value })?.key {
            paused[soonest] = nil
        }
        paused[key] = max(paused[key] ?? .min, end)
    }

    private mutating func setStreak(_ route: String, _ value: Int) {
        if routeStreak[route] == nil, routeStreak.count >= configuration.maxEntries,
           let lowest = routeStreak.min(by: { $0.value < $1.value })?.key {
            routeStreak[lowest] = nil
        }
        routeStreak[route] = value
    }
}

extension String {
    /// Whether this route is one of the operator's providers' (not a Web Push host).
    var isProviderRoute: Bool { ["apns", "apns-sandbox", "fcm", "webhook"].contains(self) }
}
