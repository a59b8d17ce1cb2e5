import Foundation
import MailslotWire
import NIOCore

/// Everything one recipient does with what it receives.
struct RecipientPlan: Sendable {
    let user: BenchUser
    /// Ack each delivery (false: a slow consumer that receives and never acks).
    let acks: Bool
    /// Record latencies (not for a slow consumer's backlog, which waits by design).
    let measures: Bool
    /// The sender uids by index: the relay's stamped `author` must be the sender the id names.
    let senderUIDs: [String]
    /// Relay mode: the pre-sealed envelope every message to this recipient carries, base64url.
    let presealed: [UInt8]?
    /// E2e mode: the senders' identity keys as pinned from their key bundles.
    let pinned: [String: IdentityPublicKey]?
    /// E2e mode with version 2 envelopes: this user's ratchets, kept across its sockets as a
    /// client's store keeps them (nil: version 1).
    let ratchets: Locked<RatchetStore>?
}

/// A recipient's ratchets by ratchet id, and the one-time prekeys used up (a client erases each
/// once a ratchet started with it).
struct RatchetStore: Sendable {
    var ratchets: [[UInt8]: Ratchet] = [:]
    var usedPrekeys: Set<UInt32> = []
}

/// What one recipient user has seen, across all its sockets (the crash test reconnects): the
/// "store" a client keeps, by message key, so a redelivery is recognised as one.
struct RecipientLedger: Sendable {
    /// What the store knows of one message id. A sender's retry after the erasure creates the
    /// message again under the same id: a new copy, with a higher `seq`.
    struct Entry: Sendable {
        /// The socket generation that last delivered it.
        var generation: UInt32
        /// The copy held.
        var seq: Int64
        /// The erasure of the copy held was confirmed (`acked`).
        var erasedNow = false
        /// An erasure of some copy was confirmed.
        var erasedOnce = false
    }

    var entries: [UInt64: Entry] = [:]
    /// Acks written on the current socket and not answered yet, by key, as the seq of the copy
    /// each one acknowledged, oldest first. The relay answers a socket's frames in order, so an
    /// `acked` answers the oldest ack of its id — and says which copy was erased.
    var pendingAcks: [UInt64: [Int64]] = [:]
    /// Which socket of this user is reading (each new socket increments it).
    var generation: UInt32 = 0
    /// Distinct messages delivered (stored).
    var stored = 0
    /// Distinct messages whose erasure was confirmed.
    var erased = 0
    /// A delivery of a copy already delivered on the same socket: never allowed (spec §8.2).
    var sameSocketRepeats = 0
    /// A copy delivered again after its erasure was confirmed: never allowed.
    var resurrected = 0
    /// Deliveries of a new copy of a message (same id, higher seq), by key: a duplicate, unless
    /// its sender's retry created it again (the crash test checks that against the senders' answers).
    var reappeared: [UInt64: Int] = [:]
    /// A copy delivered again on a new socket before its erasure was confirmed: allowed
    /// (spec §8.2), and the store drops it.
    var redeliveries = 0
    /// Messages that failed a check (e2e: envelope error codes; both modes: author, envelope bytes), by reason.
    var rejected: [String: Int] = [:]
    /// Frames that are not what the protocol says.
    var unexpected: [String] = []
    var receiveLatency = Latencies.latencies()
    var erasedLatency = Latencies.latencies()
    /// When the last first delivery arrived (``Monotonic``).
    var lastStored: UInt64 = 0
    /// E2e mode: envelopes opened (or refused) by the checks, and the thread CPU time inside the
    /// open calls, in nanoseconds.
    var opened = 0
    var openNanoseconds: UInt64 = 0

    /// Deliveries that should not have happened: repeats on one socket and erased copies coming back.
    var duplicates: Int { sameSocketRepeats + resurrected }

    /// Delivered copies whose erasure is not confirmed (on the current socket only, if `current`).
    func unconfirmed(current: Bool = false) -> Int {
        entries.values.reduce(0) { $0 + (!$1.erasedNow && (!current || $1.generation == generation) ? 1 : 0) }
    }

    func isErased(_ key: UInt64) -> Bool { entries[key]?.erasedNow ?? false }

    mutating func note(_ text: String) { if unexpected.count < 20 { unexpected.append(text) } }
    mutating func reject(_ reason: String) { rejected[reason, default: 0] += 1 }
}

/// A recipient: one user subscribed to its mailbox, storing (counting, checking) each delivery
/// and acking it; the relay erases it and answers `acked`.
enum BenchRecipient {
    /// Connects a new socket for `plan.user`, continuing `ledger` (a new generation).
    static func start(_ plan: RecipientPlan, ledger: Locked<RecipientLedger>, http: RelayHTTP, counters: Counters) -> Socket {
        let generation = ledger.withLock { ledger -> UInt32 in
            ledger.generation += 1
            ledger.pendingAcks.removeAll()  // the last socket's answers will never come
            return ledger.generation
        }
        return Socket(url: http.subscribeURL(plan.user.uid), session: plan.user.session, logger: Socket.logger) { frames, outbound in
            for try await frame in frames {
                if let ack = read(frame, plan: plan, generation: generation, ledger: ledger, counters: counters) {
                    try await outbound.write(ack)
                }
            }
        }
    }

    /// Reads one frame; returns the ack to write, if any.
    private static func read(_ frame: ByteBuffer, plan: RecipientPlan, generation: UInt32,
                             ledger: Locked<RecipientLedger>, counters: Counters) -> String? {
        let now = Monotonic.now()
        return frame.withUnsafeReadableBytes { raw -> String? in
            let bytes = FrameBytes(raw: raw)
            switch bytes.kind {
            case .message:
                guard let idBytes = bytes.string("\"id\":\"") else {
                    ledger.withLock { $0.note("a message frame without an id") }
                    return nil
                }
                let ack = plan.acks ? ClientFrames.ack(idBytes) : nil
                guard let id = BenchID.parse(idBytes), id.sender < plan.senderUIDs.count else {
                    ledger.withLock { $0.note("a message this run did not send") }
                    return ack
                }
                guard let seq = bytes.integer("\"seq\":") else {
                    ledger.withLock { $0.note("a message frame without a seq") }
                    return ack
                }
                let key = BenchID.key(sender: id.sender, sequence: id.sequence)
                let first = ledger.withLock { ledger -> Bool in
                    if ack != nil { ledger.pendingAcks[key, default: []].append(seq) }
                    guard var entry = ledger.entries[key] else {
                        ledger.entries[key] = RecipientLedger.Entry(generation: generation, seq: seq)
                        ledger.stored += 1
                        ledger.lastStored = now
                        if plan.measures { ledger.receiveLatency.record(from: id.time, to: now) }
                        return true
                    }
                    if seq > entry.seq {
                        ledger.reappeared[key, default: 0] += 1  // a new copy: the store drops it
                        entry.seq = seq
                        entry.erasedNow = false
                    } else if seq < entry.seq {
                        ledger.note("an older copy of a message after a newer one")
                    } else if entry.erasedNow {
                        ledger.resurrected += 1
                    } else if entry.generation == generation {
                        ledger.sameSocketRepeats += 1
                    } else {
                        ledger.redeliveries += 1
                    }
                    entry.generation = generation
                    ledger.entries[key] = entry
                    return false
                }
                guard first else { return ack }
                counters.withLock { if plan.measures { $0.delivered += 1 } else { $0.deliveredSlow += 1 } }
                // Only a first delivery gets here: a redelivered id was recognised above, before any
                // decryption (a version 2 message opens once; its key is gone after).
                let (reason, cpu) = check(bytes, id: idBytes, sender: plan.senderUIDs[id.sender], plan: plan)
                ledger.withLock { ledger in
                    if let reason { ledger.reject(reason) }
                    if plan.pinned != nil {
                        ledger.opened += 1
                        ledger.openNanoseconds += cpu
                    }
                }
                return ack
            case .acked:
                guard let idBytes = bytes.string("\"id\":\""), let id = BenchID.parse(idBytes) else {
                    ledger.withLock { $0.note("an acked frame for an id this run did not send") }
                    return nil
                }
                let key = BenchID.key(sender: id.sender, sequence: id.sequence)
                let fresh = ledger.withLock { ledger -> Bool in
                    guard var entry = ledger.entries[key], let seq = ledger.pendingAcks[key]?.first else {
                        ledger.note("an acked frame for no ack")
                        return false
                    }
                    ledger.pendingAcks[key]?.removeFirst()
                    if ledger.pendingAcks[key]?.isEmpty == true { ledger.pendingAcks[key] = nil }
                    // A repeated ack after a reconnect is answered acked again (spec §8.3): no second erasure.
                    if seq == entry.seq { entry.erasedNow = true }
                    defer { entry.erasedOnce = true; ledger.entries[key] = entry }
                    guard !entry.erasedOnce else { return false }
                    ledger.erased += 1
                    if plan.measures { ledger.erasedLatency.record(from: id.time, to: now) }
                    return true
                }
                if fresh { counters.withLock { $0.erased += 1 } }
                return nil
            case .sent:
                ledger.withLock { $0.note("a sent frame on a recipient's socket") }
                return nil
            case .other:
                switch ReceiverOther.read(raw) {
                case .ready: counters.withLock { $0.ready += 1 }
                case .unexpected(let what): ledger.withLock { $0.note(what) }
                }
                return nil
            }
        }
    }

    /// What a client checks before it stores a message: nil when it passes, and the thread CPU
    /// time spent opening (e2e), in nanoseconds. The relay's stamped author must be the sender the
    /// id names. Relay mode: the envelope must be the bytes sent. E2e mode: it must open with the
    /// recipient's key, for this recipient and id, from the key pinned for that author — version 1
    /// signed by it, version 2 in the ratchet with it (accepted from the message if it starts one).
    private static func check(_ bytes: FrameBytes, id: UnsafeRawBufferPointer, sender: String, plan: RecipientPlan) -> (String?, UInt64) {
        guard let author = bytes.string("\"author\":\""), author.elementsEqual(sender.utf8) else { return ("author_mismatch", 0) }
        guard let envelope = bytes.string("\"envelope\":\"") else { return ("envelope_missing", 0) }
        if let presealed = plan.presealed {
            // memcmp: elementsEqual walked the two byte by byte (4 % of the bench's CPU).
            let same = envelope.count == presealed.count && presealed.withUnsafeBytes { sent in
                guard let a = sent.baseAddress, let b = envelope.baseAddress else { return sent.isEmpty }
                return memcmp(a, b, sent.count) == 0
            }
            return (same ? nil : "envelope_altered", 0)
        }
        guard let pinned = plan.pinned?[sender] else { return ("sender_not_pinned", 0) }
        guard let sealed = Base64URL.decode(String(decoding: envelope, as: UTF8.self)) else { return ("envelope_not_base64url", 0) }
        let started = ProcessStats.threadCPUNanoseconds()
        let reason = open(sealed, id: String(decoding: id, as: UTF8.self), sender: sender, pinned: pinned, plan: plan)
        return (reason, ProcessStats.threadCPUNanoseconds() - started)
    }

    /// Opens and checks an envelope of either version; nil when it passes.
    private static func open(_ envelope: [UInt8], id: String, sender: String, pinned: IdentityPublicKey, plan: RecipientPlan) -> String? {
        do {
            switch try Envelope.unseal(envelope, id: id, recipient: plan.user.uid, keys: plan.user.mailbox) {
            case .version1(let opened):
                guard opened.sender == sender else { return "author_mismatch" }
                guard opened.senderKey == pinned else { return "key_changed" }
                return nil
            case .version2(let sealed):
                guard sealed.sender == sender else { return "author_mismatch" }
                guard sealed.senderKey == pinned else { return "key_changed" }
                guard let ratchets = plan.ratchets else { return "envelope_v2_unexpected" }
                return ratchets.withLock { openInRatchet(sealed, sender: sender, plan: plan, ratchets: &$0) }
            }
        } catch {
            return error.code
        }
    }

    /// Opens a version 2 message in the ratchet it names, or in the one it starts, and keeps the
    /// ratchet's new state; nil when it passes.
    private static func openInRatchet(_ sealed: RatchetEnvelope, sender: String, plan: RecipientPlan,
                                      ratchets store: inout RatchetStore) -> String? {
        do {
            let ratchet: Ratchet
            var usedPrekey: UInt32?
            if let known = store.ratchets[sealed.ratchetID] {
                ratchet = known
            } else {
                // Every message carries the ratchet start until the recipient answers, so
                // whichever arrives first (out of order too) starts the ratchet here.
                guard let start = sealed.start else { return EnvelopeError.noRatchet.code }
                guard start.signedPrekeyID == BenchUser.signedPrekeyID else { return EnvelopeError.unknownPrekey.code }
                var oneTime: X25519KeyPair?
                if let id = start.oneTimePrekeyID {
                    guard !store.usedPrekeys.contains(id), let pair = plan.user.oneTimePrekeys[id] else { return EnvelopeError.unknownPrekey.code }
                    oneTime = pair
                    usedPrekey = id
                }
                ratchet = try Ratchet.accept(sealed, identity: plan.user.identity, signedPrekey: plan.user.signedPrekey, oneTimePrekey: oneTime)
            }
            let (opened, next) = try sealed.open(with: ratchet, identity: plan.user.identity.publicKey, now: Int64(Date().timeIntervalSince1970))
            guard opened.sender == sender else { return "author_mismatch" }
            store.ratchets[next.id] = next
            if let usedPrekey { store.usedPrekeys.insert(usedPrekey) }
            return nil
        } catch {
            return error.code
        }
    }
}

/// Idle subscribers: signed-in users holding a subscribed socket open and doing nothing, to see
/// what each open connection costs the relay.
enum IdleSubscriber {
    static func start(_ user: BenchUser, http: RelayHTTP, counters: Counters) -> Socket {
        Socket(url: http.subscribeURL(user.uid), session: user.session, logger: Socket.logger) { frames, _ in
            for try await frame in frames {
                let ready = frame.withUnsafeReadableBytes { raw -> Bool in
                    if case .ready = try? JSONDecoder().decode(RelayFrame.self, from: Data(raw)) { return true }
                    return false
                }
                if ready { counters.withLock { $0.ready += 1 } }
            }
        }
    }
}
