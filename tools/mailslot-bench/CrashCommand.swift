import ArgumentParser
import Foundation
import MailslotWire

/// `mailslot-bench crash`: crash safety under load (issue 7, item 3).
struct CrashCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "crash",
        abstract: "Kill -9 a spawned relay again and again under load; check that nothing answered is lost or stored twice.",
        discussion: """
            Senders keep a window of sends in flight to a few recipients, which ack everything. At random \
            moments the relay is killed with SIGKILL and started again on the same data folder and port; \
            every socket reconnects, senders send again whatever was not answered (same id, same envelope: \
            the create is idempotent), recipients keep one store of ids across reconnects, as a client does. \
            At the end every mailbox is drained. PASS when every send answered 2xx was stored by its \
            recipient exactly once (a redelivery of a stored id is deduplicated, not a loss), no send is \
            left unanswered, and the relay holds 0 messages. Exit 1 on FAIL. With --nodes N and \
            --postgres or --database-url, N relays share one database and are killed in turn; the \
            clients of the killed node reconnect to the next one at once and return once it is back.
            """
    )

    @Option(help: "How many times to kill the relay.")
    var kills = 10

    @Option(help: "Sending users.")
    var senders = 4

    @Option(help: "Receiving users.")
    var recipients = 2

    @Option(help: ArgumentHelp("Plaintext body size in bytes.", valueName: "BYTES"))
    var size = 256

    @Option(help: ArgumentHelp("Unanswered sends each sender keeps in flight.", valueName: "N"))
    var window = 16

    @Option(help: ArgumentHelp("Shortest stretch of traffic before a kill.", valueName: "SECONDS"))
    var minInterval = 0.3

    @Option(help: ArgumentHelp("Longest stretch of traffic before a kill.", valueName: "SECONDS"))
    var maxInterval = 2.0

    @Option(help: ArgumentHelp("The relay's --durability, normal or full (default: the relay's default).", valueName: "MODE"))
    var durability: String?

    @Option(help: ArgumentHelp("The relay executable (default: mailslot-relay next to this one).", valueName: "PATH"))
    var relayBinary: String?

    @OptionGroup var cluster: ClusterOptions

    @OptionGroup var output: RunOutput

    func validate() throws {
        guard (1...1000).contains(kills) else { throw ValidationError("--kills must be 1 to 1000") }
        guard (1...200).contains(senders) else { throw ValidationError("--senders must be 1 to 200") }
        guard (1...200).contains(recipients) else { throw ValidationError("--recipients must be 1 to 200") }
        guard (1...60_000).contains(size) else { throw ValidationError("--size must be 1 to 60000 bytes") }
        guard (1...10_000).contains(window) else { throw ValidationError("--window must be 1 to 10000") }
        guard minInterval > 0, maxInterval >= minInterval, maxInterval <= 600 else {
            throw ValidationError("give 0 < --min-interval ≤ --max-interval ≤ 600 seconds")
        }
        if let durability, !["normal", "full"].contains(durability) { throw ValidationError("--durability is normal or full") }
    }

    func run() async throws {
        Teardown.installSignalHandlers()
        ProcessStats.raiseFileLimit()
        try await RunReport.measure(json: output.json, start: {
            try await RelayTarget.spawn(binary: relayBinary, durability: durability, audience: Defaults.audience,
                                        maxEnvelopeBytes: nil, cluster: cluster)
        }) { target in
            try await CrashTest(command: self, target: target).run()
        }
    }
}

/// What happened at one kill.
struct KillRecord {
    /// Seconds since the test started.
    let at: Double
    /// Messages stored (answered 2xx) before the kill.
    let storedBefore: Int
    /// Sends written and not yet answered when the relay died.
    let inFlight: Int
    /// Messages delivered whose erasure was not confirmed yet.
    let unconfirmed: Int
    /// From the restart to `/healthz` answering, seconds.
    let recovery: Double
    /// The node killed (1-based).
    let node: Int
    /// Sockets the kill cut; with several nodes they reconnected to the next node at once.
    let cut: Int
}

/// One crash test against spawned relays: one, killed and restarted again and again, or several
/// on one database, killed in turn while the clients of the dead node reconnect to the next one
/// (and go back to their own node once it answers again, so the placement holds).
struct CrashTest {
    let command: CrashCommand
    let target: RelayTarget

    private func status(_ text: String) { if !command.output.quiet { Console.error("mailslot-bench: \(text)") } }

    func run() async throws -> RunReport {
        guard target.isSpawned else { throw BenchFailure.failed("the crash test needs spawned relays") }
        let http = target.http
        let prefix = Users.runPrefix()
        let senderUIDs = (0..<command.senders).map { "\(prefix)-s\(String(format: "%04d", $0))" }
        let recipientUIDs = (0..<command.recipients).map { "\(prefix)-r\(String(format: "%04d", $0))" }
        let body = try MessageBody(size: command.size, senderUID: senderUIDs[0], recipientUIDLength: recipientUIDs[0].utf8.count)
        status("signing in \(command.senders + command.recipients) users at \(target.description)")
        let senders = try await Users.signIn(senderUIDs, target: target, publish: nil)
        let recipients = try await Users.signIn(recipientUIDs, target: target, publish: nil)
        let destinations = try recipients.map { user in
            Destination(uid: user.uid, slow: false, presealed: try body.presealed(from: senders[0], to: user.uid, mailboxKey: user.mailbox.publicKey),
                        mailboxKey: user.mailbox.publicKey)
        }
        let senderPlans = senders.enumerated().map { index, user in
            SenderPlan(index: index, user: user, destinations: destinations, quota: nil, duration: nil,
                       pacing: .closed(window: command.window), body: nil, ratchets: nil)
        }
        let recipientPlans = recipients.map { user in
            RecipientPlan(user: user, acks: true, measures: true, senderUIDs: senderUIDs,
                          presealed: Array((destinations.first { $0.uid == user.uid }?.presealed ?? "").utf8), pinned: nil,
                          ratchets: nil)
        }
        let outboxes = senders.map { _ in Locked(Outbox()) }
        let ledgers = recipients.map { _ in Locked(RecipientLedger()) }
        let counters = Counters(LiveCounts())
        // The clients: the recipients, then the senders. Each is connected to one node: its own
        // (the placement's) unless that node is down.
        let clientCount = recipientPlans.count + senderPlans.count, nodeCount = target.nodes.count
        let home = recipientPlans.indices.map { target.placement.recipientNode($0, nodes: nodeCount) }
            + senderPlans.indices.map { target.placement.senderNode($0, nodes: nodeCount) }
        var current = home
        let everyone = Array(0..<clientCount)
        var readyWanted = 0
        var sockets = [Socket?](repeating: nil, count: clientCount)

        func connect(_ clients: [Int]) async throws {
            for client in clients {
                let http = target.nodes[current[client]].http
                if client < recipientPlans.count {
                    sockets[client] = BenchRecipient.start(recipientPlans[client], ledger: ledgers[client], http: http, counters: counters)
                } else {
                    let sender = client - recipientPlans.count
                    sockets[client] = CrashSender.connect(senderPlans[sender], window: command.window, outbox: outboxes[sender], http: http, counters: counters)
                }
            }
            readyWanted += clients.count
            let wanted = readyWanted
            guard await waitUntil(seconds: 30, { counters.current.ready >= wanted }) else {
                throw BenchFailure.failed("only \(counters.current.ready - (wanted - clients.count)) of \(clients.count) sockets got ready within 30 s after a start:\n\(logTails())")
            }
        }
        func disconnect(_ clients: [Int], gently: Bool) async {
            let closing = clients.compactMap { sockets[$0] }
            if gently { for socket in closing { await socket.close() } }
            await withTaskGroup(of: Void.self) { group in
                for socket in closing { group.addTask { await socket.finish(within: gently ? 10 : 5) } }
            }
            for client in clients { sockets[client] = nil }
        }
        func unconfirmed() -> Int {
            ledgers.reduce(0) { total, ledger in total + ledger.withLock { $0.unconfirmed() } }
        }
        func currentUnconfirmed() -> Int {
            ledgers.reduce(0) { total, ledger in total + ledger.withLock { $0.unconfirmed(current: true) } }
        }

        let start = Monotonic.now()
        var killLog: [KillRecord] = []
        do {
            try await connect(everyone)
            status("traffic from \(command.senders) senders to \(command.recipients) recipients; \(command.kills) kills ahead")
            for number in 1...command.kills {
                try await trafficPause(counters: counters)
                // Several nodes: each in turn.
                let victim = (number - 1) % nodeCount
                let node = target.nodes[victim]
                guard let relay = node.spawned else { throw BenchFailure.failed("the crash test needs spawned relays") }
                let storedBefore = counters.current.created
                let inFlight = outboxes.reduce(0) { $0 + $1.withLock { $0.inFlight } }
                let pendingAcks = unconfirmed()
                let at = Monotonic.seconds(start, Monotonic.now())
                await relay.kill()
                let cut = everyone.filter { current[$0] == victim }
                await disconnect(cut, gently: false)
                if nodeCount > 1 {
                    // As a client of a cluster would: straight to another node, while this one restarts.
                    for client in cut { current[client] = (victim + 1) % nodeCount }
                    try await connect(cut)
                }
                let restart = Monotonic.now()
                try relay.start()
                try await relay.waitHealthy(node.http)
                let recovery = Monotonic.seconds(restart, Monotonic.now())
                killLog.append(KillRecord(at: at, storedBefore: storedBefore, inFlight: inFlight, unconfirmed: pendingAcks, recovery: recovery,
                                          node: victim + 1, cut: cut.count))
                status(String(format: "kill %d/%d%@ at %.1f s: %d stored so far, %d sends in flight, %d acks unconfirmed; back in %.2f s",
                              number, command.kills, nodeCount > 1 ? " (node \(victim + 1), \(cut.count) sockets moved)" : "",
                              at, storedBefore, inFlight, pendingAcks, recovery))
                if nodeCount == 1 {
                    try await connect(cut)
                } else {
                    // Home again, so that the placement holds (with split, every message crosses nodes).
                    let returning = everyone.filter { home[$0] == victim && current[$0] != victim }
                    await disconnect(returning, gently: true)
                    for client in returning { current[client] = victim }
                    try await connect(returning)
                }
            }
            try await trafficPause(counters: counters)

            // The end: no new messages; everything waiting is answered, then every mailbox drains.
            status("stopping new sends; waiting for the last answers and the drain")
            for outbox in outboxes { outbox.withLock { $0.closed = true } }
            var answered = false
            for round in 0..<3 {
                answered = try await waitProgress(counters: counters) {
                    outboxes.allSatisfy { $0.withLock { $0.unanswered == 0 } }
                }
                if answered { break }
                // Refused sends stay in the outbox: a new socket sends them again.
                status("sends still unanswered; reconnecting the senders (\(round + 1)/3)")
                await disconnect(everyone, gently: true)
                try await connect(everyone)
            }
            // Drained: every recipient has every message stored for it, and every ack its current
            // socket sent is confirmed. (An ack the relay committed just before a kill never gets
            // its `acked`; the relay no longer holds that message, which the count below checks.)
            var drained = try await waitProgress(counters: counters) {
                currentUnconfirmed() == 0 && expectedPerRecipient(outboxes: outboxes, destinations: destinations.count).enumerated().allSatisfy { index, expected in
                    ledgers[index].withLock { $0.stored } >= expected
                }
            }
            func listed() async -> Int? {
                try? await boundedMap(senders + recipients, limit: 8) { user in
                    try await http.pendingIDs(of: user.uid, session: user.session).count
                }.reduce(0, +)
            }
            // A message the relay still holds from before the last kill is delivered again soon: wait for that too.
            var remainingListed = await listed()
            if drained, remainingListed != 0 {
                let deadline = Monotonic.now() + UInt64(command.output.drainTimeout * 1e9)
                while remainingListed != 0, Monotonic.now() < deadline {
                    try await Task.sleep(nanoseconds: 200_000_000)
                    remainingListed = await listed()
                }
                drained = remainingListed == 0
            }
            let remainingGauge = await target.metrics()?["mailslot_messages_pending"].map { Int($0) }
            let lostConfirmations = unconfirmed()
            await disconnect(everyone, gently: true)
            return report(outboxes: outboxes.map(\.current), ledgers: ledgers.map(\.current), destinations: destinations.count,
                          killLog: killLog, remaining: (remainingGauge, remainingListed), lostConfirmations: lostConfirmations,
                          complete: answered && drained,
                          seconds: Monotonic.seconds(start, Monotonic.now()), body: body)
        } catch {
            for socket in sockets { socket?.abandon() }
            throw error
        }
    }

    /// The last lines of every node's output, for error messages.
    private func logTails() -> String {
        guard target.nodes.count > 1 else { return target.nodes[0].spawned?.logTail() ?? "" }
        return target.nodes.enumerated().map { "node \($0.offset + 1):\n" + ($0.element.spawned?.logTail() ?? "") }.joined(separator: "\n")
    }

    /// Lets traffic flow for a random stretch, making sure some messages got through since the last start.
    private func trafficPause(counters: Counters) async throws {
        let before = counters.current.created
        try await Task.sleep(nanoseconds: UInt64(Double.random(in: command.minInterval...command.maxInterval) * 1e9))
        guard await waitUntil(seconds: command.output.drainTimeout, { counters.current.created > before }) else {
            throw BenchFailure.failed("no message was stored for \(Int(command.output.drainTimeout)) s after a restart:\n\(logTails())")
        }
    }

    /// Waits for `done` while the counts keep moving (at most `drainTimeout` seconds without change).
    private func waitProgress(counters: Counters, _ done: () -> Bool) async throws -> Bool {
        var last = counters.current
        var lastChange = Monotonic.now()
        while !done() {
            let counts = counters.current
            if counts.answered != last.answered || counts.erased != last.erased || counts.delivered != last.delivered || counts.sent != last.sent {
                last = counts
                lastChange = Monotonic.now()
            } else if Monotonic.seconds(lastChange, Monotonic.now()) > command.output.drainTimeout {
                return false
            }
            if let dead = target.deadNode {
                throw BenchFailure.failed("the relay\(target.nodes.count > 1 ? " of node \(dead.number)" : "") died:\n\(dead.node.spawned?.logTail() ?? "")")
            }
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        return true
    }

    /// How many stored messages each recipient must end up with.
    private func expectedPerRecipient(outboxes: [Locked<Outbox>], destinations: Int) -> [Int] {
        var expected = [Int](repeating: 0, count: destinations)
        for (index, outbox) in outboxes.enumerated() {
            outbox.withLock { outbox in
                for (sequence, entry) in outbox.entries where entry.stored { expected[(index + sequence) % destinations] += 1 }
            }
        }
        return expected
    }

    private func report(outboxes: [Outbox], ledgers: [RecipientLedger], destinations: Int, killLog: [KillRecord],
                        remaining: (gauge: Int?, listed: Int?), lostConfirmations: Int, complete: Bool, seconds: Double,
                        body: MessageBody) -> RunReport {
        var stored = 0, lost = 0, unanswered = 0, resent = 0, recreated = 0, duplicates = 0, allowedReappearances = 0
        var refusals: [String: Int] = [:]
        for (index, outbox) in outboxes.enumerated() {
            refusals.merge(outbox.refusals, uniquingKeysWith: +)
            for (sequence, entry) in outbox.entries {
                resent += max(0, entry.attempts - 1)
                if entry.created > 1 { recreated += entry.created - 1 }
                guard entry.stored else { unanswered += 1; continue }
                stored += 1
                let ledger = ledgers[(index + sequence) % destinations]
                let key = BenchID.key(sender: index, sequence: sequence)
                if ledger.entries[key] == nil { lost += 1 }
                // A new copy is a duplicate unless the relay created it again.
                let again = ledger.reappeared[key] ?? 0
                let allowed = max(0, entry.possibleCreations - 1)
                duplicates += max(0, again - allowed)
                allowedReappearances += min(again, allowed)
            }
        }
        duplicates += ledgers.reduce(0) { $0 + $1.duplicates }
        let redeliveries = ledgers.reduce(0) { $0 + $1.redeliveries }
        let rejected = ledgers.reduce(into: [String: Int]()) { $0.merge($1.rejected, uniquingKeysWith: +) }
        let unexpected = outboxes.flatMap(\.unexpected) + ledgers.flatMap(\.unexpected)
        let notStored = ledgers.enumerated().reduce(0) { total, pair in
            // Delivered, but its sender never got a 2xx: the create committed and its answer died with the relay.
            total + pair.element.entries.keys.filter { key in
                let (sender, sequence) = BenchID.split(key)
                return sender >= outboxes.count || outboxes[sender].entries[sequence]?.stored != true
            }.count
        }
        // On a database others may use too, the store-wide gauge is not ours to check.
        let remainingCount = target.ownsStore ? (remaining.gauge ?? remaining.listed) : remaining.listed
        var problems: [String] = []
        if lost > 0 { problems.append("\(lost) answered messages never reached their recipient") }
        if duplicates > 0 { problems.append("\(duplicates) messages came back after their erasure was confirmed") }
        if unanswered > 0 { problems.append("\(unanswered) sends were never answered 2xx") }
        if let remainingCount, remainingCount != 0 { problems.append("the relay still holds \(remainingCount) messages") }
        if remaining.gauge == nil && remaining.listed == nil { problems.append("could not learn how many messages the relay still holds") }
        if let listed = remaining.listed, listed != 0, listed != remainingCount { problems.append("\(listed) messages are still listed") }
        if !rejected.isEmpty { problems.append("recipients rejected messages: \(rejected)") }
        if !unexpected.isEmpty { problems.append("unexpected frames: \(Set(unexpected).sorted().joined(separator: "; "))") }
        if !complete && problems.isEmpty { problems.append("the test did not drain") }

        let hitInFlight = killLog.filter { $0.inFlight > 0 }.count
        let hitUnconfirmed = killLog.filter { $0.unconfirmed > 0 }.count
        var lines: [String] = []
        lines.append("mailslot-bench crash — \(target.description), durability \(command.durability ?? "default")")
        lines.append("  \(command.senders) senders → \(command.recipients) recipients, window \(command.window), \(body.envelopeBytes) B envelopes; \(killLog.count) kill -9 in \(String(format: "%.1f", seconds)) s")
        let nodes = target.nodes.count
        if nodes > 1 { lines.append("  \(nodes) nodes, killed in turn; \(target.placement.describe(nodes: nodes)); the clients of a killed node moved to the next one") }
        for (number, kill) in killLog.enumerated() {
            lines.append(String(format: "    kill %2d%@ at %6.1f s: %6d stored before, %4d sends in flight, %4d acks unconfirmed; healthy again in %.2f s",
                                number + 1, nodes > 1 ? " (node \(kill.node), \(kill.cut) sockets moved)" : "",
                                kill.at, kill.storedBefore, kill.inFlight, kill.unconfirmed, kill.recovery))
        }
        lines.append("  kills that hit sends in flight: \(hitInFlight)/\(killLog.count); that hit unconfirmed acks: \(hitUnconfirmed)/\(killLog.count)")
        lines.append("  \(stored) messages answered 2xx; \(resent) sends repeated after a kill (\(recreated) created again after an erasure)")
        lines.append("  lost \(lost), duplicated \(duplicates), unanswered \(unanswered); deduplicated: \(redeliveries) redeliveries + \(allowedReappearances) re-created copies; delivered without a 2xx answer: \(notStored)")
        lines.append("  acks whose acked answer died with the relay: \(lostConfirmations) (the relay had erased them: they were not delivered again)")
        lines.append("  relay remaining \(remainingCount.map(String.init) ?? "unknown") (gauge \(remaining.gauge.map(String.init) ?? "n/a"), listed \(remaining.listed.map(String.init) ?? "n/a"))"
                     + (refusals.isEmpty ? "" : "; refusals along the way: \(refusals.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))"))
        lines.append(problems.isEmpty ? "PASS" : "FAIL: " + problems.joined(separator: "; "))

        // Several nodes: how many and where the clients were, and each kill's node.
        let cluster: [(String, JSON)] = target.isCluster ? [
            ("nodes", .int(nodes)), ("placement", .string(target.placement.rawValue)),
            ("store", .string(target.database != nil ? "postgresql" : "unknown")),
        ] : []
        var members: [(String, JSON)] = [("test", .string("crash"))] + cluster
        members += [
            ("durability", command.durability.map(JSON.string) ?? .null),
            ("kills", .int(killLog.count)), ("senders", .int(command.senders)), ("recipients", .int(command.recipients)),
            ("window", .int(command.window)), ("envelope_bytes", .int(body.envelopeBytes)), ("seconds", .number(seconds)),
            ("stored", .int(stored)), ("lost", .int(lost)), ("duplicated", .int(duplicates)), ("unanswered", .int(unanswered)),
            ("resent", .int(resent)), ("recreated", .int(recreated)), ("redelivered", .int(redeliveries)),
            ("deduplicated_recreated", .int(allowedReappearances)), ("delivered_without_answer", .int(notStored)),
            ("acks_unconfirmed", .int(lostConfirmations)),
            ("relay_remaining", .int(remainingCount)), ("relay_remaining_gauge", .int(remaining.gauge)), ("relay_remaining_listed", .int(remaining.listed)),
            ("refusals", .object(refusals.sorted { $0.key < $1.key }.map { ($0.key, .int($0.value)) })),
            ("kill_log", .array(killLog.map { kill in
                .object([("at_s", .number(kill.at)), ("stored_before", .int(kill.storedBefore)), ("in_flight", .int(kill.inFlight)),
                         ("unconfirmed_acks", .int(kill.unconfirmed)), ("recovery_s", .number(kill.recovery))]
                        + (nodes > 1 ? [("node", .int(kill.node)), ("sockets_moved", .int(kill.cut))] : []))
            })),
            ("pass", .bool(problems.isEmpty)), ("problems", .array(problems.map(JSON.string))),
        ]
        let json = JSON.object(members)
        return RunReport(summary: lines.joined(separator: "\n"), json: json, problems: problems)
    }
}
