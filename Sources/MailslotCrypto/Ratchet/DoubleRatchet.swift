// The Double Ratchet of one conversation (spec/ratchet.md §4), as Signal specifies it
// (https://signal.org/docs/specifications/doubleratchet/), with libsodium alone:
//
//   KDF_RK(rk, dh) = HKDF-SHA-256(salt: rk, ikm: dh, info: "mailslot-ratchet-root-v2", 64) → rk' ‖ ck
//   KDF_CK(ck)     = ck' = HMAC-SHA-256(ck, 0x02), mk = HMAC-SHA-256(ck, 0x01)
//   message key    = HKDF-SHA-256(salt: —, ikm: mk, info: "mailslot-message-key-v2", 56) → key ‖ nonce
//
// The state is a value: receiving works on a copy and the caller keeps the copy only when the body
// decrypted, so a forged or replayed message never moves a ratchet.

/// The clear header of one ratchet message: the sender's current ratchet key, the length of its
/// previous sending chain, and this message's number in the current one.
public struct RatchetHeader: Sendable, Equatable {
    /// The sender's current ratchet public key.
    public let ratchetKey: X25519PublicKey
    /// How many messages the sender sent in its previous sending chain (PN).
    public let previousChainLength: UInt32
    /// This message's number in the sender's current sending chain (N), from 0.
    public let messageNumber: UInt32

    /// Makes a header (for parsing and tests).
    package init(ratchetKey: X25519PublicKey, previousChainLength: UInt32, messageNumber: UInt32) {
        self.ratchetKey = ratchetKey
        self.previousChainLength = previousChainLength
        self.messageNumber = messageNumber
    }
}

/// A message key expanded into the AEAD key and nonce of one message.
struct MessageKey {
    let key: SecretBytes
    let nonce: [UInt8]

    static let info = Array("mailslot-message-key-v2".utf8)

    init(_ messageKey: SecretBytes) {
        var expanded = messageKey.withUnsafeBytes { raw in
            var material = Array(raw)
            defer { wipe(&material) }
            return hkdfSHA256(salt: [], inputKeyMaterial: material, info: Self.info, length: 56)
        }
        defer { wipe(&expanded) }
        key = SecretBytes(copying: expanded[0..<32])
        nonce = Array(expanded[32..<56])  // not secret once the key is gone
    }
}

/// One conversation's ratchet state.
public struct RatchetState: Sendable {
    /// The most message keys one received message may make the receiver skip and keep (MAX_SKIP).
    public static let maxSkip: UInt32 = 1000
    /// The most skipped message keys a ratchet keeps; the oldest go first.
    public static let maxStoredSkipped = 2000
    /// How long a skipped message key is kept, in seconds: the longest message lifetime a relay
    /// grants (30 days, spec/protocol.md §11) and a day for clocks; after that no relay still holds
    /// the message it would open.
    public static let skippedKeyLifetime: Int64 = 31 * 86_400
    /// How many replaced peer ratchet keys are remembered, to tell a replay from a forgery.
    static let maxRetiredPeerKeys = 16

    static let rootInfo = Array("mailslot-ratchet-root-v2".utf8)

    /// A key of a message that has not arrived yet, kept until it does or it expires.
    struct SkippedKey: Sendable {
        let ratchetKey: X25519PublicKey
        let number: UInt32
        let key: SecretBytes
        let storedAt: Int64
    }

    var rootKey: SecretBytes
    var sendingChain: SecretBytes?
    var receivingChain: SecretBytes?
    var ownRatchet: X25519KeyPair
    var peerRatchet: X25519PublicKey?
    var sent: UInt32 = 0
    var received: UInt32 = 0
    var previousSent: UInt32 = 0
    var skipped: [SkippedKey] = []
    var retiredPeerKeys: [X25519PublicKey] = []

    /// The initiator's state (Alice): a first ratchet step against the responder's signed prekey,
    /// which is the responder's first ratchet key.
    init(initiatorSecret secret: SecretBytes, peerSignedPrekey: X25519PublicKey,
         ratchetKey: X25519KeyPair = X25519KeyPair()) throws(EnvelopeError) {
        ownRatchet = ratchetKey
        peerRatchet = peerSignedPrekey
        (rootKey, sendingChain) = try Self.rootStep(secret, ratchetKey, peerSignedPrekey)
    }

    /// The responder's state (Bob): its signed prekey is its first ratchet key; it sends only after
    /// the initiator's first message has turned the ratchet.
    init(responderSecret secret: SecretBytes, signedPrekey: X25519KeyPair) {
        rootKey = secret
        ownRatchet = signedPrekey
    }

    /// Whether this side has a sending chain (the responder has none until it received).
    var canSend: Bool { sendingChain != nil && sent < .max }  // the counter never wraps: a new ratchet instead

    /// The header and message key of the next message this side sends.
    mutating func nextSendingKey() -> (RatchetHeader, MessageKey) {
        guard let chain = sendingChain else { preconditionFailure("RatchetState: no sending chain before the first message received") }
        let (next, messageKey) = Self.chainStep(chain)
        sendingChain = next
        defer { sent += 1 }
        return (RatchetHeader(ratchetKey: ownRatchet.publicKey, previousChainLength: previousSent, messageNumber: sent),
                MessageKey(messageKey))
    }

    /// The message key for a received `header`, and the state to keep if the body decrypts with
    /// it. `now` (Unix seconds) stamps skipped keys and drops those older than ``skippedKeyLifetime``.
    func receiving(_ header: RatchetHeader, now: Int64,
                   newRatchetKey: () -> X25519KeyPair = { X25519KeyPair() }) throws(EnvelopeError) -> (MessageKey, RatchetState) {
        var next = self
        next.skipped.removeAll { $0.storedAt < now - Self.skippedKeyLifetime }
        if let index = next.skipped.firstIndex(where: { $0.ratchetKey == header.ratchetKey && $0.number == header.messageNumber }) {
            let found = next.skipped.remove(at: index)
            return (MessageKey(found.key), next)
        }
        if header.ratchetKey != next.peerRatchet {
            // A key this side already moved past is a replay (or too old), not a new turn.
            guard !next.retiredPeerKeys.contains(header.ratchetKey) else { throw .staleMessage }
            try next.skip(to: header.previousChainLength, now: now)
            try next.turn(to: header.ratchetKey, newRatchetKey: newRatchetKey())
        }
        guard header.messageNumber < .max else { throw .tooManySkipped }  // its successor's number would wrap
        guard header.messageNumber >= next.received else { throw .staleMessage }
        try next.skip(to: header.messageNumber, now: now)
        guard let chain = next.receivingChain else { throw .staleMessage }
        let (chainKey, messageKey) = Self.chainStep(chain)
        next.receivingChain = chainKey
        next.received += 1
        return (MessageKey(messageKey), next)
    }

    /// Keeps the keys of the receiving chain's messages before number `end`, which have not arrived.
    private mutating func skip(to end: UInt32, now: Int64) throws(EnvelopeError) {
        guard var chain = receivingChain, let peer = peerRatchet, end > received else { return }
        guard end - received <= Self.maxSkip else { throw .tooManySkipped }
        while received < end {
            let (nextChain, messageKey) = Self.chainStep(chain)
            skipped.append(SkippedKey(ratchetKey: peer, number: received, key: messageKey, storedAt: now))
            chain = nextChain
            received += 1
        }
        receivingChain = chain
        if skipped.count > Self.maxStoredSkipped { skipped.removeFirst(skipped.count - Self.maxStoredSkipped) }
    }

    /// The DH ratchet step: a new receiving chain from the peer's new key, then a new key pair of
    /// our own and a new sending chain.
    private mutating func turn(to peerKey: X25519PublicKey, newRatchetKey: X25519KeyPair) throws(EnvelopeError) {
        if let old = peerRatchet {
            retiredPeerKeys.append(old)
            if retiredPeerKeys.count > Self.maxRetiredPeerKeys { retiredPeerKeys.removeFirst() }
        }
        previousSent = sent
        sent = 0
        received = 0
        peerRatchet = peerKey
        (rootKey, receivingChain) = try Self.rootStep(rootKey, ownRatchet, peerKey)
        ownRatchet = newRatchetKey
        (rootKey, sendingChain) = try Self.rootStep(rootKey, ownRatchet, peerKey)
    }

    /// KDF_RK over DH(own, peer); an all-zero DH output (a low-order peer key) is refused.
    private static func rootStep(_ root: SecretBytes, _ own: X25519KeyPair,
                                 _ peer: X25519PublicKey) throws(EnvelopeError) -> (SecretBytes, SecretBytes) {
        guard var shared = own.agree(with: peer) else { throw .ratchetMismatch }
        defer { wipe(&shared) }
        var output = root.withUnsafeBytes { raw in
            var salt = Array(raw)
            defer { wipe(&salt) }
            return hkdfSHA256(salt: salt, inputKeyMaterial: shared, info: rootInfo, length: 64)
        }
        defer { wipe(&output) }
        return (SecretBytes(copying: output[0..<32]), SecretBytes(copying: output[32..<64]))
    }

    /// KDF_CK: the next chain key and this step's message key.
    private static func chainStep(_ chain: SecretBytes) -> (SecretBytes, SecretBytes) {
        var messageKey = hmacSHA256(key: chain, [0x01]), nextChain = hmacSHA256(key: chain, [0x02])
        defer { wipe(&messageKey); wipe(&nextChain) }
        return (SecretBytes(copying: nextChain), SecretBytes(copying: messageKey))
    }
}

// MARK: - Storage form

extension RatchetState {
    private static let storageVersion: UInt8 = 1

    /// The state as bytes for the client's store (not a wire format; see spec/ratchet.md §7).
    /// It holds secrets: the caller wipes it once stored.
    func serialized() -> [UInt8] {
        var out: [UInt8] = []
        // One allocation of the final size: a reallocation would leave a copy of the keys behind.
        out.reserveCapacity(1 + 32 + 1 + 64 + 32 + 32 + 12 + 4 + skipped.count * 76 + 1 + 32 * retiredPeerKeys.count)
        out.append(Self.storageVersion)
        func append(_ secret: SecretBytes) { secret.withUnsafeBytes { out += $0 } }
        func append32(_ value: UInt32) { out += withUnsafeBytes(of: value.bigEndian, Array.init) }
        append(rootKey)
        out.append((sendingChain == nil ? 0 : 1) | (receivingChain == nil ? 0 : 2) | (peerRatchet == nil ? 0 : 4))
        if let sendingChain { append(sendingChain) }
        if let receivingChain { append(receivingChain) }
        append(ownRatchet.secretKey)
        if let peerRatchet { out += peerRatchet.bytes }
        append32(sent); append32(received); append32(previousSent)
        append32(UInt32(skipped.count))
        for key in skipped {
            out += key.ratchetKey.bytes
            append32(key.number)
            append(key.key)
            out += withUnsafeBytes(of: key.storedAt.bigEndian, Array.init)
        }
        out.append(UInt8(retiredPeerKeys.count))
        for key in retiredPeerKeys { out += key.bytes }
        return out
    }

    /// Reads what ``serialized()`` wrote; nil if it is not such a state.
    init?(serialized bytes: [UInt8]) {
        var reader = RecordReader(bytes: bytes[...])
        func secret() throws(EnvelopeError) -> SecretBytes {
            var raw = try reader.take(32)
            defer { wipe(&raw) }
            return SecretBytes(copying: raw)
        }
        func key() throws(EnvelopeError) -> X25519PublicKey { X25519PublicKey(checkedBytes: try reader.take(32)) }
        do {
            guard try reader.byte() == Self.storageVersion else { return nil }
            rootKey = try secret()
            let flags = try reader.byte()
            guard flags & ~7 == 0 else { return nil }
            sendingChain = flags & 1 != 0 ? try secret() : nil
            receivingChain = flags & 2 != 0 ? try secret() : nil
            guard let own = X25519KeyPair(secretKey: try secret()) else { return nil }
            ownRatchet = own
            peerRatchet = flags & 4 != 0 ? try key() : nil
            sent = try reader.uint32(); received = try reader.uint32(); previousSent = try reader.uint32()
            let skippedCount = try reader.uint32()
            guard skippedCount <= Self.maxStoredSkipped else { return nil }
            for _ in 0..<skippedCount {
                let ratchetKey = try key(), number = try reader.uint32(), messageKey = try secret()
                let storedAt = try reader.take(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
                skipped.append(SkippedKey(ratchetKey: ratchetKey, number: number, key: messageKey, storedAt: Int64(bitPattern: storedAt)))
            }
            let retiredCount = try reader.byte()
            guard retiredCount <= Self.maxRetiredPeerKeys else { return nil }
            for _ in 0..<retiredCount { retiredPeerKeys.append(try key()) }
            guard reader.isAtEnd else { return nil }
        } catch {
            return nil
        }
    }
}
