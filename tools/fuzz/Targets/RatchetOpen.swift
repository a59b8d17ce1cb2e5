// Fuzz target `ratchet-open`: version 2 envelopes (ratchets: X3DH and the Double Ratchet,
// Sources/MailslotCrypto/Ratchets and Formats/Envelope.swift) opened as `bob`, for the fixed message
// id, in a fixed conversation with `alice` that the harness plays out deterministically at start-up
// (fixed identities, prekeys, ephemeral and ratchet keys, through the internal hooks that take them:
// this target is built against MailslotCrypto compiled with -enable-testing). The first byte picks
// what the rest of the input is:
//
//   0  the envelope: Envelope.unseal with bob's mailbox key; a version 2 record is opened in each
//      of bob's fixed ratchets it names, and when it names a ratchet start, in the ratchet that
//      Ratchet.accept derives with bob's fixed prekeys, as a client that lost the ratchet would.
//   1  the record: the harness pads it and seals it to bob's mailbox key, then as mode 0.
//   2  a stored ratchet (Ratchet(serialized:)): when it parses, it must serialise to the same
//      bytes, and opening the conversation's messages in it must not crash.
//   3  header fields: a valid message of the conversation whose record the harness rebuilds with
//      fuzzer-chosen ratchet id, kind, start fields, ratchet key, PN and N around the AEAD
//      ciphertext of the original header, so that the record reader and the ratchet (skipped keys,
//      MAX_SKIP, turns, retired keys, low-order keys) see odd values past the outer layer. Only
//      the original header may open.

import Foundation
@testable import MailslotCrypto
import MailslotWire

@_cdecl("LLVMFuzzerTestOneInput")
public func ratchetOpenOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = bytes(data, size)
    guard let mode = input.first else { return 0 }
    let rest = Array(input.dropFirst())
    switch mode % 4 {
    case 0: openAndCheck(rest)
    case 1: if let envelope = sealPaddedToRecipient(rest) { openAndCheck(envelope) }
    case 2: openInStoredRatchet(rest)
    default: openRebuiltHeader(rest)
    }
    return 0
}

/// The fixed conversation: alice starts a ratchet with bob (signed prekey 7, one-time prekey 1),
/// sends two messages, bob answers, alice sends again after the ratchet turned.
enum Conversation {
    static func keyPair(_ byte: UInt8) -> X25519KeyPair { X25519KeyPair(seed: SecretBytes(copying: [UInt8](repeating: byte, count: 32))) }

    static let alice = Fixed.senderIdentity
    static let bob = IdentityKeyPair(seed: SecretBytes(copying: [UInt8](repeating: 0x22, count: 32)))
    static let aliceMailbox = keyPair(0x99)
    static let signedPrekeyID: UInt32 = 7, oneTimePrekeyID: UInt32 = 1
    static let signedPrekey = keyPair(0x33), oneTimePrekey = keyPair(0x44)
    static let aliceEphemeral = keyPair(0x55), aliceRatchet = keyPair(0x66)
    /// The key pairs a ratchet step makes: bob's on every turn, alice's on hers.
    static let bobNextRatchet = keyPair(0x77), aliceNextRatchet = keyPair(0x88)
    /// The `now` of every open: the tokens' fixed time.
    static let now = Int64(Fixed.now.timeIntervalSince1970)

    /// A message's envelope, its record, and its version 2 fields as bob reads them.
    struct Message {
        let envelope: [UInt8]
        let record: [UInt8]
        let sealed: RatchetEnvelope
    }

    struct State {
        /// [0] the start message, [1] a later one (still carrying the start), [2] after a ratchet turn.
        let messages: [Message]
        /// Bob's ratchets: [0] accepted from message 0, [1] after opening it, [2] after answering,
        /// [3] after opening message 2 (the ratchet turned: alice's first key is retired).
        let bobRatchets: [Ratchet]
        /// Alice's ratchets: before sending, after message 1, after reading bob's answer.
        let aliceRatchets: [Ratchet]
    }

    static let state: State = {
        do { return try play() } catch { fatalError("the fixed conversation does not play: \(error)") }
    }()

    private static func body(_ text: String, from sender: String) throws -> [UInt8] {
        try ChatMessage(type: .text, sender: Sender(id: sender), payload: Payload(text: text), timestamp: 1).encoded()
    }

    private static func seal(_ text: String, from sender: String, _ identity: IdentityKeyPair, to recipient: String,
                             _ mailbox: MailboxPublicKey, _ ratchet: inout Ratchet) throws -> [UInt8] {
        try Envelope.seal(body: try body(text, from: sender), id: Fixed.messageID, from: sender, identity: identity,
                          to: recipient, mailboxKey: mailbox, ratchet: &ratchet)
    }

    private static func read(_ envelope: [UInt8]) throws -> Message {
        guard case .version2(let sealed) = try Envelope.unseal(envelope, id: Fixed.messageID, recipient: Fixed.recipient,
                                                               keys: Fixed.recipientKeys),
              let record = record(of: envelope) else { fatalError("a conversation message is not a version 2 record") }
        return Message(envelope: envelope, record: record, sealed: sealed)
    }

    private static func play() throws -> State {
        let bobMailbox = Fixed.recipientKeys.publicKey
        var aliceRatchet = try Ratchet.initiate(identity: alice, peerIdentity: bob.publicKey,
                                                signedPrekey: PublishedPrekey(id: signedPrekeyID, key: signedPrekey.publicKey),
                                                oneTimePrekey: PublishedPrekey(id: oneTimePrekeyID, key: oneTimePrekey.publicKey),
                                                ephemeral: aliceEphemeral, ratchetKey: aliceRatchet)
        let aliceStart = aliceRatchet
        let first = try read(try seal("hello bob", from: "alice", alice, to: "bob", bobMailbox, &aliceRatchet))
        let second = try read(try seal("second", from: "alice", alice, to: "bob", bobMailbox, &aliceRatchet))
        let aliceSent = aliceRatchet

        let accepted = try Ratchet.accept(first.sealed, identity: bob, signedPrekey: signedPrekey, oneTimePrekey: oneTimePrekey)
        var (_, bobRatchet) = try first.sealed.open(with: accepted, identity: bob.publicKey, now: now, newRatchetKey: { bobNextRatchet })
        let bobOpened = bobRatchet
        let answer = try seal("hi alice", from: "bob", bob, to: "alice", aliceMailbox.publicKey, &bobRatchet)
        let bobAnswered = bobRatchet

        guard case .version2(let answerSealed) = try Envelope.unseal(answer, id: Fixed.messageID, recipient: "alice", keys: aliceMailbox) else {
            fatalError("bob's answer is not version 2")
        }
        (_, aliceRatchet) = try answerSealed.open(with: aliceRatchet, identity: alice.publicKey, now: now, newRatchetKey: { aliceNextRatchet })
        let aliceAnswered = aliceRatchet
        let third = try read(try seal("after the turn", from: "alice", alice, to: "bob", bobMailbox, &aliceRatchet))
        let (_, bobTurned) = try third.sealed.open(with: bobAnswered, identity: bob.publicKey, now: now, newRatchetKey: { bobNextRatchet })
        return State(messages: [first, second, third], bobRatchets: [accepted, bobOpened, bobAnswered, bobTurned],
                     aliceRatchets: [aliceStart, aliceSent, aliceAnswered])
    }
}

/// The record inside an envelope sealed to bob: the padded plaintext up to its 0x80 marker.
private func record(of envelope: [UInt8]) -> [UInt8]? {
    guard let padded = Fixed.recipientKeys.open(sealed: envelope), let marker = padded.lastIndex(where: { $0 != 0 }),
          padded[marker] == 0x80 else { return nil }
    return Array(padded[..<marker])
}

/// Opens `sealed` in `ratchet` as bob and checks what any successful open promises; returns
/// whether it opened.
@discardableResult
private func open(_ sealed: RatchetEnvelope, in ratchet: Ratchet) -> Bool {
    let result = Result { () throws(EnvelopeError) in
        try sealed.open(with: ratchet, identity: Conversation.bob.publicKey, now: Conversation.now,
                        newRatchetKey: { Conversation.bobNextRatchet })
    }
    guard case .success(let (opened, next)) = result else { return false }
    expect(opened.sender == Fixed.sender && opened.senderKey == Fixed.senderIdentity.publicKey,
           "a ratchet message opened from another sender than alice")
    expect(opened.messageID == Fixed.messageID, "a ratchet message opened under another message id")
    expect(opened.message.sender.id == opened.sender, "a ratchet message opened whose body names another sender")
    expect(next.id == ratchet.id && next.peerIdentity == ratchet.peerIdentity, "opening changed whom the ratchet is with")
    expect(next.serialized() != ratchet.serialized(), "a message opened and the ratchet did not move")
    expect(next.start == nil, "a ratchet that received still carries a ratchet start")
    expect(Ratchet(serialized: next.serialized())?.serialized() == next.serialized(), "the ratchet after an open does not survive storage")
    return true
}

/// Unseals `envelope` as bob; a version 2 record is opened in each fixed ratchet of bob that it
/// names and, when it starts a ratchet with prekeys bob holds, in the ratchet accepted from it.
/// Returns the sealed fields when it unsealed, and whether some ratchet opened it.
@discardableResult
private func openAndCheck(_ envelope: [UInt8]) -> (RatchetEnvelope?, opened: Bool) {
    let result = Result { () throws(EnvelopeError) in
        try Envelope.unseal(envelope, id: Fixed.messageID, recipient: Fixed.recipient, keys: Fixed.recipientKeys)
    }
    guard case .success(let unsealed) = result else { return (nil, false) }
    expect(envelope.count >= Envelope.minimumSize && envelope.count.nonzeroBitCount == 1,
           "an envelope of \(envelope.count) bytes, not a size class, unsealed")
    guard case .version2(let sealed) = unsealed else {
        if case .version1(let opened) = unsealed {
            expect(opened.messageID == Fixed.messageID && opened.message.sender.id == opened.sender, "a version 1 envelope opened wrongly")
        }
        return (nil, false)
    }
    expect(sealed.messageID == Fixed.messageID, "a version 2 record read under another message id")
    expect(Identifier.isValidUID(sealed.sender), "a version 2 record read with an invalid sender uid")
    expect(sealed.ratchetID.count == Ratchet.idLength, "a ratchet id of \(sealed.ratchetID.count) bytes")
    var opened = false
    for ratchet in Conversation.state.bobRatchets.dropFirst() where ratchet.id == sealed.ratchetID {
        opened = open(sealed, in: ratchet) || opened
    }
    if let start = sealed.start {
        expect(start.signedPrekeyID != 0 && start.oneTimePrekeyID != 0, "a ratchet start read with a prekey id 0")
        // A client looks the prekeys up by id; unknown ids never reach accept.
        if start.signedPrekeyID == Conversation.signedPrekeyID, [nil, Conversation.oneTimePrekeyID].contains(start.oneTimePrekeyID) {
            let oneTime = start.oneTimePrekeyID == nil ? nil : Conversation.oneTimePrekey
            if let accepted = try? Ratchet.accept(sealed, identity: Conversation.bob, signedPrekey: Conversation.signedPrekey,
                                                  oneTimePrekey: oneTime) {
                expect(accepted.id == sealed.ratchetID && accepted.peerIdentity == sealed.senderKey && !accepted.initiated,
                       "an accepted ratchet does not match the message that started it")
                opened = open(sealed, in: accepted) || opened
            }
        }
    }
    return (sealed, opened)
}

/// The fuzzer's bytes as a stored ratchet: a round trip when it parses, and the conversation's
/// messages opened in it without a crash (and with the usual checks when one opens).
private func openInStoredRatchet(_ stored: [UInt8]) {
    guard let ratchet = Ratchet(serialized: stored) else { return }
    expect(ratchet.serialized() == stored, "a stored ratchet does not serialise to the bytes it was read from")
    for message in Conversation.state.messages { open(message.sealed, in: ratchet) }
}

/// Reads fuzzer bytes in order, with a default once they run out.
private struct FieldReader {
    var bytes: ArraySlice<UInt8>

    mutating func take(_ count: Int) -> [UInt8]? {
        guard bytes.count >= count else { bytes = []; return nil }
        defer { bytes = bytes.dropFirst(count) }
        return Array(bytes.prefix(count))
    }

    mutating func byte() -> UInt8? { take(1)?[0] }

    mutating func uint32() -> UInt32? { take(4).map { $0.reduce(0) { $0 << 8 | UInt32($1) } } }
}

/// Mode 3's input: a byte choosing the message (bits 0–1) and a byte of flags choosing the fields
/// to replace, then each replaced field in record order: ratchet id (16), kind (1), ephemeral key
/// (32), signed prekey id (4), one-time prekey id (4), ratchet key (1: one of the conversation's
/// keys or a low-order point, or 0xFF then 32 bytes), PN (4), N (4). The ciphertext stays the
/// original's. Returns whether the rebuilt message opened.
@discardableResult
private func openRebuiltHeader(_ input: [UInt8]) -> Bool {
    var fuzz = FieldReader(bytes: input[...])
    let choice = fuzz.byte() ?? 0, flags = fuzz.byte() ?? 0
    let messages = Conversation.state.messages
    let original = messages[Int(choice & 3) % messages.count]
    let sealed = original.sealed
    let field = { (bit: Int) in flags & (1 << bit) != 0 }

    // The names, as the original record has them, then the fields the harness lays out again.
    var record = Envelope.names(version: Envelope.ratchetVersion, sender: Array(sealed.sender.utf8), senderKey: sealed.senderKey.bytes,
                                recipient: Array(Fixed.recipient.utf8), messageID: Array(sealed.messageID.utf8))
    record += (field(0) ? fuzz.take(Ratchet.idLength) : nil) ?? sealed.ratchetID
    let kind = (field(1) ? fuzz.byte() : nil) ?? (sealed.start == nil ? 0 : 1)
    record.append(kind)
    if kind == 1 {
        let start = sealed.start ?? Conversation.state.aliceRatchets[0].start!
        record += (field(2) ? fuzz.take(32) : nil) ?? start.ephemeralKey.bytes
        Envelope.appendUInt32((field(3) ? fuzz.uint32() : nil) ?? start.signedPrekeyID, to: &record)
        Envelope.appendUInt32((field(3) ? fuzz.uint32() : nil) ?? start.oneTimePrekeyID ?? 0, to: &record)
    }
    var ratchetKey = sealed.header.ratchetKey.bytes
    if field(4), let pick = fuzz.byte() {
        let known: [[UInt8]] = [
            Conversation.aliceRatchet.publicKey.bytes, Conversation.aliceNextRatchet.publicKey.bytes,
            Conversation.signedPrekey.publicKey.bytes, Conversation.bobNextRatchet.publicKey.bytes,
            Conversation.aliceEphemeral.publicKey.bytes,
            [UInt8](repeating: 0, count: 32), [1] + [UInt8](repeating: 0, count: 31),
            lowOrderPoint,
        ]
        ratchetKey = pick == 0xFF ? (fuzz.take(32) ?? ratchetKey) : known[Int(pick) % known.count]
    }
    record += ratchetKey
    let previous = (field(5) ? fuzz.uint32() : nil) ?? sealed.header.previousChainLength
    let number = (field(6) ? fuzz.uint32() : nil) ?? sealed.header.messageNumber
    Envelope.appendUInt32(previous, to: &record)
    Envelope.appendUInt32(number, to: &record)
    Envelope.appendUInt32(UInt32(sealed.ciphertext.count), to: &record)
    record += sealed.ciphertext

    guard let envelope = sealPaddedToRecipient(record) else { return false }
    let (read, opened) = openAndCheck(envelope)
    if let read {
        expect(read.header == RatchetHeader(ratchetKey: X25519PublicKey(bytes: ratchetKey)!, previousChainLength: previous, messageNumber: number),
               "the ratchet header read is not the one laid out")
    }
    // The AEAD's associated data is the whole record up to the ciphertext: any changed field fails.
    expect(!opened || record == original.record, "a message opened with a header it was not sealed under")
    return opened
}

/// The order-8 point of Curve25519 (RFC 7748 §5): its shared secret with any key is all zeros.
private let lowOrderPoint: [UInt8] = Array(hexString: "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800")

private extension Array where Element == UInt8 {
    init(hexString: String) {
        var bytes: [UInt8] = []
        var index = hexString.startIndex
        while index < hexString.endIndex {
            let next = hexString.index(index, offsetBy: 2)
            bytes.append(UInt8(hexString[index..<next], radix: 16)!)
            index = next
        }
        self = bytes
    }
}

/// The conversation's envelopes (mode 0), their records (mode 1), the stored ratchets of both
/// sides (mode 2), header variations that reach each ratchet path (mode 3), and, when
/// spec/vectors/sessions.json exists, its envelopes (mode 0) and ratchets (mode 2).
func fuzzSeeds(root: String) -> [(name: String, bytes: [UInt8])] {
    var seeds: [(name: String, bytes: [UInt8])] = []
    let state = Conversation.state
    // Each message must open where the conversation says, or the seeds would stop short.
    // Where each message opens, by bobRatchets index: the start only in the accepted ratchet; the
    // second everywhere (in the turned ratchet with the key skipped when the third arrived); the
    // third in the ratchets that hold the first chain and have not read it.
    let opensIn: [[Int]] = [[0], [0, 1, 2, 3], [1, 2]]
    for (index, message) in state.messages.enumerated() {
        for (ratchetIndex, ratchet) in state.bobRatchets.enumerated() {
            let opened = (try? message.sealed.open(with: ratchet, identity: Conversation.bob.publicKey, now: Conversation.now,
                                                   newRatchetKey: { Conversation.bobNextRatchet })) != nil
            expect(opened == opensIn[index].contains(ratchetIndex),
                   "message \(index) \(opened ? "opens" : "does not open") in bob's ratchet \(ratchetIndex)")
        }
        expect(openAndCheck(message.envelope).opened, "message \(index) does not open as mode 0")
        seeds.append(("envelope-\(index)", Seeds.mode(0, message.envelope)))
        seeds.append(("record-\(index)", Seeds.mode(1, message.record)))
        // Mode 3 without a replaced field rebuilds the original, which must open.
        let base = UInt8(index)
        expect(openRebuiltHeader([base, 0]), "mode 3 does not rebuild message \(index) as it was")
        let variations: [(String, [UInt8])] = [
            ("identity", [base, 0]),
            ("skip-5", [base, 0x40] + be(message.sealed.header.messageNumber + 5)),
            ("skip-max", [base, 0x40] + be(message.sealed.header.messageNumber + RatchetState.maxSkip + 1)),
            ("number-max", [base, 0x40] + be(.max)),
            ("turn-pn-3", [base, 0x70, 4] + be(3) + be(0)),
            ("turn-pn-max", [base, 0x70, 4] + be(RatchetState.maxSkip + 2) + be(0)),
            ("retired-key", [base, 0x10, 0]),
            ("low-order-key", [base, 0x10, 7]),
            ("zero-key", [base, 0x10, 5]),
            ("kind-2", [base, 0x02, 2]),
            ("kind-0", [base, 0x02, 0]),
            ("kind-1-prekeys", [base, 0x0A, 1] + be(7) + be(2)),
            ("kind-1-no-one-time", [base, 0x0A, 1] + be(7) + be(0)),
            ("kind-1-signed-0", [base, 0x0A, 1] + be(0) + be(1)),
            ("ratchet-id", [base, 0x01] + [UInt8](repeating: 0xAB, count: 16)),
            ("raw-key", [base, 0x10, 0xFF] + Conversation.keyPair(0x12).publicKey.bytes),
        ]
        for (name, input) in variations { seeds.append(("header-\(index)-\(name)", Seeds.mode(3, input))) }
    }
    for (index, ratchet) in state.bobRatchets.enumerated() { seeds.append(("bob-ratchet-\(index)", Seeds.mode(2, ratchet.serialized()))) }
    for (index, ratchet) in state.aliceRatchets.enumerated() { seeds.append(("alice-ratchet-\(index)", Seeds.mode(2, ratchet.serialized()))) }

    // spec/vectors/sessions.json, when present: its layout is not relied on, so every base64url
    // string in it is taken, as an envelope when its length is a size class (and its record too,
    // when it is sealed to bob's key, as the vectors' are), else as a stored ratchet. Their
    // message ids are the vectors' own, so they are starting points for mutation, not openings.
    let vectors = URL(fileURLWithPath: root).appendingPathComponent("spec/vectors/sessions.json")
    if FileManager.default.fileExists(atPath: vectors.path) {
        var strings: [String] = []
        collectStrings(Seeds.json(root, "spec/vectors/sessions.json"), into: &strings)
        for (index, text) in strings.enumerated() {
            guard text.count >= 64, let decoded = Base64URL.decode(text) else { continue }
            let isEnvelope = decoded.count >= Envelope.minimumSize && decoded.count.nonzeroBitCount == 1
            seeds.append(("sessions-json-\(index)", Seeds.mode(isEnvelope ? 0 : 2, decoded)))
            if isEnvelope, let record = record(of: decoded) { seeds.append(("sessions-json-record-\(index)", Seeds.mode(1, record))) }
        }
    }
    return seeds
}

private func be(_ value: UInt32) -> [UInt8] {
    var bytes: [UInt8] = []
    Envelope.appendUInt32(value, to: &bytes)
    return bytes
}

private func collectStrings(_ value: Any, into strings: inout [String]) {
    switch value {
    case let text as String: strings.append(text)
    case let list as [Any]: for item in list { collectStrings(item, into: &strings) }
    case let object as [String: Any]: for key in object.keys.sorted() { collectStrings(object[key]!, into: &strings) }
    default: break
    }
}
