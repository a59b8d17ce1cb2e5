import Foundation
import MailslotWire

/// One `mailslot-bench group` run (docs/design/groups.md §10): members signed in with v2 key
/// bundles, one group state, the senders' first messages (ratchets started) before the clock, then
/// group messages at the offered rate, one in flight at a time, each sealed for every other member
/// and sent as one `POST /v1/messages`; then the offline members' backlog, the checks and the report.
struct GroupRun {
    let settings: GroupSettings
    let target: RelayTarget

    private var http: RelayHTTP { target.http }

    private func status(_ text: String) { if !settings.quiet { Console.error("mailslot-bench: \(text)") } }

    /// What the bench learned of one group message.
    private struct Sent {
        /// Which sender (index into the members).
        let sender: Int
        /// Wall time of sealing the M − 1 copies (ratchet steps and envelopes on the sealing threads,
        /// then base64url), nanoseconds.
        let sealNanoseconds: UInt64
        /// When the request was started (``Monotonic``).
        let written: UInt64
        /// From then to the answer (the HTTP request's time as the client sees it), nanoseconds.
        let answerNanoseconds: UInt64
        /// The relay's admission-to-commit time of this batch (the histogram's change), seconds;
        /// nil when another batch changed the histogram too (a relay others use).
        let commitSeconds: Double?
        /// The relay's `created_at` of the batch (its admission), Unix milliseconds.
        let createdAt: Int64?
        /// Entries the relay stored as new.
        let stored: Int
        /// Refused entries, by problem code.
        let refused: [String: Int]
    }

    func run() async throws -> RunReport {
        let s = settings
        let prefix = Users.runPrefix()
        let uids = (0..<s.members).map { "\(prefix)-m\(String(format: "%04d", $0))" }
        let rssStart = await target.residentBytes()

        status("signing in \(s.members) members and publishing their key bundles")
        let setupStart = Monotonic.now()
        let users = try await Users.signIn(uids, target: target, publish: .v2)
        let bundles = try await Users.bundles(of: uids, reader: users[0], http: http)
        let setupSeconds = Monotonic.seconds(setupStart, Monotonic.now())
        let state: GroupState
        do {
            // uids are made in ascending order, as a state's members must be (spec/groups.md §1).
            state = try GroupState(id: GroupID.random(), version: 1, previous: GroupState.noPrevious, name: "bench",
                                   members: uids, admins: [uids[0]])
        } catch {
            throw BenchFailure.failed("cannot form the group's state: \(error)")
        }
        let reference = GroupReference(state)
        let text = String(repeating: "x", count: s.size)

        // The senders' first messages plus as many as keep about 50,000 copies for the checks.
        let keepBelow = s.senders + max(1, 50_000 / (s.members - 1))
        let ledgers = (0..<s.members).map { _ in Locked(GroupMemberLedger()) }
        let onlineCount = s.onlineCount

        status("connecting \(onlineCount) online members")
        var sockets: [Socket] = []
        for index in 0..<onlineCount {
            sockets.append(GroupMemberSocket.start(user: users[index], http: http, keepBelow: keepBelow, ledger: ledgers[index]))
        }
        defer { for socket in sockets { socket.abandon() } }
        guard await waitUntil(seconds: max(30, s.drainTimeout), interval: 0.05, { ledgers[0..<onlineCount].allSatisfy { $0.current.ready } }) else {
            let ended = sockets.compactMap(\.unexpectedEnd).first ?? "no ready frame"
            throw BenchFailure.failed("the online members' subscriptions did not all become ready: \(ended)")
        }

        // Batches of a 1,000-member group are 1.5 MB each way through a debug relay: a longer timeout.
        let batchHTTP = RelayHTTP(base: http.base, timeout: max(10, s.drainTimeout))
        // Each sender's ratchets with every member (nil until its first message starts them).
        var lastHistogram: (sum: Double, count: Int)?
        var histogramReads = 0
        var ratchets = [[Ratchet?]](repeating: [Ratchet?](repeating: nil, count: s.members), count: s.senders)
        var sent: [Sent] = []
        var problems: [String] = []

        /// Seals message `number` from `sender` to every other member, sends it, waits for the
        /// answer and reads the commit time.
        func send(number: Int, sender: Int) async throws -> Sent {
            let id = BenchID.make(sender: sender, sequence: number, time: 0)
            let author = users[sender]
            let message = ChatMessage(type: .text, sender: Sender(id: author.uid), payload: Payload(text: text),
                                      timestamp: Int64(WallClock.milliseconds()), group: reference)
            var body = "{\"entries\":["
            body.reserveCapacity(s.members * 1600)
            let sealStart = Monotonic.now()
            let sealedCopies = try GroupRun.seal(message, id: id, author: author, sender: sender, members: s.members,
                                                 uids: uids, bundles: bundles, ratchets: ratchets[sender])
            var first = true
            for copy in sealedCopies {
                ratchets[sender][copy.member] = copy.ratchet
                if !first { body += "," }
                first = false
                // Values are uids, ids and base64url: nothing to escape.
                body += "{\"to\":\"\(copy.uid)\",\"id\":\"\(id)\",\"envelope\":\"\(Base64URL.encode(copy.envelope))\",\"key_id\":\"\(copy.keyID)\"}"
            }
            let sealed = Monotonic.now()
            body += "]}"
            // One read of the histogram per batch: the last batch's reading is this one's start
            // (the bench's batches go one at a time; another client's would show as a count of 2).
            var before = lastHistogram
            if before == nil { before = await batchHistogram() }
            let written = Monotonic.now()
            // `POST /v1/messages`, as the client library sends a group message: a WebSocket
            // `send_many` is held to the ordinary frame size (spec/protocol.md §8.3), far below
            // a batch of hundreds of copies.
            let reply = try await batchHTTP.call("POST", "/v1/messages", bearer: author.session, body: Data(body.utf8))
            let answered = Monotonic.now()
            let after = await batchHistogram()
            lastHistogram = after
            histogramReads += 1
            guard reply.status == 200, let results = try? JSONDecoder().decode(BatchResponse.self, from: reply.body).results else {
                let code = (try? JSONDecoder().decode(Problem.self, from: reply.body)).map { " \($0.code.rawValue)" } ?? ""
                throw BenchFailure.failed("the send to many of message \(number) was answered HTTP \(reply.status)\(code)")
            }
            var stored = 0
            var refused: [String: Int] = [:]
            for result in results {
                if let problem = result.problem { refused[problem.code.rawValue, default: 0] += 1 } else if result.created == true { stored += 1 }
            }
            var commit: Double?
            if let before, let after, after.count - before.count == 1 { commit = after.sum - before.sum }
            return Sent(sender: sender, sealNanoseconds: sealed - sealStart, written: written, answerNanoseconds: answered - written,
                        commitSeconds: commit, createdAt: results.first?.message.flatMap { WallClock.parse($0.createdAt) },
                        stored: stored, refused: refused)
        }

        // Before the clock: each sender's first message starts its M − 1 ratchets.
        status("first sends: \(s.senders) senders, \(s.members - 1) copies each")
        for sender in 0..<s.senders { sent.append(try await send(number: sender, sender: sender)) }

        // What one read of /metrics costs the relay, to take the clock's reads out of its CPU per copy.
        let calibrationReads = 20
        let calibrationStart = await target.cpuSeconds()
        for _ in 0..<calibrationReads { _ = await batchHistogram() }
        let calibrationEnd = await target.cpuSeconds()
        let cpuPerRead = calibrationStart.flatMap { start in calibrationEnd.map { max(0, $0 - start) / Double(calibrationReads) } }

        status("sending \(s.rate) group messages per second for \(s.seconds) s")
        let cpuBefore = await target.cpuSeconds()
        let readsBefore = histogramReads
        let clockStart = Monotonic.now()
        let end = clockStart + UInt64(s.seconds * 1e9)
        let interval = 1e9 / s.rate
        var late = 0
        var measured = 0
        while measured < (s.messages ?? Int.max) {
            let due = clockStart + UInt64(Double(measured) * interval)
            guard due < end else { break }
            if Monotonic.now() > due + 1_000_000 { late += 1 } else { try await Monotonic.sleep(until: due) }
            let number = s.senders + measured
            sent.append(try await send(number: number, sender: number % s.senders))
            measured += 1
            if let dead = target.deadNode { throw BenchFailure.failed("relay node \(dead.number) exited during the run") }
        }
        let sendSeconds = Monotonic.seconds(clockStart, Monotonic.now())
        // Over the schedule's span at least: the last message is due at (n − 1)/R and answered soon after.
        let achieved = measured > 0 ? Double(measured) / max(sendSeconds, Double(measured) / s.rate) : 0
        let total = sent.count

        // Every online member gets every message but its own.
        func expected(_ member: Int) -> Int { sent.reduce(0) { $0 + ($1.sender == member ? 0 : 1) } }
        let onlineDone = await waitUntil(seconds: s.drainTimeout, interval: 0.01) {
            (0..<onlineCount).allSatisfy { ledgers[$0].current.arrivals.count >= expected($0) }
        }
        let cpuAfter = await target.cpuSeconds()
        let rssAfter = await target.residentBytes()
        if !onlineDone { problems.append("online members did not all receive every message within \(Int(s.drainTimeout)) s") }

        // After the clock: the offline members connect and receive their backlog, 16 at a time.
        let offline = Array(onlineCount..<s.members)
        let catchUpStart = Monotonic.now()
        if !offline.isEmpty { status("\(offline.count) offline members receive their backlog") }
        let caughtUp = try await boundedMap(offline, limit: 16) { member -> Bool in
            let socket = GroupMemberSocket.start(user: users[member], http: http, keepBelow: keepBelow, ledger: ledgers[member])
            let done = await waitUntil(seconds: s.drainTimeout, interval: 0.01) {
                let ledger = ledgers[member].current
                return ledger.arrivals.count >= total && ledger.acked >= total
            }
            await socket.close()
            await socket.finish(within: 5)
            return done
        }
        let catchUpSeconds = Monotonic.seconds(catchUpStart, Monotonic.now())
        if caughtUp.contains(false) { problems.append("\(caughtUp.filter { !$0 }.count) offline members did not receive their backlog within \(Int(s.drainTimeout)) s") }
        let rssPeak = await target.peakResidentBytes()

        // Checks: every copy kept opens for its member, from its sender, for this group.
        status("opening and checking the copies received")
        let senderOf = sent.map(\.sender), groupID = state.id
        let verified = try await boundedMap(Array(0..<s.members), limit: 2) { member -> Opened in
            Self.open(ledgers[member].current.kept, member: users[member], users: users, sent: senderOf, group: groupID, text: text)
        }
        let opened = verified.reduce(0) { $0 + $1.opened }
        let openFailures = verified.flatMap(\.failed)
        problems += openFailures.prefix(5)

        // Figures.
        var seal = Latencies.latencies(), answer = Latencies.latencies(), commit = Latencies.latencies()
        var firstSeal = Latencies.latencies(), firstAnswer = Latencies.latencies(), firstCommit = Latencies.latencies()
        var commitToDelivery = Latencies.latencies(), sendToDelivery = Latencies.latencies()
        var commitUnknown = 0
        var refusals: [String: Int] = [:]
        var storedCopies = 0
        for (number, message) in sent.enumerated() {
            let isFirst = number < s.senders
            if isFirst { firstSeal.record(from: 0, to: message.sealNanoseconds) } else { seal.record(from: 0, to: message.sealNanoseconds) }
            if isFirst { firstAnswer.record(from: 0, to: message.answerNanoseconds) } else { answer.record(from: 0, to: message.answerNanoseconds) }
            if let seconds = message.commitSeconds {
                let nanoseconds = UInt64(max(0, seconds) * 1e9)
                if isFirst { firstCommit.record(from: 0, to: nanoseconds) } else { commit.record(from: 0, to: nanoseconds) }
            } else {
                commitUnknown += 1
            }
            storedCopies += message.stored
            for (code, count) in message.refused { refusals[code, default: 0] += count }
        }
        for member in 0..<onlineCount {
            for arrival in ledgers[member].current.arrivals where arrival.message >= s.senders && arrival.message < total {
                let message = sent[arrival.message]
                sendToDelivery.record(from: message.written, to: arrival.monotonic)
                // The relay stamps created_at (whole milliseconds, rounded down) at admission; with the
                // batch's admission-to-commit time it gives the commit, at most 1 ms early.
                if let createdAt = message.createdAt, let seconds = message.commitSeconds {
                    let committed = Double(createdAt) + seconds * 1000
                    _ = commitToDelivery.record(UInt64(max(1, (arrival.wallMilliseconds - committed) * 1000)))
                }
            }
        }
        let copiesPerMessage = s.members - 1
        let expectedCopies = total * copiesPerMessage
        if storedCopies != expectedCopies { problems.append("the relay stored \(storedCopies) of \(expectedCopies) copies") }
        if !refusals.isEmpty { problems.append("entries refused: " + refusals.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")) }
        var received = 0, missing = 0, repeats = 0
        var unexpected: [String] = []
        for member in 0..<s.members {
            let ledger = ledgers[member].current
            received += ledger.arrivals.count
            missing += max(0, expected(member) - ledger.arrivals.count)
            repeats += ledger.repeats
            unexpected += ledger.unexpected
        }
        if missing > 0 { problems.append("\(missing) copies never reached their member") }
        if repeats > 0 { problems.append("\(repeats) copies delivered twice on one socket") }
        if !unexpected.isEmpty { problems.append("unexpected frames: " + unexpected.prefix(3).joined(separator: "; ")) }
        for socket in sockets { if let ended = socket.unexpectedEnd { problems.append("a member's socket ended: \(ended)"); break } }
        let onlineReceived = (0..<onlineCount).reduce(0) { $0 + ledgers[$1].current.arrivals.count }
        let onlineExpected = (0..<onlineCount).reduce(0) { $0 + expected($1) }
        let measuredCopies = measured * copiesPerMessage
        let clockReads = histogramReads - readsBefore
        let relayCPU = cpuBefore.flatMap { before in
            cpuAfter.map { max(0, $0 - before - Double(clockReads) * (cpuPerRead ?? 0)) }
        }
        let cpuPerCopy = relayCPU.map { measuredCopies > 0 ? $0 * 1e6 / Double(measuredCopies) : 0 }

        for socket in sockets { await socket.close() }
        for socket in sockets { await socket.finish(within: 5) }

        let sealSummary = LatencySummary(seal), answerSummary = LatencySummary(answer), commitSummary = LatencySummary(commit)
        let firstSealSummary = LatencySummary(firstSeal), firstAnswerSummary = LatencySummary(firstAnswer)
        let firstCommitSummary = LatencySummary(firstCommit)
        let deliverySummary = LatencySummary(commitToDelivery), sendDeliverySummary = LatencySummary(sendToDelivery)
        var lines: [String] = []
        lines.append("mailslot-bench group — \(target.description)")
        lines.append("  \(s.members) members (\(onlineCount) online), \(s.senders) senders in turn, \(copiesPerMessage) copies a message, "
                     + "text of \(s.size) B; \(measured) messages in \(String(format: "%.2f", sendSeconds)) s "
                     + "(offered \(s.rate)/s, achieved \(String(format: "%.2f", achieved))/s, \(late) late)")
        lines.append(String(format: "  set-up: %.2f s (sign-ins, key bundles published and fetched)", setupSeconds))
        lines.append("  ms                       p50       p99     p99.9       max")
        lines.append(commitSummary.row("relay commit"))
        lines.append(sealSummary.row("seal, \(GroupRun.sealThreads(copies: copiesPerMessage)) threads"))
        lines.append(answerSummary.row("send → answer"))
        lines.append(deliverySummary.row("commit → online"))
        lines.append(sendDeliverySummary.row("send → online"))
        lines.append(firstCommitSummary.row("first: relay commit"))
        lines.append(firstSealSummary.row("first: seal+ratchets"))
        lines.append(firstAnswerSummary.row("first: send → answer"))
        if commitUnknown > 0 { lines.append("  \(commitUnknown) batches without a commit time (the relay's histogram moved by more than one batch)") }
        lines.append("  relay CPU per copy: \(Format.optional(cpuPerCopy, "%.1f")) µs (deliveries and acks included; "
                     + "\(clockReads) reads of /metrics at \(Format.optional(cpuPerRead.map { $0 * 1000 }, "%.2f")) ms each taken out); RSS \(Format.bytes(rssStart)) before set-up, "
                     + "\(Format.bytes(rssAfter)) after the clock, peak \(Format.bytes(rssPeak))")
        lines.append(String(format: "  offline members' backlog: %d members in %.2f s", offline.count, catchUpSeconds))
        lines.append("  copies received \(received) (online \(onlineReceived) of \(onlineExpected)), opened and checked \(opened)")
        lines.append("  machine: " + ProcessStats.machine().map { "\($0.0) \($0.1)" }.joined(separator: "; "))
        lines.append(problems.isEmpty ? "  PASS: every member got every message once, every copy checked opened" : "  FAIL: " + problems.joined(separator: "; "))
        let json = JSON.object([
            ("command", .string("group")), ("members", .int(s.members)), ("senders", .int(s.senders)), ("online", .int(onlineCount)),
            ("size", .int(s.size)), ("rate_offered", .number(s.rate)), ("messages", .int(measured)), ("send_s", .number(sendSeconds)),
            ("rate_achieved", .number(achieved)), ("late", .int(late)),
            ("copies_per_message", .int(copiesPerMessage)), ("setup_s", .number(setupSeconds)),
            ("commit_ms", commitSummary.json), ("seal_ms", sealSummary.json),
            ("seal_threads", .int(GroupRun.sealThreads(copies: copiesPerMessage))), ("send_to_answer_ms", answerSummary.json),
            ("commit_to_online_delivery_ms", deliverySummary.json), ("send_to_online_delivery_ms", sendDeliverySummary.json),
            ("first_send", .object([("commit_ms", firstCommitSummary.json), ("seal_ms", firstSealSummary.json),
                                    ("send_to_answer_ms", firstAnswerSummary.json)])),
            ("commit_unknown", .int(commitUnknown)),
            ("relay_cpu_us_per_copy", .number(cpuPerCopy)), ("relay_cpu_ms_per_metrics_read", .number(cpuPerRead.map { $0 * 1000 })), ("relay_rss_start_bytes", .int(rssStart)),
            ("relay_rss_after_bytes", .int(rssAfter)), ("relay_rss_peak_bytes", .int(rssPeak)),
            ("offline", .int(offline.count)), ("offline_catch_up_s", .number(catchUpSeconds)),
            ("copies_stored", .int(storedCopies)), ("copies_expected", .int(expectedCopies)),
            ("online_received", .int(onlineReceived)), ("online_expected", .int(onlineExpected)),
            ("received", .int(received)), ("missing", .int(missing)), ("repeats", .int(repeats)), ("opened", .int(opened)),
            ("ok", .bool(problems.isEmpty)), ("problems", .array(problems.map(JSON.string))),
        ])
        return RunReport(summary: lines.joined(separator: "\n"), json: json, problems: problems)
    }

    /// The relay's `mailslot_batch_seconds` sum and count now; nil when it does not serve them.
    private func batchHistogram() async -> (sum: Double, count: Int)? {
        guard let metrics = await target.metrics(), let sum = metrics["mailslot_batch_seconds_sum"],
              let count = metrics["mailslot_batch_seconds_count"] else { return nil }
        return (sum, Int(count))
    }

    /// Opens `kept` (message number → envelope) for `member` as its client would: in each sender's
    /// order, the ratchet accepted from the first message and advanced by each, every body signed
    /// by the sender, for this group, with the text sent. Returns how many opened and what failed.
    private static func open(_ kept: [Int: String], member: BenchUser, users: [BenchUser], sent: [Int],
                             group: GroupID, text: String) -> Opened {
        var ratchets: [Int: Ratchet] = [:]
        var opened = 0
        var failed: [String] = []
        let now = Int64(Date().timeIntervalSince1970)
        for number in kept.keys.sorted() {
            guard let envelope = kept[number].flatMap(Base64URL.decode), number < sent.count else {
                failed.append("\(member.uid): copy of message \(number) is not base64url")
                continue
            }
            let sender = users[sent[number]]
            let id = BenchID.make(sender: sent[number], sequence: number, time: 0)
            do {
                guard case .version2(let read) = try Envelope.unseal(envelope, id: id, recipient: member.uid, keys: member.mailbox) else {
                    failed.append("\(member.uid): message \(number) is not a version 2 envelope")
                    continue
                }
                let current = try ratchets[sent[number]]
                    ?? Ratchet.accept(read, identity: member.identity, signedPrekey: member.signedPrekey, oneTimePrekey: nil)
                let (message, next) = try read.open(with: current, identity: member.identity.publicKey, now: now)
                ratchets[sent[number]] = next
                guard message.sender == sender.uid, message.senderKey == sender.identity.publicKey,
                      message.message.group?.id == group, message.message.payload.text == text else {
                    failed.append("\(member.uid): message \(number) did not open as sent")
                    continue
                }
                opened += 1
            } catch {
                failed.append("\(member.uid): message \(number) did not open: \(error)")
            }
        }
        return Opened(opened: opened, failed: failed)
    }

    /// What the checks of one member's copies found.
    private struct Opened: Sendable {
        let opened: Int
        let failed: [String]
    }
}

extension GroupRun {
    /// One copy sealed for `member`.
    struct SealedCopy: Sendable {
        let member: Int
        let uid: String
        let keyID: String
        let envelope: [UInt8]
        let ratchet: Ratchet
    }

    /// The sealing threads of one send, as the client library's group send chooses them
    /// (`GroupSealing`: as many as cores, at most 8, none for fewer than 32 copies).
    static func sealThreads(copies: Int) -> Int {
        max(1, min(ProcessInfo.processInfo.activeProcessorCount, 8, copies / 32))
    }

    /// Seals `message` for every member but `sender`, the body encoded once and the copies split
    /// into runs sealed on threads of their own, as the client's group send does
    /// (docs/design/groups.md §7.4): the figure is the client's, not one thread's.
    static func seal(_ message: ChatMessage, id: String, author: BenchUser, sender: Int, members: Int, uids: [String],
                     bundles: [String: KeyBundle], ratchets: [Ratchet?]) throws -> [SealedCopy] {
        try message.validate()
        let body = try message.encoded()
        let others = (0..<members).filter { $0 != sender }
        let threads = sealThreads(copies: others.count)
        let runLength = (others.count + threads - 1) / threads
        let runs = stride(from: 0, to: others.count, by: runLength).map { Array(others[$0..<min(others.count, $0 + runLength)]) }
        let results = SealResults(count: runs.count)
        DispatchQueue.concurrentPerform(iterations: runs.count) { index in
            results.set(index, Result {
                try runs[index].map { member in
                    let uid = uids[member]
                    guard let bundle = bundles[uid], let prekey = bundle.signedPrekey else {
                        throw BenchFailure.failed("no version 2 key bundle for \(uid)")
                    }
                    do {
                        var ratchet = try ratchets[member]
                            ?? Ratchet.initiate(identity: author.identity, peerIdentity: bundle.identityKey, signedPrekey: prekey, oneTimePrekey: nil)
                        let envelope = try Envelope.seal(body: body, id: id, from: author.uid, identity: author.identity, to: uid,
                                                         mailboxKey: bundle.mailboxKey, ratchet: &ratchet)
                        return SealedCopy(member: member, uid: uid, keyID: bundle.keyID, envelope: envelope, ratchet: ratchet)
                    } catch let failure as BenchFailure {
                        throw failure
                    } catch {
                        throw BenchFailure.failed("sealing a copy for \(uid) failed: \(error)")
                    }
                }
            })
        }
        return try results.all()
    }
}

/// The runs' results, each written by its own `concurrentPerform` iteration and read after all
/// have returned.
private final class SealResults: @unchecked Sendable {
    private var results: [Result<[GroupRun.SealedCopy], any Error>?]
    private let lock = NSLock()
    init(count: Int) { results = Array(repeating: nil, count: count) }
    func set(_ index: Int, _ result: Result<[GroupRun.SealedCopy], any Error>) { lock.withLock { results[index] = result } }
    func all() throws -> [GroupRun.SealedCopy] { try lock.withLock { results }.flatMap { try $0!.get() } }
}
