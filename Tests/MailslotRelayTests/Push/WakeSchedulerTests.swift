import Testing
@testable import MailslotRelay
import MailslotWire

/// Every row of the scheduler's table (docs/design/wakeups.md §3.2, spec/push.md §4.3): claims
/// sized by free slots, route caps and pauses excluded from claims, retries with backoff and
/// `Retry-After`, drops after the last attempt, the streak pause, misconfiguration, the bounds.
@Suite struct WakeSchedulerTests {
    static func wake(_ id: String, route: String = "fcm", provider: PushProviderKind = .fcm, attempt: Int = 0, uid: String = "bob") -> Wake {
        let target: PushTarget = switch provider {
        case .webpush: .webPush(endpoint: try! AddressPolicy(allowPrivateAddresses: true).endpoint("https://\(route)/x"),
                                p256dh: [4] + [UInt8](repeating: 1, count: 64), auth: [UInt8](repeating: 2, count: 16))
        case .apns: .apns(token: String(repeating: "ab", count: 32), sandbox: false, mode: .alert)
        case .fcm: .fcm(token: "t")
        case .webhook: .webhook(token: nil)
        }
        return Wake(claimed: ClaimedWakeup(uid: uid, registrationID: id, provider: provider, target: "{}", route: route, tag: "t",
                                           version: 1, firstSeq: 1, attempt: attempt, event: "msg_x"),
                    target: target, webhookID: "msg_x")
    }

    static func claims(_ actions: [WakeScheduler.Action]) -> [(Int, [String], [PushProviderKind])] {
        actions.compactMap { if case .claim(let limit, let routes, let providers) = $0 { (limit, routes, providers) } else { nil } }
    }

    static func sends(_ actions: [WakeScheduler.Action]) -> [String] {
        actions.compactMap { if case .send(let wake) = $0 { wake.registrationID } else { nil } }
    }

    static func requeues(_ actions: [WakeScheduler.Action]) -> [Int64] {
        actions.compactMap { if case .requeue(_, let due) = $0 { due } else { nil } }
    }

    /// A scheduler with `wakes` in flight, its claim answered.
    static func running(_ wakes: [Wake], configuration: WakeScheduler.Configuration = .init()) -> WakeScheduler {
        var scheduler = WakeScheduler(configuration: configuration)
        _ = scheduler.tick(now: 0)
        _ = scheduler.claimed(wakes, now: 0)
        return scheduler
    }

    @Test func tickClaimsTheFreeSlotsOnceUntilAnswered() {
        var scheduler = WakeScheduler()
        let first = Self.claims(scheduler.tick(now: 0))
        #expect(first.count == 1 && first[0].0 == 16 && first[0].1.isEmpty && first[0].2.isEmpty)
        #expect(Self.claims(scheduler.tick(now: 1)).isEmpty, "one claim at a time")
        let actions = scheduler.claimed([Self.wake("a"), Self.wake("b")], now: 2)
        #expect(Self.sends(actions) == ["a", "b"])
        #expect(Self.claims(actions).isEmpty, "a short answer: nothing more is due now")
        // A full answer claims again at once.
        var configuration = WakeScheduler.Configuration()
        configuration.concurrency = 4
        var full = WakeScheduler(configuration: configuration)
        _ = full.tick(now: 0)
        _ = full.claimed([Self.wake("a"), Self.wake("b")], now: 0)
        #expect(Self.claims(full.tick(now: 1)).first?.0 == 2)
        #expect(Self.claims(full.claimed([Self.wake("c"), Self.wake("d")], now: 1)).isEmpty, "no free slot left")
    }

    @Test func aFailedClaimAllowsTheNext() {
        var scheduler = WakeScheduler()
        _ = scheduler.tick(now: 0)
        _ = scheduler.claimFailed(now: 1)
        #expect(Self.claims(scheduler.tick(now: 2)).first?.0 == 16)
    }

    @Test func fullSchedulerDoesNotClaim() {
        var configuration = WakeScheduler.Configuration()
        configuration.concurrency = 2
        var scheduler = Self.running([Self.wake("a"), Self.wake("b")], configuration: configuration)
        #expect(scheduler.freeSlots == 0)
        #expect(Self.claims(scheduler.tick(now: 5)).isEmpty)
    }

    @Test func sentRecordsOkResetsTheStreakAndFreesTheSlot() {
        var scheduler = Self.running([Self.wake("a"), Self.wake("b")])
        _ = scheduler.finished(Self.wake("a"), .retry(after: nil, reason: .status5xx), now: 10, jitter: 0)
        #expect(scheduler.routeStreak["fcm"] == 1)
        _ = scheduler.tick(now: 10)
        let actions = scheduler.finished(Self.wake("b"), .sent, now: 11, jitter: 0)
        #expect(actions.contains(.record(Self.wake("b"), .ok)))
        #expect(scheduler.routeStreak["fcm"] == nil)
        #expect(scheduler.inFlight.isEmpty && scheduler.perRoute.isEmpty)
    }

    @Test func retryBacksOffPerAttemptWithJitter() {
        for (attempt, backoff) in [(0, Int64(5_000)), (1, 30_000), (2, 120_000), (3, 600_000)] {
            var scheduler = Self.running([Self.wake("a", attempt: attempt)])
            let actions = scheduler.finished(Self.wake("a", attempt: attempt), .retry(after: nil, reason: .timeout), now: 1_000, jitter: 0)
            #expect(Self.requeues(actions) == [1_000 + backoff])
            var jittered = Self.running([Self.wake("a", attempt: attempt)])
            let plus = jittered.finished(Self.wake("a", attempt: attempt), .retry(after: nil, reason: .timeout), now: 1_000, jitter: 1)
            #expect(Self.requeues(plus) == [1_000 + backoff + backoff / 5])
            var minus = Self.running([Self.wake("a", attempt: attempt)])
            let less = minus.finished(Self.wake("a", attempt: attempt), .retry(after: nil, reason: .timeout), now: 1_000, jitter: -1)
            #expect(Self.requeues(less) == [1_000 + backoff - backoff / 5])
        }
    }

    @Test func retryAfterIsHonouredAndCappedAtAnHour() {
        var scheduler = Self.running([Self.wake("a"), Self.wake("b")])
        let actions = scheduler.finished(Self.wake("a"), .retry(after: .seconds(120), reason: .rateLimited), now: 1_000, jitter: 0)
        #expect(Self.requeues(actions) == [121_000])
        let long = scheduler.finished(Self.wake("b"), .retry(after: .seconds(86_400), reason: .rateLimited), now: 1_000, jitter: 0)
        #expect(Self.requeues(long) == [3_601_000])
    }

    @Test func rateLimitPausesTheRouteWhenItSaysSo() {
        var scheduler = Self.running([Self.wake("a", route: "push.example", provider: .webpush)])
        let actions = scheduler.finished(Self.wake("a", route: "push.example", provider: .webpush),
                                         .retry(after: .seconds(120), reason: .rateLimited, pausesRoute: true), now: 1_000, jitter: 0)
        #expect(Self.claims(actions).first?.1 == ["push.example"])
        #expect(actions.contains(.wakeAt(121_000)))
        #expect(scheduler.isPaused(.route("push.example"), now: 120_999))
        // No Retry-After: the default pause.
        var other = Self.running([Self.wake("a")])
        _ = other.finished(Self.wake("a"), .retry(after: nil, reason: .rateLimited, pausesRoute: true), now: 0, jitter: 0)
        #expect(other.paused[.route("fcm")] == 60_000)
        // Its end lifts the exclusion.
        _ = scheduler.tick(now: 121_000)
        _ = scheduler.claimed([], now: 121_000)
        #expect(!scheduler.isPaused(.route("push.example"), now: 121_000))
    }

    @Test func lastAttemptIsDropped() {
        var scheduler = Self.running([Self.wake("a", attempt: 4)])
        let actions = scheduler.finished(Self.wake("a", attempt: 4), .retry(after: nil, reason: .status5xx), now: 0, jitter: 0)
        #expect(actions.contains(.drop(Self.wake("a", attempt: 4))))
        #expect(Self.requeues(actions).isEmpty)
    }

    @Test func threeRetryableFailuresInARowPauseTheRoute() {
        let wakes = (0..<3).map { Self.wake("w\($0)", route: "slow.example", provider: .webpush) }
        var scheduler = Self.running(wakes)
        _ = scheduler.finished(wakes[0], .retry(after: nil, reason: .timeout), now: 100, jitter: 0)
        _ = scheduler.finished(wakes[1], .retry(after: nil, reason: .connect), now: 100, jitter: 0)
        #expect(!scheduler.isPaused(.route("slow.example"), now: 100))
        _ = scheduler.claimed([], now: 100)  // the claim the first end asked for
        let actions = scheduler.finished(wakes[2], .retry(after: nil, reason: .status5xx), now: 100, jitter: 0)
        #expect(scheduler.isPaused(.route("slow.example"), now: 30_099))
        #expect(!scheduler.isPaused(.route("slow.example"), now: 30_100))
        #expect(actions.contains(.wakeAt(30_100)))
        #expect(Self.claims(actions).first?.1 == ["slow.example"])
        #expect(scheduler.routeStreak["slow.example"] == nil)
    }

    @Test func blamedAndRefusedBlameDeadRemoves() {
        var scheduler = Self.running([Self.wake("a"), Self.wake("b"), Self.wake("c")])
        #expect(scheduler.finished(Self.wake("a"), .blamed(.status4xx), now: 0, jitter: 0).contains(.record(Self.wake("a"), .blamed)))
        #expect(scheduler.finished(Self.wake("b"), .refused(.address), now: 0, jitter: 0).contains(.record(Self.wake("b"), .blamed)))
        let dead = scheduler.finished(Self.wake("c"), .dead(.status4xx), now: 0, jitter: 0)
        #expect(dead.contains(.record(Self.wake("c"), .dead)))
        #expect(Self.requeues(dead).isEmpty)
    }

    @Test func misconfiguredPausesTheProviderLogsOnceAMinuteAndRequeues() {
        let wakes = (0..<3).map { Self.wake("a\($0)", route: "apns", provider: .apns) }
        var scheduler = Self.running(wakes)
        let first = scheduler.finished(wakes[0], .misconfigured(.config, pause: .seconds(60)), now: 1_000, jitter: 0)
        #expect(first.contains(.logMisconfigured(.apns, .config)))
        #expect(Self.requeues(first) == [61_000])
        #expect(Self.claims(first).first?.2 == [.apns])
        #expect(!first.contains { if case .record = $0 { true } else { false } }, "no registration is blamed")
        let second = scheduler.finished(wakes[1], .misconfigured(.config, pause: .seconds(60)), now: 30_000, jitter: 0)
        #expect(!second.contains(.logMisconfigured(.apns, .config)))
        let third = scheduler.finished(wakes[2], .misconfigured(.config, pause: .seconds(60)), now: 61_000, jitter: 0)
        #expect(third.contains(.logMisconfigured(.apns, .config)))
        // The last attempt is dropped rather than requeued.
        var last = Self.running([Self.wake("z", route: "apns", provider: .apns, attempt: 4)])
        #expect(last.finished(Self.wake("z", route: "apns", provider: .apns, attempt: 4), .misconfigured(.config, pause: .seconds(60)),
                              now: 0, jitter: 0).contains(.drop(Self.wake("z", route: "apns", provider: .apns, attempt: 4))))
    }

    @Test func routeCapsHoldWakeUpsAndExcludeTheRoute() {
        let wakes = (0..<6).map { Self.wake("h\($0)", route: "push.example", provider: .webpush) }
        var scheduler = WakeScheduler()
        _ = scheduler.tick(now: 0)
        let actions = scheduler.claimed(wakes, now: 0)
        #expect(Self.sends(actions) == ["h0", "h1", "h2", "h3"], "at most 4 per Web Push host")
        #expect(scheduler.waiting.count == 2)
        #expect(scheduler.freeSlots == 10, "waiting wake-ups hold their slots")
        #expect(Self.claims(scheduler.tick(now: 0)).first?.1 == ["push.example"])
        _ = scheduler.claimed([], now: 0)
        // A slot of the host frees: the next waiting one goes.
        #expect(Self.sends(scheduler.finished(wakes[0], .sent, now: 1, jitter: 0)) == ["h4"])
        // The operator's routes allow 8.
        var other = WakeScheduler()
        _ = other.tick(now: 0)
        #expect(Self.sends(other.claimed((0..<10).map { Self.wake("f\($0)") }, now: 0)).count == 8)
    }

    @Test func pausesAndStreaksAreBounded() {
        var configuration = WakeScheduler.Configuration()
        configuration.concurrency = 300
        let wakes = (0..<300).map { Self.wake("p\($0)", route: "host\($0).example", provider: .webpush) }
        var scheduler = Self.running(wakes, configuration: configuration)
        for (index, wake) in wakes.enumerated() {
            _ = scheduler.finished(wake, .retry(after: .seconds(Int64(100 + index)), reason: .rateLimited, pausesRoute: true), now: 0, jitter: 0)
        }
        #expect(scheduler.paused.count == 256)
        // The ones ending soonest were dropped first.
        #expect(scheduler.paused[.route("host0.example")] == nil)
        #expect(scheduler.paused[.route("host299.example")] == 399_000)
        #expect(scheduler.routeStreak.count <= 256)
    }

    @Test func unknownFinishIsIgnored() {
        var scheduler = WakeScheduler()
        #expect(scheduler.finished(Self.wake("never"), .sent, now: 0, jitter: 0).isEmpty)
    }
}
