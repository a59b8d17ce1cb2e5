import Foundation
import MailslotWire
import NIOCore

/// One message in a crash-test sender's outbox: how often it was sent and how the relay answered.
struct OutboxEntry: Sendable {
    /// The `send` frame, the same on every try (same id, same envelope): the relay's create is idempotent.
    let frame: String
    var attempts = 0
    var answers = 0
    /// `sent` answers with created: true (a new message was stored).
    var created = 0
    /// Whether the relay has answered 2xx (`sent`, created or an identical retry).
    var stored = false
    /// Waiting for an answer on the current socket.
    var inFlight = false

    /// The most copies the relay can have created: one per created answer, plus one per try whose
    /// answer was lost to a crash. A recipient may see the message again after an erasure at
    /// most that many times less one.
    var possibleCreations: Int { created + (attempts - answers) }
}

/// A sender's outbox and answers, kept across relay restarts like a client's outbox.
struct Outbox: Sendable {
    var entries: [Int: OutboxEntry] = [:]
    var next = 0
    /// Sends the relay refused (`error` frames), by code; they stay in the outbox and are tried again.
    var refusals: [String: Int] = [:]
    var unexpected: [String] = []
    /// No new messages (the end of the test): only what is waiting is tried again.
    var closed = false

    /// Entries waiting for an answer on the current socket (kept in step with the entries' flags).
    private(set) var inFlight = 0

    /// Entries without a 2xx answer.
    var unanswered: Int { entries.values.reduce(0) { $0 + ($1.stored ? 0 : 1) } }

    /// Marks `sequence` as sent (or sent again) on the current socket.
    mutating func launch(_ sequence: Int) {
        guard var entry = entries[sequence] else { return }
        entry.attempts += 1
        if !entry.inFlight { inFlight += 1 }
        entry.inFlight = true
        entries[sequence] = entry
    }

    /// Records an answer to `sequence`; nil when none was awaited.
    mutating func answer(_ sequence: Int, stored: Bool, created: Bool) -> OutboxEntry? {
        guard var entry = entries[sequence], entry.inFlight else { return nil }
        let before = entry
        entry.inFlight = false
        inFlight -= 1
        entry.answers += 1
        if created { entry.created += 1 }
        if stored { entry.stored = true }
        entries[sequence] = entry
        return before
    }

    /// The socket is gone: nothing is in flight any more.
    mutating func dropInFlight() {
        for (sequence, entry) in entries where entry.inFlight { entries[sequence]?.inFlight = false }
        inFlight = 0
    }

    mutating func note(_ text: String) { if unexpected.count < 20 { unexpected.append(text) } }
}

/// A crash-test sender: on every (re)connection it first sends again everything not yet
/// answered, then new messages, keeping `window` unanswered.
enum CrashSender {
    /// Connects a socket for `plan`'s user that works through `outbox`.
    static func connect(_ plan: SenderPlan, window: Int, outbox: Locked<Outbox>, http: RelayHTTP, counters: Counters) -> Socket {
        Socket(url: http.subscribeURL(plan.user.uid), session: plan.user.session, logger: Socket.logger) { frames, outbound in
            // After both halves are done: whatever this socket carried unanswered is lost with it;
            // the next socket sends it again.
            defer { outbox.withLock { $0.dropInFlight() } }
            let (credits, creditSink) = AsyncStream.makeStream(of: Void.self)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await write(plan, window: window, outbound: outbound, credits: credits, outbox: outbox, counters: counters) }
                defer {
                    creditSink.finish()
                    group.cancelAll()
                }
                for try await frame in frames {
                    if read(frame, plan: plan, outbox: outbox, counters: counters) { creditSink.yield(()) }
                }
            }
        }
    }

    private static func write(_ plan: SenderPlan, window: Int, outbound: FrameWriter, credits: AsyncStream<Void>,
                              outbox: Locked<Outbox>, counters: Counters) async {
        var creditsLeft = credits.makeAsyncIterator()
        do {
            // First, everything unanswered, oldest first, exactly as it was sent before.
            let again = outbox.withLock { outbox -> [String] in
                outbox.entries.keys.sorted().compactMap { sequence -> String? in
                    guard let entry = outbox.entries[sequence], !entry.stored else { return nil }
                    outbox.launch(sequence)
                    return entry.frame
                }
            }
            for frame in again {
                try await outbound.write(frame)
                counters.withLock { $0.sent += 1 }
            }
            while true {
                let next = outbox.withLock { outbox -> (sequence: Int, frame: String)? in
                    guard !outbox.closed, outbox.inFlight < window else { return nil }
                    let sequence = outbox.next
                    outbox.next += 1
                    let destination = plan.destination(sequence)
                    let id = BenchID.make(sender: plan.index, sequence: sequence, time: Monotonic.now())
                    let frame = ClientFrames.send(to: destination.uid, id: id, envelope: destination.presealed ?? "")
                    outbox.entries[sequence] = OutboxEntry(frame: frame)
                    outbox.launch(sequence)
                    return (sequence, frame)
                }
                guard let next else {
                    if outbox.withLock({ $0.closed }) { return }
                    guard await creditsLeft.next() != nil else { return }
                    continue
                }
                try await outbound.write(next.frame)
                counters.withLock { $0.sent += 1 }
            }
        } catch {
            // The socket died (the relay was killed): the next socket takes over.
        }
    }

    /// Reads one answer into the outbox; true when it answered a send.
    private static func read(_ frame: ByteBuffer, plan: SenderPlan, outbox: Locked<Outbox>, counters: Counters) -> Bool {
        switch frame.withUnsafeReadableBytes({ SenderAnswer.read($0, sender: plan.index) }) {
        case .sent(let sequence, _, let created):
            let fresh = outbox.withLock { outbox -> Bool in
                guard let before = outbox.answer(sequence, stored: true, created: created) else {
                    outbox.note("an answer to a send not in flight")
                    return false
                }
                return !before.stored
            }
            counters.withLock {
                $0.answered += 1
                if fresh { $0.created += 1 }
            }
            return true
        case .refused(let sequence, let code):
            outbox.withLock { outbox in
                outbox.refusals[code, default: 0] += 1
                if outbox.answer(sequence, stored: false, created: false) == nil { outbox.note("a refusal of a send not in flight") }
            }
            counters.withLock {
                $0.answered += 1
                $0.refused += 1
            }
            return true
        case .ready:
            counters.withLock { $0.ready += 1 }
            return false
        case .unexpected(let what):
            outbox.withLock { $0.note(what) }
            return false
        }
    }
}
