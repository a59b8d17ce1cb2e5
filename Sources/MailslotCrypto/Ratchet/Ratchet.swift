// A ratchet with one contact: who it is with, the X3DH fields its first messages carry, and the
// Double Ratchet state (spec/ratchet.md §3–§4). Sealing and opening are in Formats/Envelope.swift.

/// What a ratchet's first messages carry so that the responder can derive the ratchet too: the
/// initiator's ephemeral key and the ids of the prekeys it used (X3DH).
public struct RatchetStart: Sendable, Equatable {
    /// The initiator's ephemeral X25519 key (EK_A).
    public let ephemeralKey: X25519PublicKey
    /// The id of the responder's signed prekey the initiator used.
    public let signedPrekeyID: UInt32
    /// The id of the one-time prekey the initiator claimed, nil when none was left.
    public let oneTimePrekeyID: UInt32?

    /// Makes the fields (for parsing and tests).
    package init(ephemeralKey: X25519PublicKey, signedPrekeyID: UInt32, oneTimePrekeyID: UInt32?) {
        self.ephemeralKey = ephemeralKey
        self.signedPrekeyID = signedPrekeyID
        self.oneTimePrekeyID = oneTimePrekeyID
    }
}

/// A prekey as a sender obtains it: a signed prekey from a verified key bundle, or a one-time
/// prekey claimed from the relay.
public struct PublishedPrekey: Sendable, Equatable {
    /// The id its owner gave it (1 … 2³² − 1).
    public let id: UInt32
    /// The X25519 public key.
    public let key: X25519PublicKey

    /// Pairs an id with a key.
    public init(id: UInt32, key: X25519PublicKey) {
        self.id = id
        self.key = key
    }
}

/// One conversation's state on one side: a value to store after every message sent or received.
///
/// The forward-secret state two users share, started with X3DH and advanced by the Double
/// Ratchet (spec/ratchet.md); what Signal calls a session. In Mailslot a session is a sign-in.
///
/// Its calls — starting, accepting, restoring, sealing and opening in it — are `package` (for the
/// project's own targets only): a ratchet is a value, and sealing or opening with a stale copy
/// of it (one not stored after the last message) reuses a message key. The project's client keeps
/// each ratchet and its message in one store transaction; an app uses the client, never these.
public struct Ratchet: Sendable {
    /// The length of a ratchet id, in bytes.
    public static let idLength = 16
    /// The label keeps the ratchet's former name ("session"): it is hashed into every id.
    static let idLabel = Array("mailslot-session-id-v2".utf8)

    /// BLAKE2b-128(PAE("mailslot-session-id-v2", IK_A, IK_B, EK_A)): names the ratchet in every
    /// message, so the receiver finds it without trying each one.
    public let id: [UInt8]
    /// The contact's identity key; every message of the ratchet must come from it.
    public let peerIdentity: IdentityPublicKey
    /// Whether this side started the ratchet.
    public let initiated: Bool
    /// The X3DH fields this side's messages carry until the contact has answered; nil after.
    public internal(set) var start: RatchetStart?
    var state: RatchetState

    /// Whether this side can send in the ratchet (the responder can once it has received).
    public var canSend: Bool { state.canSend }

    /// Starts a ratchet with a contact whose bundle (verified for that contact) published
    /// `signedPrekey`, with the one-time prekey claimed for it if there was one.
    package static func initiate(identity: IdentityKeyPair, peerIdentity: IdentityPublicKey, signedPrekey: PublishedPrekey,
                                oneTimePrekey: PublishedPrekey?) throws(EnvelopeError) -> Ratchet {
        try initiate(identity: identity, peerIdentity: peerIdentity, signedPrekey: signedPrekey, oneTimePrekey: oneTimePrekey,
                     ephemeral: X25519KeyPair(), ratchetKey: X25519KeyPair())
    }

    /// ``initiate(identity:peerIdentity:signedPrekey:oneTimePrekey:)`` with given ephemeral and
    /// ratchet keys: for the deterministic vectors only.
    static func initiate(identity: IdentityKeyPair, peerIdentity: IdentityPublicKey, signedPrekey: PublishedPrekey,
                         oneTimePrekey: PublishedPrekey?, ephemeral: X25519KeyPair,
                         ratchetKey: X25519KeyPair) throws(EnvelopeError) -> Ratchet {
        // Id 0 means "none" on the wire: a ratchet started with such a prekey could never be derived again.
        guard signedPrekey.id != 0, oneTimePrekey.map({ $0.id != 0 }) ?? true else { throw .malformedRecord("a prekey id is 0") }
        let secret = try X3DH.initiatorSecret(identity: identity, ephemeral: ephemeral, peerIdentity: peerIdentity,
                                              signedPrekey: signedPrekey.key, oneTimePrekey: oneTimePrekey?.key)
        return Ratchet(id: id(initiator: identity.publicKey, responder: peerIdentity, ephemeral: ephemeral.publicKey),
                       peerIdentity: peerIdentity, initiated: true,
                       start: RatchetStart(ephemeralKey: ephemeral.publicKey, signedPrekeyID: signedPrekey.id,
                                           oneTimePrekeyID: oneTimePrekey?.id),
                       state: try RatchetState(initiatorSecret: secret, peerSignedPrekey: signedPrekey.key, ratchetKey: ratchetKey))
    }

    /// Derives the responder's side of the ratchet that `envelope` starts, with this side's
    /// signed prekey and one-time prekey of the ids it names. Then open the envelope with it.
    package static func accept(_ envelope: RatchetEnvelope, identity: IdentityKeyPair, signedPrekey: X25519KeyPair,
                              oneTimePrekey: X25519KeyPair?) throws(EnvelopeError) -> Ratchet {
        guard let start = envelope.start else { throw .noRatchet }
        guard (start.oneTimePrekeyID == nil) == (oneTimePrekey == nil) else { throw .unknownPrekey }
        let expectedID = id(initiator: envelope.senderKey, responder: identity.publicKey, ephemeral: start.ephemeralKey)
        guard constantTimeEquals(expectedID, envelope.ratchetID) else {
            throw .malformedRecord("the ratchet id is not the one the ratchet start gives")
        }
        let secret = try X3DH.responderSecret(identity: identity, signedPrekey: signedPrekey, oneTimePrekey: oneTimePrekey,
                                              peerIdentity: envelope.senderKey, ephemeral: start.ephemeralKey)
        return Ratchet(id: expectedID, peerIdentity: envelope.senderKey, initiated: false, start: nil,
                       state: RatchetState(responderSecret: secret, signedPrekey: signedPrekey))
    }

    /// The ratchet id of a ratchet started by `initiator` with `responder` and ephemeral key `ephemeral`.
    static func id(initiator: IdentityPublicKey, responder: IdentityPublicKey, ephemeral: X25519PublicKey) -> [UInt8] {
        blake2b(preAuthenticationEncoding([idLabel, initiator.bytes, responder.bytes, ephemeral.bytes]), length: idLength)
    }

    private init(id: [UInt8], peerIdentity: IdentityPublicKey, initiated: Bool, start: RatchetStart?, state: RatchetState) {
        self.id = id
        self.peerIdentity = peerIdentity
        self.initiated = initiated
        self.start = start
        self.state = state
    }

    /// This ratchet without its skipped message keys older than
    /// ``RatchetState/skippedKeyLifetime`` at `now` (Unix seconds); nil when none expired. For
    /// ratchets that receive nothing more, whose keys receiving would otherwise never drop.
    package func droppingExpiredSkippedKeys(now: Int64) -> Ratchet? {
        let kept = state.skipped.filter { $0.storedAt >= now - RatchetState.skippedKeyLifetime }
        guard kept.count < state.skipped.count else { return nil }
        var pruned = self
        pruned.state.skipped = kept
        return pruned
    }

    // MARK: Storage form

    private static let storageVersion: UInt8 = 1

    /// The ratchet as bytes for the client's store (spec/ratchet.md §7). It holds secrets: wipe
    /// it once stored.
    package func serialized() -> [UInt8] {
        var stateBytes = state.serialized()
        defer { wipe(&stateBytes) }
        var out: [UInt8] = []
        out.reserveCapacity(1 + Self.idLength + 32 + 1 + 40 + stateBytes.count)  // no reallocation leaves secrets behind
        out.append(Self.storageVersion)
        out += id
        out += peerIdentity.bytes
        out.append((initiated ? 1 : 0) | (start == nil ? 0 : 2))
        if let start {
            out += start.ephemeralKey.bytes
            out += withUnsafeBytes(of: start.signedPrekeyID.bigEndian, Array.init)
            out += withUnsafeBytes(of: (start.oneTimePrekeyID ?? 0).bigEndian, Array.init)
        }
        out += stateBytes
        return out
    }

    /// Reads what ``serialized()`` wrote; nil if it is not a ratchet.
    package init?(serialized bytes: [UInt8]) {
        var reader = RecordReader(bytes: bytes[...])
        do {
            guard try reader.byte() == Self.storageVersion else { return nil }
            id = try reader.take(Self.idLength)
            peerIdentity = IdentityPublicKey(checkedBytes: try reader.take(IdentityPublicKey.byteCount))
            let flags = try reader.byte()
            guard flags & ~3 == 0 else { return nil }
            initiated = flags & 1 != 0
            if flags & 2 != 0 {
                let ephemeral = X25519PublicKey(checkedBytes: try reader.take(32))
                let signedID = try reader.uint32(), oneTimeID = try reader.uint32()
                start = RatchetStart(ephemeralKey: ephemeral, signedPrekeyID: signedID, oneTimePrekeyID: oneTimeID == 0 ? nil : oneTimeID)
            } else {
                start = nil
            }
            var rest = try reader.take(bytes.endIndex - reader.position)
            defer { wipe(&rest) }
            guard let state = RatchetState(serialized: rest) else { return nil }
            self.state = state
        } catch {
            return nil
        }
    }
}
