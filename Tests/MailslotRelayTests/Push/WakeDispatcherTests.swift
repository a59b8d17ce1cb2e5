import Foundation
import Logging
import MailslotWire
import Prometheus
import ServiceLifecycle
import Synchronization
import Testing
@testable import MailslotRelay
import MailslotTestSupport

/// The dispatcher against an in-memory store and a scripted provider: a commit's nudge claims
/// and sends, outcomes reach the store as verdicts and requeues, the webhook id is drawn once
/// and kept, disabled providers are never claimed, nothing is sent for other mailboxes' commits.
@Suite struct WakeDispatcherTests {
    /// Pending rows and what the dispatcher did to them.
    final class FakeRecords: PushRecords, @unchecked Sendable {
        let state = Mutex<(rows: [ClaimedWakeup], claims: [[PushProviderKind]], verdicts: [RegistrationVerdict],
                           requeued: [(ClaimedWakeup, String, Int64)])>(([], [], [], []))

        func putRegistration(_ registration: NewPushRegistration, family: Data, max: Int, now: Int64) async throws -> PushPutOutcome { .tooMany }
        func registrations(uid: String) async throws -> [PushRegistrationRow] { [] }
        func registration(uid: String, id: String) async throws -> PushRegistrationRow? { nil }
        func deleteRegistration(uid: String, id: String) async throws -> Bool { false }
        func claimWakeups(now: Int64, limit: Int, excludedRoutes: [String], excludedProviders: [PushProviderKind], interval: Int64,
                          presence: Int64, isLiveHere: @escaping @Sendable (String) -> Bool) async throws -> WakeupClaim {
            state.withLock { state in
                state.claims.append(excludedProviders)
                let due = state.rows.filter { !excludedProviders.contains($0.provider) }.prefix(limit)
                state.rows.removeAll { row in due.contains(row) }
                // A live owner's row is postponed (put back), as the stores do.
                let live = due.filter { isLiveHere($0.uid) }
                state.rows += live
                return WakeupClaim(wakeups: due.filter { !isLiveHere($0.uid) }, postponed: live.count, received: 0, due: state.rows.count)
            }
        }
        func requeueWakeup(_ wakeup: ClaimedWakeup, event: String, dueAt: Int64) async throws {
            state.withLock { $0.requeued.append((wakeup, event, dueAt)) }
        }
        func recordWakeOutcome(uid: String, id: String, version: Int64, _ verdict: RegistrationVerdict) async throws -> Bool {
            state.withLock { $0.verdicts.append(verdict) }
            return verdict == .dead
        }
        func sweepPushRegistrations(now: Int64, batch: Int) async throws -> Int { 0 }
        func nextWakeupDue() async throws -> Int64? { nil }
        func heartbeat(node: String, now: Int64) async throws {}
    }

    /// Answers from a script and records what it was asked to send.
    final class ScriptedProvider: PushProvider {
        let kind: PushProviderKind
        let outcomes: Mutex<[PushOutcome]>
        let sent: Mutex<[Wake]>
        init(kind: PushProviderKind, outcomes: [PushOutcome]) {
            self.kind = kind
            self.outcomes = Mutex(outcomes)
            self.sent = Mutex([])
        }
        func send(_ wake: Wake) async -> PushOutcome {
            sent.withLock { $0.append(wake) }
            return outcomes.withLock { $0.isEmpty ? .sent : $0.removeFirst() }
        }
    }

    static func row(_ id: String, provider: PushProviderKind = .webhook, uid: String = "bob", event: String? = nil) -> ClaimedWakeup {
        ClaimedWakeup(uid: uid, registrationID: id, provider: provider, target: #"{"token":"dev"}"#, route: "webhook", tag: "k3",
                      version: 1, firstSeq: 1, attempt: 0, event: event)
    }

    static func message(to recipient: String) -> StoredMessage {
        StoredMessage(seq: 1, recipient: recipient, id: "m1", author: "alice", createdAt: 0, expiresAt: 1, envelope: "", size: 0)
    }

    /// Runs a dispatcher for `body`, then stops it.
    static func withDispatcher(records: FakeRecords, provider: ScriptedProvider, registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry(),
                               _ body: (WakeDispatcher) async throws -> Void) async throws {
        let dispatcher = WakeDispatcher(store: records, providers: [provider.kind: provider], clock: RelayClock { 1_000_000 },
                                        interval: 30_000, concurrency: 4, pollInterval: nil, isLiveHere: { $0 == "live" },
                                        metrics: PushMetrics(registry: registry),
                                        logger: Logger(label: "test"))
        let group = ServiceGroup(configuration: .init(services: [dispatcher], logger: Logger(label: "test")))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            try await body(dispatcher)
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
    }

    @Test func commitNudgeSendsAndRecordsOk() async throws {
        let records = FakeRecords(), provider = ScriptedProvider(kind: .webhook, outcomes: [.sent])
        try await Self.withDispatcher(records: records, provider: provider) { dispatcher in
            try await eventually("a claim at start") { records.state.withLock { !$0.claims.isEmpty } }
            records.state.withLock { $0.rows = [Self.row("r1")] }
            dispatcher.committed(.created(Self.message(to: "bob"), wakeups: true))
            try await eventually("the ok verdict") { records.state.withLock { $0.verdicts == [.ok] } }
            let sent = provider.sent.withLock { $0 }
            #expect(sent.count == 1)
            #expect(sent.first?.webhookID.hasPrefix("msg_") == true && sent.first?.webhookID.count == 26)
            #expect(sent.first?.target == .webhook(token: "dev"))
        }
    }

    @Test func anUnreadableRegistrationIsDroppedAsUnreadableNotAsRetries() async throws {
        let records = FakeRecords(), provider = ScriptedProvider(kind: .webhook, outcomes: [])
        let registry = PrometheusCollectorRegistry()
        try await Self.withDispatcher(records: records, provider: provider, registry: registry) { dispatcher in
            let unreadable = ClaimedWakeup(uid: "bob", registrationID: "r1", provider: .webhook, target: "not json", route: "webhook",
                                           tag: "k3", version: 1, firstSeq: 1, attempt: 0, event: nil)
            records.state.withLock { $0.rows = [unreadable] }
            dispatcher.nudge()
            func exposition() -> String {
                var buffer: [UInt8] = []
                registry.emit(into: &buffer)
                return String(decoding: buffer, as: UTF8.self)
            }
            try await eventually("the drop counted") { exposition().contains("mailslot_push_dropped_total") }
            let text = exposition()
            #expect(text.contains(#"mailslot_push_dropped_total{provider="webhook",reason="unreadable"} 1"#), "\(text)")
            #expect(!text.contains(#"reason="retries""#), "no attempt ran out")
            #expect(provider.sent.withLock { $0.isEmpty })
        }
    }

    @Test func retryRequeuesWithTheSameEventAndDeadIsRecorded() async throws {
        let records = FakeRecords()
        let provider = ScriptedProvider(kind: .webhook, outcomes: [.retry(after: .seconds(120), reason: .rateLimited), .dead(.status4xx)])
        try await Self.withDispatcher(records: records, provider: provider) { dispatcher in
            records.state.withLock { $0.rows = [Self.row("r1", event: "msg_kept"), Self.row("r2")] }
            dispatcher.nudge()
            try await eventually("a requeue and a verdict") { records.state.withLock { $0.requeued.count == 1 && $0.verdicts.count == 1 } }
            let (requeued, verdicts) = records.state.withLock { ($0.requeued, $0.verdicts) }
            #expect(verdicts == [.dead])
            #expect(requeued[0].2 == 1_000_000 + 120_000)
            let sentIDs = provider.sent.withLock { $0.map(\.webhookID) }
            #expect(sentIDs.contains("msg_kept"), "an event id drawn before is kept")
            #expect(requeued[0].1 == provider.sent.withLock { $0.first!.webhookID })
        }
    }

    @Test func disabledProvidersAreNeverClaimedAndOtherCommitsDoNotNudge() async throws {
        let records = FakeRecords(), provider = ScriptedProvider(kind: .webhook, outcomes: [])
        try await Self.withDispatcher(records: records, provider: provider) { dispatcher in
            try await eventually("a claim at start") { records.state.withLock { !$0.claims.isEmpty } }
            #expect(records.state.withLock { Set($0.claims[0]) } == [.webpush, .apns, .fcm])
            // `committed` nudges synchronously or not at all: no wait is needed to see that it did not.
            let before = dispatcher.nudges
            dispatcher.committed(.created(Self.message(to: "carol"), wakeups: false))
            dispatcher.committed(.erased(recipient: "bob", id: "m1"))
            #expect(dispatcher.nudges == before, "a create that queued no wake-up, or an erasure, nudges nothing")
            // A live owner's row is not sent (the store postpones it): wait for the claim's verdict, then look.
            records.state.withLock { $0.rows = [Self.row("r9", uid: "live")] }
            dispatcher.committed(.created(Self.message(to: "bob"), wakeups: true))
            #expect(dispatcher.nudges == before + 1)
            try await eventually("the claim postponed the live owner's wake-up") { dispatcher.skipped(.connected) >= 1 }
            #expect(provider.sent.withLock { $0.isEmpty })
        }
    }
}
