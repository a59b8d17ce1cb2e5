import ArgumentParser
import Foundation
import Histogram
import MailslotWire

/// What `run` was asked to do.
struct RunSettings: Sendable {
    let mode: Mode
    /// E2e mode: the envelope version sealed, and the in-process CPU comparison's batches.
    let envelope: EnvelopeVersion
    /// E2e mode with v2: ratchets start with a claimed one-time prekey when one is had.
    let oneTimePrekeys: Bool
    let cryptoBatches: Int, cryptoBatchMessages: Int
    let senders: Int, recipients: Int, slowRecipients: Int, subscribers: Int
    let size: Int
    let duration: Double?
    let messages: Int?
    let rate: Double?
    let window: Int
    let drainTimeout: Double
    let quiet: Bool
    /// Wake-ups beside the load (`--wake-registrations`), or nil.
    var wake: WakeSettings? = nil
}

/// The outcome of a run: the human summary, the JSON object, and the checks that failed.
struct RunReport {
    let summary: String
    let json: JSON
    let problems: [String]
    /// The send → delivery latency's 99th percentile, in milliseconds (what `transfer
    /// --alongside-rate` compares with and without transfers).
    var deliveryP99: Double = 0

    /// The one way each command measures: starts its relays, runs `body` against them, stops them
    /// whatever happens (a failure shows the first spawned relay's last log lines), turns a
    /// ``BenchFailure`` into its exit status; then prints the summary, with `json` the JSON line
    /// last, and fails the command (exit 1) when the run found problems.
    static func measure(json: Bool, start: () async throws -> RelayTarget, _ body: (RelayTarget) async throws -> RunReport) async throws {
        let report: RunReport
        do {
            let target = try await start()
            do {
                report = try await body(target)
            } catch {
                if let node = target.nodes.first?.spawned { Console.error(node.logTail()) }
                await target.finish()
                throw error
            }
            await target.finish()
        } catch let failure as BenchFailure {
            Console.error("mailslot-bench: error: \(failure.description)")
            throw ExitCode(failure.status)
        }
        print(report.summary)
        if json { print(report.json.text) }
        if !report.problems.isEmpty {
            Console.error("mailslot-bench: FAILED: " + report.problems.joined(separator: "; "))
            throw ExitCode(1)
        }
    }
}

/// One measured run against one relay, or several nodes on one database (each client on the
/// node the target's placement gives it): set up users and sockets, start the clock, send,
/// drain, check, and report.
struct Benchmark {
    let settings: RunSettings
    let target: RelayTarget

    private var http: RelayHTTP { target.http }

    private func status(_ text: String) { if !settings.quiet { Console.error("mailslot-bench: \(text)") } }

    func run() async throws -> RunReport {
        let s = settings
        let prefix = Users.runPrefix()
        func uids(_ tag: String, _ count: Int) -> [String] { (0..<count).map { "\(prefix)-\(tag)\(String(format: "%04d", $0))" } }
        let senderUIDs = uids("s", s.senders), recipientUIDs = uids("r", s.recipients), slowUIDs = uids("k", s.slowRecipients)
        let e2e = s.mode == .e2e, ratchets = e2e && s.envelope == .v2
        let body = try MessageBody(size: s.size, senderUID: senderUIDs[0], recipientUIDLength: recipientUIDs[0].utf8.count,
                                   version: e2e ? s.envelope : .v1)

        // Client CPU per message of both formats, in-process, before any socket is open.
        var cryptoCost: CryptoCost?
        if e2e && s.cryptoBatches > 0 {
            status("measuring seal and open CPU in-process: \(s.cryptoBatches) alternating batches of \(s.cryptoBatchMessages) messages per format")
            cryptoCost = try CryptoCost.measure(body: body, sender: senderUIDs[0], recipient: recipientUIDs[0],
                                                batches: s.cryptoBatches, messages: s.cryptoBatchMessages)
        }

        status("signing in \(s.senders + s.recipients + s.slowRecipients) users at \(target.description)\(e2e ? " and publishing their key bundles" : "")")
        let publish = e2e ? s.envelope : nil
        let senders = try await Users.signIn(senderUIDs, target: target, publish: publish)
        let prekeys = s.oneTimePrekeys ? min(s.senders, 200) : 0  // the relay's default --max-prekeys
        let recipients = try await Users.signIn(recipientUIDs, target: target, publish: publish, oneTimePrekeys: prekeys)
        let slow = try await Users.signIn(slowUIDs, target: target, publish: publish, oneTimePrekeys: prekeys)

        // What clients would have pinned: senders the recipients' bundles, recipients the senders'.
        var mailboxKeys = Dictionary(uniqueKeysWithValues: (recipients + slow).map { ($0.uid, $0.mailbox.publicKey) })
        var pinned: [String: IdentityPublicKey]?
        var recipientBundles: [String: KeyBundle] = [:]
        if e2e {
            recipientBundles = try await Users.bundles(of: recipientUIDs + slowUIDs, reader: senders[0], http: http)
            mailboxKeys = recipientBundles.mapValues(\.mailboxKey)
            pinned = try await Users.bundles(of: senderUIDs, reader: recipients[0], http: http).mapValues(\.identityKey)
        }
        var destinations: [Destination] = []
        var presealed: [String: String] = [:]
        for user in recipients + slow {
            let key = mailboxKeys[user.uid] ?? user.mailbox.publicKey
            if !e2e { presealed[user.uid] = try body.presealed(from: senders[0], to: user.uid, mailboxKey: key) }
            destinations.append(Destination(uid: user.uid, slow: slowUIDs.contains(user.uid), presealed: presealed[user.uid], mailboxKey: key))
        }
        // Version 2: each sender starts a ratchet with each recipient from its verified bundle
        // before the clock, with a claimed one-time prekey (--one-time-prekeys) or the signed
        // prekey alone, as when none is left.
        var senderRatchets: [[Ratchet]] = []
        var oneTimeStarts = 0
        if ratchets {
            for sender in senders {
                var row: [Ratchet] = []
                for destination in destinations {
                    guard let bundle = recipientBundles[destination.uid], let prekey = bundle.signedPrekey else {
                        throw BenchFailure.failed("\(destination.uid)'s key bundle has no signed prekey")
                    }
                    var oneTime: PublishedPrekey?
                    if s.oneTimePrekeys, let claimed = try await http.claimPrekey(of: destination.uid, session: sender.session) {
                        guard let key = claimed.publicKey else { throw BenchFailure.failed("the relay served a one-time prekey that does not decode") }
                        oneTime = PublishedPrekey(id: claimed.id, key: key)
                        oneTimeStarts += 1
                    }
                    let started = Result { () throws(EnvelopeError) in
                        try Ratchet.initiate(identity: sender.identity, peerIdentity: bundle.identityKey, signedPrekey: prekey, oneTimePrekey: oneTime)
                    }
                    switch started {
                    case .success(let ratchet): row.append(ratchet)
                    case .failure(let error): throw BenchFailure.failed("cannot start a ratchet with \(destination.uid): \(error.code)")
                    }
                }
                senderRatchets.append(row)
            }
        }

        // Wake-ups: the offline owners and their registrations, the stand-in reset to the fault.
        var wakeLoad: WakeLoad?
        if let wake = s.wake {
            status("registering \(wake.registrations) offline users at the Web Push stand-in (fault \(wake.fault.rawValue), interval \(wake.interval) s)")
            wakeLoad = try await WakeLoad.prepare(wake, prefix: prefix, size: s.size, target: target)
            try await wake.standin.begin(wake.fault)
        }

        let counters = Counters(LiveCounts())
        let gate = StartGate()
        var sockets: [Socket] = []
        do {
            // Idle connections first, alone, so their cost is measured before any traffic.
            var idle: (before: Int?, after: Int?, opened: Int)?
            if s.subscribers > 0 {
                idle = try await openIdle(prefix: prefix, counters: counters, sockets: &sockets)
            }
            let readyBefore = counters.current.ready

            status("opening \(s.recipients + s.slowRecipients + s.senders) sockets")
            var recipientLedgers: [Locked<RecipientLedger>] = []
            var recipientPlans: [RecipientPlan] = []
            for user in recipients + slow {
                let isSlow = slowUIDs.contains(user.uid)
                let plan = RecipientPlan(user: user, acks: !isSlow, measures: !isSlow, senderUIDs: senderUIDs,
                                         presealed: presealed[user.uid].map { Array($0.utf8) }, pinned: pinned,
                                         ratchets: ratchets ? Locked(RatchetStore()) : nil)
                let ledger = Locked(RecipientLedger())
                sockets.append(BenchRecipient.start(plan, ledger: ledger, http: target.recipientHTTP(recipientLedgers.count), counters: counters))
                recipientLedgers.append(ledger)
                recipientPlans.append(plan)
            }
            var senderLedgers: [Locked<SenderLedger>] = []
            for (index, user) in senders.enumerated() {
                let plan = SenderPlan(index: index, user: user, destinations: destinations,
                                      quota: s.messages.map { $0 / s.senders + (index < $0 % s.senders ? 1 : 0) },
                                      duration: s.duration.map { UInt64($0 * 1e9) }, pacing: pacing(index),
                                      body: e2e ? body : nil, ratchets: ratchets ? senderRatchets[index] : nil)
                let (socket, ledger) = BenchSender.start(plan, http: target.senderHTTP(index), gate: gate, counters: counters)
                sockets.append(socket)
                senderLedgers.append(ledger)
            }
            let expected = s.recipients + s.slowRecipients + s.senders
            guard await waitUntil(seconds: 30, { let c = counters.current; return c.ready - readyBefore >= expected || c.failure != nil }) else {
                throw BenchFailure.failed("only \(counters.current.ready - readyBefore) of \(expected) sockets got their ready frame within 30 s")
            }
            try await checkSockets(sockets, counters: counters)

            // The clock. (Several nodes: their counters and the database's first, which takes a moment.)
            let clusterBefore = target.isCluster ? await ClusterReading.take(target) : nil
            let rssBefore = s.wake != nil ? await target.residentBytes() : nil
            let cpuBefore = await target.cpuSeconds(), ownBefore = ProcessStats.ownCPUSeconds()
            let start = Monotonic.now() + 20_000_000
            let progress = ProgressPrinter()
            progress.start(counters: counters, target: target, start: start, quiet: s.quiet)
            wakeLoad?.start(at: start, seconds: s.duration)
            gate.open(start)
            status("sending (\(describePacing()))")

            let sendingEnded = try await waitProgressing(counters: counters, sockets: sockets, what: "sending") {
                $0.sendersDone == s.senders
            }
            // The wake load sends as long as the senders do.
            let wakeTally = await wakeLoad?.stop()
            let answered = try await waitProgressing(counters: counters, sockets: sockets, what: "the answers to the sends") {
                $0.answered >= $0.sent
            }
            let drained = try await waitProgressing(counters: counters, sockets: sockets, what: "the deliveries and acks") {
                $0.erased >= $0.created
            }
            let end = Monotonic.now()
            let cpuAfter = await target.cpuSeconds(), ownAfter = ProcessStats.ownCPUSeconds()
            let samples = progress.stop()
            let clusterAfter = target.isCluster ? await ClusterReading.take(target) : nil
            if !(sendingEnded && answered && drained) { status("not everything arrived; counting what did") }

            // Wake-ups: the relay's push metrics, memory and the stand-in's counters as the run
            // left them; then the fault ends (hung calls are released) and the owners' mailboxes
            // are emptied, so the checks below find nothing left.
            var wake: WakeFigures?
            if let wakeLoad, let wakeTally {
                wake = try await WakeFigures.read(wakeLoad.settings, tally: wakeTally, target: target, rssBefore: rssBefore,
                                                  rssEnd: await target.residentBytes(), peak: await target.peakResidentBytes(),
                                                  cpuSeconds: cpuBefore.flatMap { before in cpuAfter.map { $0 - before } },
                                                  seconds: Monotonic.seconds(start, end))
                try await wakeLoad.settings.standin.end()
                status("acknowledging the messages left for the offline users")
                wake = wake?.drained(try await wakeLoad.drain())
            }

            // Slow consumers: reconnect them as acking recipients; the relay brings their whole
            // backlog from disk (the unacked window again, then the rest).
            let slowBacklog = counters.current.createdSlow
            var slowDrained = true
            if s.slowRecipients > 0 {
                status("draining \(slowBacklog) messages waiting for the slow recipients")
                let slowIndexes = Array(s.recipients..<(s.recipients + s.slowRecipients))
                for index in slowIndexes { await sockets[index].close() }
                for index in slowIndexes { await sockets[index].finish(within: 10) }
                for index in slowIndexes {
                    let plan = recipientPlans[index]
                    let drainer = RecipientPlan(user: plan.user, acks: true, measures: false, senderUIDs: plan.senderUIDs,
                                                presealed: plan.presealed, pinned: plan.pinned, ratchets: plan.ratchets)
                    sockets.append(BenchRecipient.start(drainer, ledger: recipientLedgers[index], http: target.recipientHTTP(index), counters: counters))
                }
                slowDrained = try await waitProgressing(counters: counters, sockets: sockets, what: "the slow recipients' backlog") { _ in
                    slowIndexes.allSatisfy { index in recipientLedgers[index].withLock { $0.erased == $0.stored } }
                        && slowIndexes.reduce(0) { total, index in total + recipientLedgers[index].withLock { $0.stored } } >= slowBacklog
                }
            }

            let remaining = await relayRemaining(users: senders + recipients + slow)
            let peak = await target.peakResidentBytes()
            let rssAtEnd = await target.residentBytes()
            var cluster: ClusterFigures?
            if let clusterBefore, let clusterAfter {
                cluster = await ClusterFigures.finish(target, before: clusterBefore, after: clusterAfter)
            }
            await closeAll(sockets)
            sockets = []

            return report(start: start, end: end, cpu: (cpuBefore, cpuAfter), own: ownAfter - ownBefore, samples: samples,
                          senders: senderLedgers.map(\.current), ledgers: recipientLedgers.map(\.current),
                          destinations: destinations, body: body, remaining: remaining, peak: peak, rssAtEnd: rssAtEnd,
                          idle: idle, slowBacklog: slowBacklog, complete: sendingEnded && answered && drained && slowDrained,
                          counts: counters.current, cluster: cluster, cryptoCost: cryptoCost, oneTimeStarts: oneTimeStarts, wake: wake)
        } catch {
            _ = await wakeLoad?.stop()
            if let wake = s.wake { try? await wake.standin.end() }
            gate.open(nil)
            for socket in sockets { socket.abandon() }
            throw error
        }
    }

    /// The pacing of sender `index`: open loops are staggered so the senders do not fire together.
    private func pacing(_ index: Int) -> Pacing {
        guard let rate = settings.rate else { return .closed(window: settings.window) }
        let interval = UInt64(1e9 * Double(settings.senders) / rate)
        return .open(interval: interval, offset: interval * UInt64(index) / UInt64(settings.senders))
    }

    private func describePacing() -> String {
        var parts: [String] = []
        if let rate = settings.rate { parts.append("open loop, \(Int(rate)) msg/s offered") } else { parts.append("closed loop, window \(settings.window) per sender") }
        if let duration = settings.duration { parts.append("\(duration) s") }
        if let messages = settings.messages { parts.append("\(messages) messages") }
        return parts.joined(separator: ", ")
    }

    /// Signs in and subscribes the idle users, measuring the relay's RSS before and after.
    private func openIdle(prefix: String, counters: Counters, sockets: inout [Socket]) async throws -> (before: Int?, after: Int?, opened: Int) {
        let count = settings.subscribers
        status("signing in \(count) idle subscribers")
        let users = try await Users.signIn((0..<count).map { "\(prefix)-i\(String(format: "%06d", $0))" }, target: target,
                                           publish: nil, concurrency: 32)
        try await Task.sleep(nanoseconds: 1_000_000_000)
        let before = await target.residentBytes()
        status("opening \(count) idle sockets")
        // In batches, so the relay's accept queue is never the thing measured.
        var opened = 0
        for batch in stride(from: 0, to: count, by: 200) {
            let batchEnd = min(batch + 200, count)
            for (index, user) in users[batch..<batchEnd].enumerated() {
                sockets.append(IdleSubscriber.start(user, http: target.idleHTTP(batch + index), counters: counters))
            }
            guard await waitUntil(seconds: 30, { let c = counters.current; return c.ready >= batchEnd || c.failure != nil }) else {
                throw BenchFailure.failed("only \(counters.current.ready) of \(batchEnd) idle sockets got their ready frame within 30 s")
            }
            try await checkSockets(sockets, counters: counters)
            opened = batchEnd
        }
        try await Task.sleep(nanoseconds: 1_000_000_000)
        let after = await target.residentBytes()
        status("\(opened) idle sockets open; relay RSS \(Format.bytes(before)) → \(Format.bytes(after))")
        return (before, after, opened)
    }

    /// Fails the run if a socket failed or the relay closed one, or the relay died.
    private func checkSockets(_ sockets: [Socket], counters: Counters) async throws {
        if let failure = counters.current.failure { throw BenchFailure.failed(failure) }
        if let dead = target.deadNode {
            throw BenchFailure.failed("the relay process\(target.nodes.count > 1 ? " of node \(dead.number)" : "") died:\n\(dead.node.spawned?.logTail() ?? "")")
        }
        if let ended = sockets.lazy.compactMap(\.unexpectedEnd).first {
            throw BenchFailure.failed("a socket ended during the run: \(ended)")
        }
    }

    /// Waits until `done` holds, as long as the counts keep moving: stops after `drainTimeout`
    /// seconds without any change (false), or at a socket failure (throws).
    private func waitProgressing(counters: Counters, sockets: [Socket], what: String,
                                 _ done: @escaping (LiveCounts) -> Bool) async throws -> Bool {
        var last = counters.current
        var lastChange = Monotonic.now()
        while true {
            let counts = counters.current
            if let failure = counts.failure { throw BenchFailure.failed(failure) }
            if done(counts) { return true }
            let now = Monotonic.now()
            if counts.sent != last.sent || counts.answered != last.answered || counts.erased != last.erased
                || counts.delivered != last.delivered || counts.deliveredSlow != last.deliveredSlow {
                last = counts
                lastChange = now
            } else if Monotonic.seconds(lastChange, now) > settings.drainTimeout {
                Console.error("mailslot-bench: nothing moved for \(Int(settings.drainTimeout)) s while waiting for \(what)")
                return false
            }
            try await checkSockets(sockets, counters: counters)
            try await Task.sleep(nanoseconds: 10_000_000)
        }
    }

    /// Closes every socket cleanly, then waits (bounded) for them to end.
    private func closeAll(_ sockets: [Socket]) async {
        await withTaskGroup(of: Void.self) { group in
            for socket in sockets { group.addTask { await socket.close() } }
        }
        await withTaskGroup(of: Void.self) { group in
            for socket in sockets { group.addTask { await socket.finish(within: 10) } }
        }
    }

    /// How many messages the relay still holds: its `mailslot_messages_pending` gauge (spawned
    /// relay: all of them are this run's), and a listing of every mailbox of this run.
    private func relayRemaining(users: [BenchUser]) async -> (gauge: Int?, listed: Int?) {
        var gauge: Int?
        // A gauge may be updated a moment after the erasure: give it a few seconds to reach 0. (A
        // remote relay's gauge counts other users' messages too: read once, for the report only.)
        for _ in 0..<(target.ownsStore ? 30 : 1) {
            guard let value = await target.metrics()?["mailslot_messages_pending"] else { break }
            gauge = Int(value)
            if value == 0 { break }
            try? await Task.sleep(nanoseconds: 100_000_000)
        }
        let listed = try? await boundedMap(users, limit: 8) { user in
            try await http.pendingIDs(of: user.uid, session: user.session).count
        }.reduce(0, +)
        return (gauge, listed)
    }

    // MARK: The report

    private func report(start: UInt64, end: UInt64, cpu: (Double?, Double?), own: Double, samples: [Sample],
                        senders: [SenderLedger], ledgers: [RecipientLedger], destinations: [Destination], body: MessageBody,
                        remaining: (gauge: Int?, listed: Int?), peak: Int?, rssAtEnd: Int?,
                        idle: (before: Int?, after: Int?, opened: Int)?, slowBacklog: Int, complete: Bool,
                        counts: LiveCounts, cluster: ClusterFigures?, cryptoCost: CryptoCost?, oneTimeStarts: Int,
                        wake: WakeFigures?) -> RunReport {
        let s = settings
        // Lost: stored by the relay (a 2xx answer) and never delivered to the recipient it was for.
        var lost = 0, storedTotal = 0, storedNormal = 0
        for (index, sender) in senders.enumerated() {
            for sequence in sender.stored.members {
                storedTotal += 1
                let destination = (index + sequence) % destinations.count
                if !destinations[destination].slow { storedNormal += 1 }
                if ledgers[destination].entries[BenchID.key(sender: index, sequence: sequence)] == nil { lost += 1 }
            }
        }
        // Delivered without a 2xx answer to its send: only possible if an answer went missing.
        var unanswered = 0, unacked = 0
        for ledger in ledgers {
            for (key, entry) in ledger.entries {
                let (sender, sequence) = BenchID.split(key)
                if sender >= senders.count || !senders[sender].stored.contains(sequence) { unanswered += 1 }
                if !entry.erasedNow { unacked += 1 }
            }
        }
        let normal = ledgers.prefix(s.recipients)
        var receive = Latencies.latencies(), erased = Latencies.latencies(), created = Latencies.latencies()
        for ledger in normal {
            receive.add(ledger.receiveLatency)
            erased.add(ledger.erasedLatency)
        }
        for sender in senders { created.add(sender.createLatency) }
        // No run retries a send, so nothing is created twice: every reappearance is a duplicate.
        let duplicates = ledgers.reduce(0) { $0 + $1.duplicates + $1.reappeared.values.reduce(0, +) }
        let redeliveries = ledgers.reduce(0) { $0 + $1.redeliveries }
        var rejected: [String: Int] = [:], refused: [String: Int] = [:]
        for ledger in ledgers { rejected.merge(ledger.rejected, uniquingKeysWith: +) }
        for sender in senders { refused.merge(sender.refusals, uniquingKeysWith: +) }
        let unexpected = (senders.flatMap(\.unexpected) + ledgers.flatMap(\.unexpected))
        let identicalRetries = senders.reduce(0) { $0 + $1.identicalRetries }
        let doubleAnswers = senders.reduce(0) { $0 + $1.doubleAnswers }
        let written = senders.reduce(0) { $0 + $1.written }
        let deliveredNormal = normal.reduce(0) { $0 + $1.stored }
        let lastDelivery = normal.map(\.lastStored).max() ?? end
        let elapsed = Monotonic.seconds(start, max(start + 1, lastDelivery))
        let deliveredPerSecond = Double(deliveredNormal) / elapsed
        let relayCPU: Double? = cpu.0.flatMap { before in cpu.1.map { ($0 - before) * 1e6 / Double(max(1, storedTotal)) } }
        let ownCPU = own * 1e6 / Double(max(1, storedTotal))
        // Client CPU: the senders' seal calls per message written, the recipients' opens per message checked.
        let opened = ledgers.reduce(0) { $0 + $1.opened }
        let sealCPU: Double? = s.mode == .e2e && written > 0 ? Double(senders.reduce(0) { $0 + $1.sealNanoseconds }) / 1000 / Double(written) : nil
        let openCPU: Double? = s.mode == .e2e && opened > 0 ? Double(ledgers.reduce(0) { $0 + $1.openNanoseconds }) / 1000 / Double(opened) : nil
        let clientCPU: Double? = sealCPU.flatMap { seal in openCPU.map { seal + $0 } }
        let remainingCount = target.ownsStore ? (remaining.gauge ?? remaining.listed) : remaining.listed
        let perIdle: Double? = idle.flatMap { idle in
            guard let before = idle.before, let after = idle.after, idle.opened > 0 else { return nil }
            return Double(after - before) / Double(idle.opened)
        }
        let receiveSummary = LatencySummary(receive), erasedSummary = LatencySummary(erased), createdSummary = LatencySummary(created)

        var problems: [String] = []
        if lost > 0 { problems.append("\(lost) messages lost") }
        if duplicates > 0 { problems.append("\(duplicates) messages duplicated") }
        if let remainingCount, remainingCount != 0 { problems.append("the relay still holds \(remainingCount) messages") }
        if remaining.gauge == nil && remaining.listed == nil { problems.append("could not learn how many messages the relay still holds") }
        if let listed = remaining.listed, listed != 0, remainingCount != listed { problems.append("\(listed) messages are still listed in this run's mailboxes") }
        if !refused.isEmpty { problems.append("the relay refused \(refused.values.reduce(0, +)) sends (\(refused.map { "\($0.key) \($0.value)" }.sorted().joined(separator: ", ")))") }
        if !rejected.isEmpty { problems.append("recipients rejected \(rejected.values.reduce(0, +)) messages (\(rejected.map { "\($0.key) \($0.value)" }.sorted().joined(separator: ", ")))") }
        if unanswered > 0 { problems.append("\(unanswered) messages were delivered whose send was never answered") }
        if unacked > 0 { problems.append("\(unacked) acks were never confirmed with acked") }
        if written != counts.answered { problems.append("\(written - counts.answered) sends were never answered") }
        if identicalRetries + doubleAnswers > 0 { problems.append("\(identicalRetries + doubleAnswers) sends were answered as retries or twice") }
        if !unexpected.isEmpty { problems.append("unexpected frames: \(Set(unexpected).sorted().joined(separator: "; "))") }
        problems += wake?.problems ?? []
        if !complete && problems.isEmpty { problems.append("the run did not drain") }

        // Human summary.
        var lines: [String] = []
        let pacing = s.rate.map { "open loop at \(Int($0)) msg/s" } ?? "closed loop, window \(s.window)"
        lines.append("mailslot-bench \(s.mode.rawValue) mode\(s.mode == .e2e ? " (envelope \(s.envelope.rawValue))" : "") — \(target.description)")
        lines.append("  \(s.senders) senders → \(s.recipients) recipients\(s.slowRecipients > 0 ? " + \(s.slowRecipients) slow" : "")"
                     + "\(s.subscribers > 0 ? ", \(s.subscribers) idle subscribers" : ""); \(body.bodyBytes) B bodies in \(body.envelopeBytes) B envelopes; \(pacing)")
        lines.append(String(format: "  %d sent, %d stored, %d delivered and erased in %.2f s: %.0f msg/s delivered",
                            written, storedTotal, deliveredNormal, elapsed, deliveredPerSecond))
        lines.append("  latency (ms)              p50       p99     p99.9       max")
        lines.append("  " + receiveSummary.row("send → delivery"))
        lines.append("  " + erasedSummary.row("send → acked (erased)"))
        lines.append("  " + createdSummary.row("send → sent (stored)"))
        lines.append("  lost \(lost), duplicated \(duplicates), redelivered \(redeliveries), refused \(refused.values.reduce(0, +)), rejected \(rejected.values.reduce(0, +)), relay remaining \(remainingCount.map(String.init) ?? "unknown")"
                     + " (\(remaining.gauge != nil ? "gauge \(remaining.gauge!)" : "no gauge"), listed \(remaining.listed.map(String.init) ?? "n/a"))")
        lines.append("  relay: CPU \(Format.optional(relayCPU, "%.1f")) µs/msg, peak RSS \(Format.bytes(peak)), RSS at end \(Format.bytes(rssAtEnd)); bench CPU \(String(format: "%.1f", ownCPU)) µs/msg")
        if s.mode == .e2e {
            lines.append("  client CPU per message (\(s.envelope.rawValue)): seal \(Format.optional(sealCPU, "%.1f")) µs + open \(Format.optional(openCPU, "%.1f")) µs"
                         + " = \(Format.optional(clientCPU, "%.1f")) µs"
                         + (s.envelope == .v2 ? "; \(oneTimeStarts) of \(s.senders * destinations.count) ratchets started with a one-time prekey" : ""))
        }
        if let cost = cryptoCost {
            lines.append(String(format: "  in-process seal+open CPU (µs/msg, median of %d alternating batches of %d): v1 seal %.1f open %.1f; v2 seal %.1f open %.1f;",
                                cost.batches, cost.messages, cost.v1Seal, cost.v1Open, cost.v2Seal, cost.v2Open)
                         + String(format: " v2 seal+open with a ratchet turn every message %.1f, every 50 messages %.1f", cost.v2TurnEveryMessage, cost.v2TurnEvery50))
        }
        if let idle {
            lines.append("  idle connections: \(idle.opened), relay RSS \(Format.bytes(idle.before)) → \(Format.bytes(idle.after)): \(Format.optional(perIdle, "%.0f")) B per connection")
        }
        if s.slowRecipients > 0 {
            lines.append("  slow recipients: \(slowBacklog) messages waited for them; relay RSS as their backlog grew:")
            for sample in samples {
                lines.append(String(format: "    %5.1f s  backlog %8d  rss %@", sample.time, sample.counts.createdSlow - sample.counts.deliveredSlow,
                                    Format.bytes(sample.residentBytes)))
            }
        }
        lines += wake?.lines ?? []
        let clusterReport = cluster?.report(target: target, senders: s.senders, recipients: s.recipients + s.slowRecipients,
                                            messages: storedTotal, seconds: Monotonic.seconds(start, end))
        lines += clusterReport?.lines ?? []
        let machine = ProcessStats.machine()
        lines.append("  machine: " + machine.map { "\($0.0) \($0.1)" }.joined(separator: "; "))
        lines.append(problems.isEmpty ? "  PASS: nothing lost, nothing duplicated, nothing left on the relay" : "  FAIL: " + problems.joined(separator: "; "))

        let clientJSON: JSON = s.mode == .e2e ? .object([("seal", .number(sealCPU)), ("open", .number(openCPU)), ("total", .number(clientCPU))]) : .null
        // Several nodes: theirs and the database's figures after the settings that name the relay.
        var members: [(String, JSON)] = [("mode", .string(s.mode.rawValue)), ("envelope", s.mode == .e2e ? .string(s.envelope.rawValue) : .null),
                                         ("relay", .string(target.isSpawned ? "spawned" : http.base))]
        members += clusterReport?.json ?? []
        members += [
            ("senders", .int(s.senders)), ("recipients", .int(s.recipients)), ("slow_recipients", .int(s.slowRecipients)),
            ("subscribers", .int(s.subscribers)),
            ("size", .int(s.size)), ("body_bytes", .int(body.bodyBytes)), ("envelope_bytes", .int(body.envelopeBytes)),
            ("rate", .number(s.rate)), ("window", s.rate == nil ? .int(s.window) : .null),
            ("duration_s", .number(s.duration)), ("messages_requested", .int(s.messages)),
            ("messages", .int(storedNormal)), ("sent", .int(written)), ("stored", .int(storedTotal)), ("delivered", .int(deliveredNormal)),
            ("elapsed_s", .number(elapsed)), ("delivered_per_sec", .number(deliveredPerSecond)),
            ("latency_ms", .object([("receive", receiveSummary.json), ("erased", erasedSummary.json), ("created", createdSummary.json)])),
            ("lost", .int(lost)), ("duplicated", .int(duplicates)), ("redelivered", .int(redeliveries)),
            ("refused", .object(refused.sorted { $0.key < $1.key }.map { ($0.key, .int($0.value)) })),
            ("rejected", .object(rejected.sorted { $0.key < $1.key }.map { ($0.key, .int($0.value)) })),
            ("relay_remaining", .int(remainingCount)), ("relay_remaining_gauge", .int(remaining.gauge)), ("relay_remaining_listed", .int(remaining.listed)),
            ("relay_peak_rss_bytes", .int(peak)), ("relay_rss_end_bytes", .int(rssAtEnd)),
            ("relay_cpu_us_per_msg", .number(relayCPU)), ("bench_cpu_us_per_msg", .number(ownCPU)),
            ("client_cpu_us_per_msg", clientJSON),
            ("one_time_prekey_sessions", s.mode == .e2e && s.envelope == .v2 ? .int(oneTimeStarts) : .null), ("crypto_cpu_us_per_msg", cryptoCost?.json ?? .null),
            ("rss_per_idle_connection_bytes", .number(perIdle)),
            ("idle_rss_before_bytes", .int(idle?.before)), ("idle_rss_after_bytes", .int(idle?.after)),
            ("slow_backlog", s.slowRecipients > 0 ? .int(slowBacklog) : .null),
            ("push", wake?.json ?? .null),
            ("rss_samples", .array(samples.map { sample in
                .object([("t", .number((sample.time * 10).rounded() / 10)), ("rss_bytes", .int(sample.residentBytes)),
                         ("stored", .int(sample.counts.created + sample.counts.createdSlow)), ("erased", .int(sample.counts.erased)),
                         ("slow_backlog", .int(sample.counts.createdSlow - sample.counts.deliveredSlow))])
            })),
            ("machine", .object(machine.map { ($0.0, .string($0.1)) })),
            ("ok", .bool(problems.isEmpty)),
            ("problems", .array(problems.map(JSON.string))),
        ]
        let json = JSON.object(members)
        return RunReport(summary: lines.joined(separator: "\n"), json: json, problems: problems, deliveryP99: receiveSummary.p99)
    }
}
