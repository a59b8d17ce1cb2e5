import Foundation
import MailslotWire

/// What `run --wake-registrations` adds to a run (docs/design/wakeups.md §9.5; issue 29: "a
/// provider that hangs or answers 500 for a minute does not change the message path's p99").
struct WakeSettings: Sendable {
    /// Offline owners, each with one Web Push registration at the stand-in (0: the relay is
    /// configured for the stand-ins, and nothing is registered: the baseline).
    let registrations: Int
    let standin: PushStandin
    let fault: PushFault
    /// The relay's `--push-wake-interval`, in seconds.
    let interval: Int

    /// The spawned relay's extra `serve` arguments: every provider at the stand-ins, private
    /// addresses allowed (the receiver is on loopback), and the interval.
    var relayArguments: [String] { standin.relayArguments + ["--push-wake-interval", "\(interval)"] }

    /// Each owner gets a message every half interval: after every wake-up a new message arrives
    /// before the next one is due (spec/push.md §3.1 rule 1), so each registration is woken once
    /// per interval for as long as the run sends.
    var messagesPerSecond: Double { Double(registrations) * 2 / Double(interval) }

    /// At most this many of the wake load's creates are unanswered at once.
    static let inFlight = 32
}

/// The wake load's own tally.
struct WakeTally: Sendable {
    /// Creates sent to the offline owners, and those the relay stored (201).
    var sent = 0, stored = 0
    /// Creates refused, by HTTP status; creates that got no answer.
    var refused: [Int: Int] = [:]
    var unanswered = 0
    /// How far behind its schedule the load fell at worst, in seconds (the bench's own lag).
    var maxLag = 0.0
}

/// The offline owners with registrations, and the messages that keep their wake-ups coming: a
/// steady stream of creates over HTTP from one author of its own, beside the run's WebSocket
/// load, which it does not touch. The owners never subscribe; at the end their mailboxes are
/// emptied (listed and acknowledged) so the run leaves nothing on the relay.
final class WakeLoad: Sendable {
    let settings: WakeSettings
    private let author: BenchUser
    private let owners: [BenchUser]
    /// One envelope per owner, sealed once to its mailbox key (the relay never opens it).
    private let envelopes: [String]
    private let http: RelayHTTP
    private let stopping = Locked(false)
    private let task = Locked<Task<WakeTally, Never>?>(nil)

    private init(settings: WakeSettings, author: BenchUser, owners: [BenchUser], envelopes: [String], http: RelayHTTP) {
        self.settings = settings
        self.author = author
        self.owners = owners
        self.envelopes = envelopes
        self.http = http
    }

    /// Signs in the author and the owners (uids of the run's length, so one size class fits all)
    /// and registers each owner's new subscription at the stand-in, before the clock starts.
    static func prepare(_ settings: WakeSettings, prefix: String, size: Int, target: RelayTarget) async throws -> WakeLoad {
        let ownerUIDs = (0..<settings.registrations).map { "\(prefix)-o\(String(format: "%04d", $0))" }
        let authorUID = "\(prefix)-a0000"
        let author = try await Users.signIn([authorUID], target: target, publish: nil)[0]
        let owners = try await Users.signIn(ownerUIDs, target: target, publish: nil)
        // Version 1 envelopes whatever the run's mode: nobody opens them.
        let body = try MessageBody(size: size, senderUID: authorUID, recipientUIDLength: authorUID.utf8.count, version: .v1)
        let envelopes = try owners.map { try body.presealed(from: author, to: $0.uid, mailboxKey: $0.mailbox.publicKey) }
        let http = target.http, standin = settings.standin
        _ = try await boundedMap(owners, limit: 16) { owner in
            let subscription = try await standin.subscribe()
            try await http.registerWebPush(subscription, uid: owner.uid, session: owner.session)
        }
        return WakeLoad(settings: settings, author: author, owners: owners, envelopes: envelopes, http: http)
    }

    /// Starts the creates at `start` (a ``Monotonic`` time), at ``WakeSettings/messagesPerSecond``,
    /// owner after owner, until ``stop()`` or `seconds` (at most an hour) have passed.
    func start(at start: UInt64, seconds: Double?) {
        guard !owners.isEmpty else { return }
        let rate = settings.messagesPerSecond, owners = owners, envelopes = envelopes
        let http = http, author = author, stopping = stopping
        // Bounded: the ticks a run of `seconds` (or the longest run) has.
        let ticks = Int((min(seconds ?? 3600, 3600) * rate).rounded(.up))
        task.withLock {
            $0 = Task {
                var tally = WakeTally()
                await withTaskGroup(of: Int?.self) { group in
                    var inFlight = 0
                    func record(_ status: Int?) {
                        inFlight -= 1
                        switch status {
                        case 201?: tally.stored += 1
                        case let status?: tally.refused[status, default: 0] += 1
                        case nil: tally.unanswered += 1
                        }
                    }
                    for tick in 0..<ticks {
                        let due = start + UInt64(Double(tick) / rate * 1e9)
                        try? await Monotonic.sleep(until: due)
                        if stopping.current || Task.isCancelled { break }
                        tally.maxLag = max(tally.maxLag, Monotonic.seconds(due, max(due, Monotonic.now())))
                        while inFlight >= WakeSettings.inFlight, let status = await group.next() { record(status) }
                        let index = tick % owners.count
                        let id = BenchID.make(sender: 0xFFFF, sequence: tick, time: Monotonic.now())
                        let path = "/v1/users/\(owners[index].uid)/messages/\(id)", envelope = envelopes[index]
                        group.addTask {
                            let body = try? JSONEncoder().encode(["envelope": envelope])
                            return try? await http.call("PUT", path, bearer: author.session, body: body).status
                        }
                        inFlight += 1
                        tally.sent += 1
                    }
                    while let status = await group.next() { record(status) }
                }
                return tally
            }
        }
    }

    /// Stops the creates; returns the tally once the last answer is in.
    func stop() async -> WakeTally {
        stopping.withLock { $0 = true }
        return await task.current?.value ?? WakeTally()
    }

    /// Empties the owners' mailboxes as a woken app would (list, then acknowledge each): the run
    /// must leave nothing on the relay. Returns how many messages were acknowledged.
    func drain() async throws -> Int {
        let http = http
        return try await boundedMap(owners, limit: 8) { owner in
            var erased = 0
            for id in try await http.pendingIDs(of: owner.uid, session: owner.session) {
                let answer = try await http.call("DELETE", "/v1/users/\(owner.uid)/messages/\(id)", bearer: owner.session)
                guard answer.status == 204 || answer.status == 404 else {
                    throw BenchFailure.failed("acknowledging a message of \(owner.uid) answered HTTP \(answer.status)")
                }
                erased += 1
            }
            return erased
        }.reduce(0, +)
    }
}

/// What a run with wake-ups measured: the relay's push metrics and the stand-in's counters at
/// the end, the wake load's tally, and the relay's memory and CPU over the run.
struct WakeFigures: Sendable {
    let settings: WakeSettings
    let tally: WakeTally
    /// `mailslot_push_*` at the end (summed over the nodes; gauges: the largest node's).
    let sent: Int?, failed: Int?, dropped: Int?, due: Int?, inFlight: Int?, removed: Int?
    let failedByReason: [String: Int], skippedByReason: [String: Int]
    /// The Web Push stand-in's counters (requests, accepted, max_hanging, …).
    let standin: [String: Int]
    /// Messages left in the owners' mailboxes at the end, acknowledged by the drain.
    let drained: Int
    /// Relay RSS before the clock (`VmRSS`), at the end, and its peak (`VmHWM`), in bytes.
    let rssBefore: Int?, rssEnd: Int?, peak: Int?
    /// Relay CPU over the clock, in seconds, and the run's wall time.
    let cpuSeconds: Double?, seconds: Double

    /// Reads the relay's push metrics and the stand-in's counters (the load must be stopped).
    static func read(_ settings: WakeSettings, tally: WakeTally, target: RelayTarget, rssBefore: Int?, rssEnd: Int?, peak: Int?,
                     cpuSeconds: Double?, seconds: Double) async throws -> WakeFigures {
        var readings: [PrometheusText] = []
        for node in target.nodes { if let reading = await node.metrics() { readings.append(reading) } }
        func total(_ name: String) -> Int? {
            readings.isEmpty ? nil : Int(readings.reduce(0) { $0 + ($1[name] ?? 0) })
        }
        func largest(_ name: String) -> Int? { readings.compactMap { $0[name] }.max().map { Int($0) } }
        func byLabel(_ name: String, _ label: String) -> [String: Int] {
            readings.reduce(into: [:]) { sums, reading in
                for (value, count) in reading.sum(name, by: label) { sums[value, default: 0] += Int(count) }
            }
        }
        return WakeFigures(settings: settings, tally: tally,
                           sent: total("mailslot_push_sent_total"), failed: total("mailslot_push_failed_total"),
                           dropped: total("mailslot_push_dropped_total"), due: largest("mailslot_push_due"),
                           inFlight: total("mailslot_push_in_flight"), removed: total("mailslot_push_registrations_removed_total"),
                           failedByReason: byLabel("mailslot_push_failed_total", "reason"),
                           skippedByReason: byLabel("mailslot_push_skipped_total", "reason"),
                           standin: try await settings.standin.state(), drained: 0,
                           rssBefore: rssBefore, rssEnd: rssEnd, peak: peak, cpuSeconds: cpuSeconds, seconds: seconds)
    }

    /// The same, with the drain's count.
    func drained(_ count: Int) -> WakeFigures {
        WakeFigures(settings: settings, tally: tally, sent: sent, failed: failed, dropped: dropped, due: due, inFlight: inFlight,
                    removed: removed, failedByReason: failedByReason, skippedByReason: skippedByReason, standin: standin,
                    drained: count, rssBefore: rssBefore, rssEnd: rssEnd, peak: peak, cpuSeconds: cpuSeconds, seconds: seconds)
    }

    /// Requests the stand-in refused as malformed (its checks failed): the relay sent a bad wake-up.
    var malformed: Int { (standin["logged"] ?? 0) - (standin["accepted"] ?? 0) }

    /// What makes the run fail: wake load creates the relay refused or never answered, a
    /// malformed wake-up, or none reaching the stand-in at all (then nothing was measured).
    var problems: [String] {
        var problems: [String] = []
        let refused = tally.refused.values.reduce(0, +)
        if refused > 0 {
            problems.append("the relay refused \(refused) of the wake load's creates (\(tally.refused.sorted { $0.key < $1.key }.map { "HTTP \($0.key) \($0.value)" }.joined(separator: ", ")))")
        }
        if tally.unanswered > 0 { problems.append("\(tally.unanswered) of the wake load's creates got no answer") }
        if malformed > 0 { problems.append("the Web Push stand-in refused \(malformed) wake-ups as malformed") }
        if settings.registrations > 0 && tally.stored > 0 && (standin["requests"] ?? 0) == 0 {
            problems.append("no wake-up reached the Web Push stand-in")
        }
        return problems
    }

    private var cpuShare: Double? { cpuSeconds.map { $0 / max(seconds, 1e-9) * 100 } }
    private var growth: Int? { rssBefore.flatMap { before in rssEnd.map { $0 - before } } }

    /// The summary's lines.
    var lines: [String] {
        let s = settings
        func reasons(_ counts: [String: Int]) -> String {
            counts.isEmpty ? "" : " (" + counts.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ") + ")"
        }
        return [
            "  wake-ups: \(s.registrations) offline owners with a Web Push registration at the stand-in, fault \(s.fault.rawValue), interval \(s.interval) s;"
                + String(format: " %d creates to them (%.1f/s offered, %d stored, lag ≤ %.3f s), %d acknowledged at the end",
                         tally.sent, s.messagesPerSecond, tally.stored, tally.maxLag, drained),
            "  relay push metrics at the end: sent \(Format.count(sent)), failed \(Format.count(failed))\(reasons(failedByReason)),"
                + " dropped \(Format.count(dropped)), due \(Format.count(due)), in flight \(Format.count(inFlight)),"
                + " removed \(Format.count(removed)), skipped \(skippedByReason.values.reduce(0, +))\(reasons(skippedByReason))",
            "  Web Push stand-in: \(standin["requests"] ?? 0) requests, \(standin["accepted"] ?? 0) passed its checks,"
                + " at most \(standin["max_hanging"] ?? 0) held hanging, at most \(standin["max_in_flight"] ?? 0) at once",
            "  relay memory and CPU: VmRSS \(Format.bytes(rssBefore)) before the clock → \(Format.bytes(rssEnd)) at the end"
                + " (\(growth.map { ($0 >= 0 ? "+" : "") + Format.bytes($0) } ?? "n/a")), VmHWM \(Format.bytes(peak));"
                + " CPU \(Format.optional(cpuSeconds, "%.2f")) s in \(String(format: "%.1f", seconds)) s (\(Format.optional(cpuShare, "%.0f")) % of a core)",
        ]
    }

    /// The report's `push` member.
    var json: JSON {
        func object(_ counts: [String: Int]) -> JSON { .object(counts.sorted { $0.key < $1.key }.map { ($0.key, .int($0.value)) }) }
        return .object([
            ("registrations", .int(settings.registrations)), ("fault", .string(settings.fault.rawValue)),
            ("wake_interval_s", .int(settings.interval)), ("wake_messages_per_sec", .number(settings.messagesPerSecond)),
            ("wake_messages_sent", .int(tally.sent)), ("wake_messages_stored", .int(tally.stored)),
            ("wake_messages_acknowledged", .int(drained)), ("wake_load_max_lag_s", .number(tally.maxLag)),
            ("sent", .int(sent)), ("failed", .int(failed)), ("failed_by_reason", object(failedByReason)),
            ("dropped", .int(dropped)), ("due", .int(due)), ("in_flight", .int(inFlight)), ("removed", .int(removed)),
            ("skipped_by_reason", object(skippedByReason)),
            ("standin", object(standin)),
            ("relay_rss_before_bytes", .int(rssBefore)), ("relay_vmrss_end_bytes", .int(rssEnd)), ("relay_vmhwm_bytes", .int(peak)),
            ("relay_rss_growth_bytes", .int(growth)),
            ("relay_cpu_s", .number(cpuSeconds)), ("relay_cpu_percent", .number(cpuShare)), ("seconds", .number(seconds)),
        ])
    }
}

extension RelayHTTP {
    /// `PUT /v1/users/{uid}/push/{id}` (spec/protocol.md §4.22): a Web Push registration under a
    /// new id and a random tag, as the client library makes them.
    func registerWebPush(_ subscription: WebPushSubscription, uid: String, session: String) async throws {
        let id = Base64URL.encode(randomBytes(16)), tag = Base64URL.encode(randomBytes(16))
        let body = try JSONEncoder().encode(["provider": "webpush", "endpoint": subscription.endpoint, "p256dh": subscription.p256dh,
                                             "auth": subscription.auth, "tag": tag])
        let answer = try await call("PUT", "/v1/users/\(uid)/push/\(id)", bearer: session, body: body)
        guard answer.status == 201 else {
            let problem = (try? JSONDecoder().decode(Problem.self, from: answer.body)).map { " \($0.code.rawValue): \($0.detail ?? "")" } ?? ""
            throw BenchFailure.failed("registering a Web Push subscription for \(uid) was refused: HTTP \(answer.status)\(problem)")
        }
    }
}
