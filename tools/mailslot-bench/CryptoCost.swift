import Foundation
import MailslotWire

/// The client CPU one message costs, measured in-process before the socket phase: version 1 and
/// version 2 sealing and opening in alternating batches, so that both see the same machine (a
/// build or another process running alongside weighs on each alike), and the median batch of
/// each reported. Only the calling thread's CPU time inside the seal and open calls is counted.
struct CryptoCost: Sendable {
    /// Microseconds per message, the median over the batches.
    let v1Seal: Double, v1Open: Double, v2Seal: Double, v2Open: Double
    /// Version 2 seal plus open per message in a conversation whose direction changes every
    /// message (a ratchet turn for each message) and every 50 messages.
    let v2TurnEveryMessage: Double, v2TurnEvery50: Double
    let batches: Int, messages: Int

    /// Runs `batches` rounds of `messages` messages of `body` in each format, from a sender named
    /// `sender` to a recipient named `recipient` (the run's uid lengths, so the records are the
    /// run's). Throws if any message does not open as what was sealed.
    static func measure(body: MessageBody, sender: String, recipient: String, batches: Int, messages: Int) throws -> CryptoCost {
        let a = Party(uid: sender), b = Party(uid: recipient)
        var samples: [String: [Double]] = [:]
        for _ in 0..<batches {
            let v1 = try versionOne(body: body, from: a, to: b, messages: messages)
            let v2 = try versionTwo(body: body, a, b, messages: messages, turnEvery: nil)
            let everyMessage = try versionTwo(body: body, a, b, messages: messages, turnEvery: 1)
            let every50 = try versionTwo(body: body, a, b, messages: messages, turnEvery: 50)
            for (name, cpu) in [("v1 seal", v1.seal), ("v1 open", v1.open), ("v2 seal", v2.seal), ("v2 open", v2.open),
                                ("v2 turn 1", everyMessage.seal + everyMessage.open), ("v2 turn 50", every50.seal + every50.open)] {
                samples[name, default: []].append(Double(cpu) / 1000 / Double(messages))
            }
        }
        func median(_ name: String) -> Double {
            let sorted = (samples[name] ?? []).sorted()
            guard !sorted.isEmpty else { return 0 }
            return sorted.count % 2 == 1 ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
        }
        return CryptoCost(v1Seal: median("v1 seal"), v1Open: median("v1 open"), v2Seal: median("v2 seal"), v2Open: median("v2 open"),
                          v2TurnEveryMessage: median("v2 turn 1"), v2TurnEvery50: median("v2 turn 50"), batches: batches, messages: messages)
    }

    /// The figures for the report's JSON line.
    var json: JSON {
        .object([("batches", .int(batches)), ("messages", .int(messages)),
                 ("v1_seal", .number(v1Seal)), ("v1_open", .number(v1Open)), ("v2_seal", .number(v2Seal)), ("v2_open", .number(v2Open)),
                 ("v2_turn_every_message", .number(v2TurnEveryMessage)), ("v2_turn_every_50", .number(v2TurnEvery50))])
    }

    /// One side of the measured conversation: its keys and the ratchets it holds.
    private final class Party {
        let uid: String
        let identity = IdentityKeyPair(), mailbox = MailboxKeyPair(), signedPrekey = X25519KeyPair()
        var ratchet: Ratchet?

        init(uid: String) { self.uid = uid }
    }

    /// Nanoseconds of sealing and of opening, over a batch.
    private typealias Spent = (seal: UInt64, open: UInt64)

    private static func versionOne(body: MessageBody, from a: Party, to b: Party, messages: Int) throws -> Spent {
        var spent: Spent = (0, 0)
        for sequence in 0..<messages {
            let id = BenchID.make(sender: 0, sequence: sequence, time: 0), message = body.message(from: a.uid)
            let started = ProcessStats.threadCPUNanoseconds()
            let envelope = try Envelope.seal(message, id: id, from: a.uid, identity: a.identity, to: b.uid, mailboxKey: b.mailbox.publicKey)
            let sealed = ProcessStats.threadCPUNanoseconds()
            let opened = try Envelope.open(envelope, id: id, recipient: b.uid, keys: b.mailbox)
            spent.seal += sealed - started
            spent.open += ProcessStats.threadCPUNanoseconds() - sealed
            try check(opened, from: a, body: body)
            if sequence == 0 { try checkSize(envelope, body: body, from: a, to: b, version: .v1) }
        }
        return spent
    }

    /// A new ratchet from `a` to `b`, then `messages` messages: all from `a` (nil), or the
    /// direction changing every `turnEvery` messages, so each side's ratchet turns that often.
    private static func versionTwo(body: MessageBody, _ a: Party, _ b: Party, messages: Int, turnEvery: Int?) throws -> Spent {
        a.ratchet = try Ratchet.initiate(identity: a.identity, peerIdentity: b.identity.publicKey,
                                         signedPrekey: PublishedPrekey(id: BenchUser.signedPrekeyID, key: b.signedPrekey.publicKey),
                                         oneTimePrekey: nil)
        b.ratchet = nil
        var spent: Spent = (0, 0)
        for sequence in 0..<messages {
            let forward = turnEvery.map { (sequence / $0) % 2 == 0 } ?? true
            let (from, to) = forward ? (a, b) : (b, a)
            let id = BenchID.make(sender: 0, sequence: sequence, time: 0), message = body.message(from: from.uid)
            guard var ratchet = from.ratchet else { throw BenchFailure.failed("the in-process sender holds no ratchet") }
            let started = ProcessStats.threadCPUNanoseconds()
            let envelope = try Envelope.seal(message, id: id, from: from.uid, identity: from.identity, to: to.uid,
                                             mailboxKey: to.mailbox.publicKey, ratchet: &ratchet)
            let sealed = ProcessStats.threadCPUNanoseconds()
            from.ratchet = ratchet
            guard case .version2(let read) = try Envelope.unseal(envelope, id: id, recipient: to.uid, keys: to.mailbox) else {
                throw BenchFailure.failed("an in-process version 2 message unsealed as version 1")
            }
            let current = try to.ratchet ?? Ratchet.accept(read, identity: to.identity, signedPrekey: to.signedPrekey, oneTimePrekey: nil)
            let (opened, next) = try read.open(with: current, identity: to.identity.publicKey, now: Int64(Date().timeIntervalSince1970))
            spent.seal += sealed - started
            spent.open += ProcessStats.threadCPUNanoseconds() - sealed
            to.ratchet = next
            try check(opened, from: from, body: body)
            if sequence == 0 { try checkSize(envelope, body: body, from: a, to: b, version: .v2) }
        }
        return spent
    }

    /// The run reports envelope sizes from ``MessageBody/envelopeBytes(body:senderUIDLength:recipientUIDLength:version:)``:
    /// a first message of each version must be that size.
    private static func checkSize(_ envelope: [UInt8], body: MessageBody, from a: Party, to b: Party, version: EnvelopeVersion) throws {
        let expected = MessageBody.envelopeBytes(body: body.bodyBytes, senderUIDLength: a.uid.utf8.count,
                                                 recipientUIDLength: b.uid.utf8.count, version: version)
        guard envelope.count == expected else {
            throw BenchFailure.failed("a \(version.rawValue) envelope of \(envelope.count) bytes where \(expected ?? 0) were expected")
        }
    }

    private static func check(_ opened: OpenedEnvelope, from sender: Party, body: MessageBody) throws {
        guard opened.sender == sender.uid, opened.senderKey == sender.identity.publicKey, opened.message.payload.text == body.text else {
            throw BenchFailure.failed("an in-process message did not open as it was sealed")
        }
    }
}
