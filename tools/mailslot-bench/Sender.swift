import Foundation
import Histogram
import MailslotWire
import NIOCore

/// A recipient as senders see it.
struct Destination: Sendable {
    let uid: String
    /// A slow recipient: receives, never acks.
    let slow: Bool
    /// Relay mode: the envelope sealed once before the clock started, base64url.
    let presealed: String?
    /// E2e mode: the mailbox key from the recipient's verified key bundle.
    let mailboxKey: MailboxPublicKey
}

/// How a sender paces itself.
enum Pacing: Sendable {
    /// Keep `window` sends unanswered at all times.
    case closed(window: Int)
    /// Send message k at `start + offset + k × interval` (nanoseconds), whatever the answers.
    case open(interval: UInt64, offset: UInt64)
}

/// Everything one sender does in a run.
struct SenderPlan: Sendable {
    let index: Int
    let user: BenchUser
    /// Message k goes to `destinations[(index + k) % count]`.
    let destinations: [Destination]
    /// Stop after this many messages…
    let quota: Int?
    /// …or this many nanoseconds after the start, whichever comes first.
    let duration: UInt64?
    let pacing: Pacing
    /// E2e mode: seal each message now (nil: relay mode, send the pre-sealed envelopes).
    let body: MessageBody?
    /// E2e mode with version 2 envelopes: this sender's ratchet with each destination, by index,
    /// started before the clock (nil: version 1).
    let ratchets: [Ratchet]?

    func destinationIndex(_ sequence: Int) -> Int { (index + sequence) % destinations.count }
    func destination(_ sequence: Int) -> Destination { destinations[destinationIndex(sequence)] }
}

/// A growable set of small non-negative integers (one bit each).
struct Bitset: Sendable {
    private(set) var words: [UInt64] = []

    /// Inserts `value`; false if it was there already.
    mutating func insert(_ value: Int) -> Bool {
        let word = value >> 6, bit = UInt64(1) << UInt64(value & 63)
        if word >= words.count { words += [UInt64](repeating: 0, count: max(word + 1 - words.count, words.count)) }
        defer { words[word] |= bit }
        return words[word] & bit == 0
    }

    func contains(_ value: Int) -> Bool {
        let word = value >> 6
        return word < words.count && words[word] & (UInt64(1) << UInt64(value & 63)) != 0
    }

    /// Every member, ascending.
    var members: [Int] {
        var result: [Int] = []
        for (index, word) in words.enumerated() where word != 0 {
            for bit in 0..<64 where word & (1 << UInt64(bit)) != 0 { result.append(index << 6 | bit) }
        }
        return result
    }

    var count: Int { words.reduce(0) { $0 + $1.nonzeroBitCount } }
}

/// Latencies in microseconds, up to an hour, three significant digits.
typealias Latencies = Histogram<UInt32>

extension Histogram where Count == UInt32 {
    /// An empty latency histogram (microseconds).
    static func latencies() -> Latencies {
        Latencies(lowestDiscernibleValue: 1, highestTrackableValue: 3_600_000_000, numberOfSignificantValueDigits: .three)
    }

    /// Records the nanoseconds from `start` to `end`.
    mutating func record(from start: UInt64, to end: UInt64) {
        _ = record(Swift.min(Swift.max(1, (end &- start) / 1000), highestTrackableValue))
    }
}

/// What one sender saw.
struct SenderLedger: Sendable {
    /// `send` frames written.
    var written = 0
    /// Sequence numbers the relay stored (`sent`, created or an identical retry).
    var stored = Bitset()
    /// `sent` frames for a sequence already stored: the relay answered one send twice.
    var doubleAnswers = 0
    /// `sent` with created: false — only a retry may get that, and a run never retries.
    var identicalRetries = 0
    /// Refused sends, by problem code.
    var refusals: [String: Int] = [:]
    /// Frames a sender's socket should never get (deliveries to a sender, errors without a ref…).
    var unexpected: [String] = []
    /// From the (intended) send to the `sent` answer.
    var createLatency = Latencies.latencies()
    /// E2e mode: this sender's thread CPU time inside the seal calls, in nanoseconds.
    var sealNanoseconds: UInt64 = 0

    mutating func note(_ text: String) { if unexpected.count < 20 { unexpected.append(text) } }
}

/// A sender: one user writing `send` frames on its own subscription socket (the same socket
/// carries its sends, spec/protocol.md §8), and reading the answers.
enum BenchSender {
    /// Connects and runs the plan once `gate` opens. The ledger fills as answers come.
    static func start(_ plan: SenderPlan, http: RelayHTTP, gate: StartGate, counters: Counters) -> (Socket, Locked<SenderLedger>) {
        let ledger = Locked(SenderLedger())
        let socket = Socket(url: http.subscribeURL(plan.user.uid), session: plan.user.session, logger: Socket.logger) { frames, outbound in
            let (credits, creditSink) = AsyncStream.makeStream(of: Void.self)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    await write(plan, outbound: outbound, credits: credits, gate: gate, ledger: ledger, counters: counters)
                }
                defer {
                    creditSink.finish()
                    group.cancelAll()
                }
                for try await frame in frames {
                    if read(frame, plan: plan, ledger: ledger, counters: counters) { creditSink.yield(()) }
                }
            }
        }
        return (socket, ledger)
    }

    /// Writes the plan's messages at its pace. In a closed loop a credit (an answer) frees a slot.
    private static func write(_ plan: SenderPlan, outbound: FrameWriter, credits: AsyncStream<Void>,
                              gate: StartGate, ledger: Locked<SenderLedger>, counters: Counters) async {
        guard let start = await gate.wait() else { return }
        defer { counters.withLock { $0.sendersDone += 1 } }
        let end = plan.duration.map { start + $0 }
        var creditsLeft = credits.makeAsyncIterator()
        var outstanding = 0
        var sequence = 0
        var ratchets = plan.ratchets  // advanced by every seal, as a client stores them
        do {
            while plan.quota.map({ sequence < $0 }) ?? true {
                let time: UInt64
                switch plan.pacing {
                case .closed(let window):
                    if outstanding >= window {
                        guard await creditsLeft.next() != nil else { return }
                        outstanding -= 1
                        continue
                    }
                    time = Monotonic.now()
                    if let end, time >= end { return }
                    outstanding += 1
                case .open(let interval, let offset):
                    time = start + offset + UInt64(sequence) * interval
                    if let end, time >= end { return }
                    try await Monotonic.sleep(until: time)
                }
                let destinationIndex = plan.destinationIndex(sequence)
                let destination = plan.destinations[destinationIndex]
                let id = BenchID.make(sender: plan.index, sequence: sequence, time: time)
                let envelope: String
                var sealCPU: UInt64 = 0
                if let body = plan.body {
                    let message = body.message(from: plan.user.uid)
                    do {
                        let started = ProcessStats.threadCPUNanoseconds()
                        let sealed: [UInt8]
                        if ratchets != nil {
                            sealed = try Envelope.seal(message, id: id, from: plan.user.uid, identity: plan.user.identity, to: destination.uid,
                                                       mailboxKey: destination.mailboxKey, ratchet: &ratchets![destinationIndex])
                        } else {
                            sealed = try Envelope.seal(message, id: id, from: plan.user.uid, identity: plan.user.identity, to: destination.uid,
                                                       mailboxKey: destination.mailboxKey)
                        }
                        sealCPU = ProcessStats.threadCPUNanoseconds() - started
                        envelope = Base64URL.encode(sealed)
                    } catch {
                        counters.fail("sender \(plan.user.uid) cannot seal: \(error.code)")
                        return
                    }
                } else {
                    envelope = destination.presealed ?? ""
                }
                try await outbound.write(ClientFrames.send(to: destination.uid, id: id, envelope: envelope))
                sequence += 1
                ledger.withLock {
                    $0.written += 1
                    $0.sealNanoseconds += sealCPU
                }
                counters.withLock { $0.sent += 1 }
            }
        } catch {
            // Cancelled, or the socket went away: the controller sees it in the counts.
        }
    }

    /// Reads one frame into the ledger; true when it answered a send (a closed loop's credit).
    private static func read(_ frame: ByteBuffer, plan: SenderPlan, ledger: Locked<SenderLedger>, counters: Counters) -> Bool {
        let now = Monotonic.now()
        switch frame.withUnsafeReadableBytes({ SenderAnswer.read($0, sender: plan.index) }) {
        case .sent(let sequence, let time, let created):
            let slow = plan.destination(sequence).slow
            let fresh = ledger.withLock { ledger -> Bool in
                if !created { ledger.identicalRetries += 1 }
                guard ledger.stored.insert(sequence) else {
                    ledger.doubleAnswers += 1
                    return false
                }
                ledger.createLatency.record(from: time, to: now)
                return true
            }
            counters.withLock {
                $0.answered += 1
                if fresh { if slow { $0.createdSlow += 1 } else { $0.created += 1 } }
            }
            return true
        case .refused(_, let code):
            ledger.withLock { $0.refusals[code, default: 0] += 1 }
            counters.withLock {
                $0.answered += 1
                $0.refused += 1
            }
            return true
        case .ready:
            counters.withLock { $0.ready += 1 }
            return false
        case .unexpected(let what):
            ledger.withLock { $0.note(what) }
            return false
        }
    }
}

/// Holds every sender until the clock starts, then lets them go at once with the start time.
final class StartGate: Sendable {
    private let state = Locked<(start: UInt64??, waiting: [CheckedContinuation<UInt64?, Never>])>((nil, []))

    /// The start time, once the gate opens; nil if the run was called off.
    func wait() async -> UInt64? {
        await withCheckedContinuation { continuation in
            let opened = state.withLock { state -> UInt64?? in
                if let start = state.start { return start }
                state.waiting.append(continuation)
                return nil
            }
            if let opened { continuation.resume(returning: opened) }
        }
    }

    /// Opens the gate with `start` (nil: call the run off).
    func open(_ start: UInt64?) {
        let waiting = state.withLock { state -> [CheckedContinuation<UInt64?, Never>] in
            guard state.start == nil else { return [] }
            state.start = .some(start)
            defer { state.waiting = [] }
            return state.waiting
        }
        for continuation in waiting { continuation.resume(returning: start) }
    }
}
