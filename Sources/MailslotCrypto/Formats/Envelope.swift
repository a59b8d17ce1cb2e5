// The sealed-envelope format, versions 1 and 2: the one place that says what the relay stores for
// each message. Version 1 is specified byte for byte in spec/envelope.md, version 2 (ratchets with
// forward secrecy) in spec/ratchet.md. Both share the outer layer and padding, so the relay cannot
// tell them apart.
//
//   envelope = crypto_box_seal(padded, recipient mailbox key)            (X25519, 48 bytes overhead)
//   padded   = record || 0x80 || 0x00…   so that the envelope is 2^k bytes, 512 ≤ 2^k ≤ 1 MiB
//   record   = 0x01                                    version
//              u8 len || sender uid
//              32     sender identity key (Ed25519)
//              u8 len || recipient uid
//              u8 len || message id
//              u32be len || body                        the chat message, JSON
//              64     signature
//   signature = Ed25519(sender identity key, PAE("mailslot-envelope-v1", sender uid, sender identity
//               key, recipient uid, recipient mailbox key, message id, body))
//
//   record v2 = 0x02                                    version
//              u8 len || sender uid
//              32     sender identity key (Ed25519)
//              u8 len || recipient uid
//              u8 len || message id
//              16     ratchet id
//              u8     kind: 0x00 message, 0x01 message that starts the ratchet, then:
//                       32 ephemeral key || u32be signed prekey id || u32be one-time prekey id (0: none)
//              32     ratchet key
//              u32be  previous chain length
//              u32be  message number
//              u32be len || ciphertext                  XChaCha20-Poly1305(message key, body, AD)
//   AD = PAE("mailslot-envelope-v2", the record up to the ciphertext length, recipient identity key)

/// Why an envelope was refused. Each case has a stable ``code``, which clients store with a
/// rejected message.
public enum EnvelopeError: Error, Equatable, Sendable {
    /// The envelope's length is not one of the size classes (512 bytes … 1 MiB, powers of two).
    case invalidSize
    /// The sealed box does not open with this mailbox key: sealed to another key, or altered.
    case cannotDecrypt
    /// The padding after the record is not `0x80 0x00…`.
    case badPadding
    /// A record version this implementation does not know.
    case unsupportedVersion(UInt8)
    /// The record's fields do not parse (lengths, identifier grammar, trailing bytes).
    case malformedRecord(String)
    /// The record names another recipient: the envelope was moved to another mailbox.
    case wrongRecipient
    /// The record names another message id: the envelope was replayed under another id.
    case wrongMessageID
    /// The signature does not verify: the record was forged or altered.
    case badSignature
    /// The body is not a valid chat message.
    case invalidBody(String)
    /// The body's `sender.id` is not the uid that signed the envelope.
    case senderMismatch
    /// Sealing only: the message does not fit in the largest size class.
    case tooLarge
    /// Sealing only: the recipient's mailbox key is a low-order point nothing can be sealed to.
    case unusableMailboxKey
    /// Version 2: a message of a ratchet the recipient does not hold, and not a ratchet start.
    /// Its code, `envelope_no_session`, keeps the ratchet's former name: it is on the wire.
    case noRatchet
    /// Version 2: a ratchet start names a signed or one-time prekey the recipient does not hold.
    case unknownPrekey
    /// Version 2: the body does not decrypt in the ratchet it names (another sender key, a key
    /// agreement with a low-order key, or an altered or forged message). Its code,
    /// `envelope_session_mismatch`, keeps the ratchet's former name: it is on the wire.
    case ratchetMismatch
    /// Version 2: the key of this message was used or discarded already: a replay, or too old.
    case staleMessage
    /// Version 2: the message would make the recipient skip more than ``RatchetState/maxSkip`` keys.
    case tooManySkipped

    /// The stable, documented code of this failure (spec/envelope.md).
    public var code: String {
        switch self {
        case .invalidSize: "envelope_invalid_size"
        case .cannotDecrypt: "envelope_cannot_decrypt"
        case .badPadding: "envelope_bad_padding"
        case .unsupportedVersion: "envelope_unsupported_version"
        case .malformedRecord: "envelope_malformed_record"
        case .wrongRecipient: "envelope_wrong_recipient"
        case .wrongMessageID: "envelope_wrong_message_id"
        case .badSignature: "envelope_bad_signature"
        case .invalidBody: "envelope_invalid_body"
        case .senderMismatch: "envelope_sender_mismatch"
        case .tooLarge: "envelope_too_large"
        case .unusableMailboxKey: "envelope_unusable_mailbox_key"
        case .noRatchet: "envelope_no_session"
        case .unknownPrekey: "envelope_unknown_prekey"
        case .ratchetMismatch: "envelope_session_mismatch"
        case .staleMessage: "envelope_stale_message"
        case .tooManySkipped: "envelope_too_many_skipped"
        }
    }
}

/// An envelope that opened and verified: who sent it, with which key, and what it says.
public struct OpenedEnvelope: Sendable, Equatable {
    /// The uid that signed the envelope (compare it with the author the relay stamped).
    public let sender: String
    /// The identity key that signed it (compare it with the key pinned for `sender`).
    public let senderKey: IdentityPublicKey
    /// The message id the envelope is bound to.
    public let messageID: String
    /// The signed body, exactly as the sender wrote it.
    public let body: [UInt8]
    /// The body, decoded and checked.
    public let message: ChatMessage
}

/// Seals chat messages to a recipient and opens them again.
public enum Envelope {
    /// The record version this implementation writes and reads.
    public static let version: UInt8 = 1
    /// The record version of messages in a ratchet (spec/ratchet.md).
    public static let ratchetVersion: UInt8 = 2
    /// The smallest envelope, in bytes.
    public static let minimumSize = 512
    /// The largest envelope, in bytes (the relay may set a lower limit; 64 KiB by default).
    public static let maximumSize = 1 << 20
    /// The domain-separation label that starts every signed record.
    static let signatureLabel = Array("mailslot-envelope-v1".utf8)
    static let version2Label = Array("mailslot-envelope-v2".utf8)
    static let sealOverhead = 48, signatureBytes = 64

    /// The envelope size a record of `recordLength` bytes is padded to: the smallest power of two
    /// ≥ 512 with room for the record, one padding byte and the sealed box's 48 bytes.
    public static func sizeClass(forRecordLength recordLength: Int) -> Int? {
        var size = minimumSize
        while size < recordLength + 1 + sealOverhead {
            size <<= 1
            if size > maximumSize { return nil }
        }
        return size
    }

    /// Seals `message` from `sender` (signing with `identity`) to `recipient`'s `mailboxKey`,
    /// bound to message id `id`.
    ///
    /// ```swift
    /// let id = MessageID.generate()
    /// let envelope = try Envelope.seal(message, id: id, from: "alice", identity: aliceIdentity,
    ///                                  to: "bob", mailboxKey: bobBundle.mailboxKey)
    /// ```
    ///
    /// - Parameters:
    ///   - message: The chat message; its `sender.id` must be `sender`.
    ///   - id: The message id the relay will store it under; the recipient checks it.
    ///   - sender: The sender's uid.
    ///   - identity: The sender's identity key pair, which signs the body.
    ///   - recipient: The recipient's uid.
    ///   - mailboxKey: The recipient's mailbox public key, from their verified ``KeyBundle``.
    /// - Returns: The envelope, padded to its size class (spec/envelope.md).
    /// - Throws: ``EnvelopeError`` when the message is invalid, names another sender, or is too
    ///   large for the largest envelope.
    public static func seal(_ message: ChatMessage, id: String, from sender: String, identity: IdentityKeyPair,
                            to recipient: String, mailboxKey: MailboxPublicKey) throws(EnvelopeError) -> [UInt8] {
        try message.validate()
        guard message.sender.id == sender else { throw .senderMismatch }
        return try seal(body: try message.encoded(), id: id, from: sender, identity: identity,
                        to: recipient, mailboxKey: mailboxKey)
    }

    /// Seals raw body bytes. Internal: tests use it to build envelopes with invalid bodies.
    static func seal(body: [UInt8], id: String, from sender: String, identity: IdentityKeyPair,
                     to recipient: String, mailboxKey: MailboxPublicKey) throws(EnvelopeError) -> [UInt8] {
        try checkSealable(sender: sender, recipient: recipient, id: id)
        let senderUID = Array(sender.utf8), recipientUID = Array(recipient.utf8), messageID = Array(id.utf8)

        let signature = identity.sign(signedBytes(sender: senderUID, senderKey: identity.publicKey.bytes,
                                                  recipient: recipientUID, mailboxKey: mailboxKey.bytes,
                                                  messageID: messageID, body: body))
        var padded = try pad(record(version: version, sender: senderUID, senderKey: identity.publicKey.bytes,
                                    recipient: recipientUID, messageID: messageID, body: body, signature: signature))
        defer { wipe(&padded) }
        guard let envelope = mailboxKey.seal(padded) else { throw .unusableMailboxKey }
        return envelope
    }

    /// Sealing's identifier checks (spec/envelope.md §2.5 step 2).
    static func checkSealable(sender: String, recipient: String, id: String) throws(EnvelopeError) {
        guard Identifier.isValidUID(sender) else { throw .malformedRecord("the sender is not a valid uid") }
        guard Identifier.isValidUID(recipient) else { throw .malformedRecord("the recipient is not a valid uid") }
        guard Identifier.isValidMessageID(id) else { throw .malformedRecord("the message id is not valid") }
    }

    /// Seals `message` from `sender` to `recipient` in `ratchet`, a ratchet with the recipient's
    /// identity key, and to the recipient's `mailboxKey`, bound to message id `id` (record version
    /// 2, spec/ratchet.md §5). `ratchet` advances only when sealing succeeds: store it with the
    /// envelope, in one transaction. `package`: sealing again with a stale copy of `ratchet` (one
    /// not stored after the last seal) would reuse a message key; only the project's client, which
    /// keeps the ratchet and the envelope in one transaction, calls it.
    package static func seal(_ message: ChatMessage, id: String, from sender: String, identity: IdentityKeyPair,
                            to recipient: String, mailboxKey: MailboxPublicKey,
                            ratchet: inout Ratchet) throws(EnvelopeError) -> [UInt8] {
        try message.validate()
        guard message.sender.id == sender else { throw .senderMismatch }
        return try seal(body: try message.encoded(), id: id, from: sender, identity: identity, to: recipient,
                        mailboxKey: mailboxKey, ratchet: &ratchet)
    }

    /// Seals raw body bytes in a ratchet: tests use it, and the vectors with a deterministic
    /// `outerSeal` in place of `crypto_box_seal`'s random ephemeral key; the client's group send,
    /// one body (validated and encoded once) for every member's copy. `package`, as above.
    package static func seal(body: [UInt8], id: String, from sender: String, identity: IdentityKeyPair, to recipient: String,
                     mailboxKey: MailboxPublicKey, ratchet: inout Ratchet,
                     outerSeal: (([UInt8]) -> [UInt8]?)? = nil) throws(EnvelopeError) -> [UInt8] {
        try checkSealable(sender: sender, recipient: recipient, id: id)
        guard ratchet.canSend else { throw .noRatchet }
        var next = ratchet
        let (header, key) = next.state.nextSendingKey()
        var prefix = names(version: ratchetVersion, sender: Array(sender.utf8), senderKey: identity.publicKey.bytes,
                           recipient: Array(recipient.utf8), messageID: Array(id.utf8))
        prefix += ratchet.id
        if let start = ratchet.start {
            prefix.append(1)
            prefix += start.ephemeralKey.bytes
            appendUInt32(start.signedPrekeyID, to: &prefix)
            appendUInt32(start.oneTimePrekeyID ?? 0, to: &prefix)
        } else {
            prefix.append(0)
        }
        prefix += header.ratchetKey.bytes
        appendUInt32(header.previousChainLength, to: &prefix)
        appendUInt32(header.messageNumber, to: &prefix)
        let ciphertext = aeadSeal(body, associatedData: preAuthenticationEncoding([version2Label, prefix, ratchet.peerIdentity.bytes]),
                                  key: key.key, nonce: key.nonce)
        var record = prefix
        appendUInt32(UInt32(clamping: ciphertext.count), to: &record)
        record += ciphertext
        var padded = try pad(record)
        defer { wipe(&padded) }
        guard let envelope = outerSeal.map({ $0(padded) }) ?? mailboxKey.seal(padded) else { throw .unusableMailboxKey }
        ratchet = next
        return envelope
    }

    /// Lays out the record's fields (see the table at the top of this file).
    static func record(version: UInt8, sender: [UInt8], senderKey: [UInt8], recipient: [UInt8], messageID: [UInt8],
                       body: [UInt8], signature: [UInt8]) -> [UInt8] {
        var record = names(version: version, sender: sender, senderKey: senderKey, recipient: recipient, messageID: messageID)
        appendUInt32(UInt32(clamping: body.count), to: &record)
        record += body
        record += signature
        return record
    }

    /// The fields both record versions start with: version, sender uid and key, recipient uid, message id.
    static func names(version: UInt8, sender: [UInt8], senderKey: [UInt8], recipient: [UInt8], messageID: [UInt8]) -> [UInt8] {
        var record: [UInt8] = [version]
        record.append(UInt8(sender.count)); record += sender
        record += senderKey
        record.append(UInt8(recipient.count)); record += recipient
        record.append(UInt8(messageID.count)); record += messageID
        return record
    }

    static func appendUInt32(_ value: UInt32, to bytes: inout [UInt8]) {
        bytes += [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
    }

    /// Pads `record` to its size class, less the sealed box's overhead, and wipes the record.
    static func pad(_ record: consuming [UInt8]) throws(EnvelopeError) -> [UInt8] {
        var input = record
        defer { wipe(&input) }
        guard let size = sizeClass(forRecordLength: input.count) else { throw .tooLarge }
        // One allocation of the final size, so no unwiped intermediate copy is left behind.
        var padded = [UInt8](repeating: 0, count: size - sealOverhead)
        padded.replaceSubrange(0..<input.count, with: input)  // same length: in place
        padded[input.count] = 0x80
        return padded
    }

    /// Opens a version 1 `envelope` with the recipient's `keys` and checks everything: that it was
    /// sealed to these keys, for `recipient` and message id `id`, signed by the key it names, and
    /// that the body is a chat message from that sender. The caller then compares
    /// ``OpenedEnvelope/sender`` with the relay-stamped author and ``OpenedEnvelope/senderKey``
    /// with the pinned key. A version 2 envelope is ``EnvelopeError/unsupportedVersion(_:)`` here:
    /// open it with ``unseal(_:id:recipient:keys:)``.
    ///
    /// - Parameters:
    ///   - envelope: The envelope as the relay delivered it.
    ///   - id: The message id the relay delivered it under.
    ///   - recipient: This user's uid.
    ///   - keys: This device's mailbox key pair.
    /// - Returns: The sender, the sender's identity key, the message id and the verified message.
    /// - Throws: ``EnvelopeError``: the envelope was not sealed to these keys, for this recipient
    ///   and id, or its signature or body fails a check.
    public static func open(_ envelope: [UInt8], id: String, recipient: String,
                            keys: MailboxKeyPair) throws(EnvelopeError) -> OpenedEnvelope {
        switch try unseal(envelope, id: id, recipient: recipient, keys: keys) {
        case .version1(let opened): opened
        case .version2: throw .unsupportedVersion(2)
        }
    }

    /// Opens the outer layer of `envelope` with the recipient's `keys` and reads its record. A
    /// version 1 record is checked entirely (as ``open(_:id:recipient:keys:)`` does); a version 2
    /// record is checked up to its body, which only the client library decrypts, in the ratchet
    /// it names (`RatchetEnvelope.open(with:identity:now:)`, `package`: spec/ratchet.md).
    public static func unseal(_ envelope: [UInt8], id: String, recipient: String,
                              keys: MailboxKeyPair) throws(EnvelopeError) -> UnsealedEnvelope {
        guard envelope.count >= minimumSize, envelope.count <= maximumSize,
              envelope.count & (envelope.count - 1) == 0 else { throw .invalidSize }
        guard var padded = keys.open(sealed: envelope) else { throw .cannotDecrypt }
        defer { wipe(&padded) }

        // Strip ISO/IEC 7816-4 padding. The box is authenticated already, so this is no oracle.
        guard let marker = padded.lastIndex(where: { $0 != 0 }), padded[marker] == 0x80,
              sizeClass(forRecordLength: marker) == envelope.count else { throw .badPadding }  // the smallest class only
        var reader = RecordReader(bytes: padded[..<marker])

        let recordVersion = try reader.byte()
        guard recordVersion == version || recordVersion == ratchetVersion else { throw .unsupportedVersion(recordVersion) }
        let senderUID = try reader.shortString()
        let senderKeyBytes = try reader.take(IdentityPublicKey.byteCount)
        let recipientUID = try reader.shortString()
        let messageID = try reader.shortString()
        if recordVersion == ratchetVersion {
            return .version2(try RatchetEnvelope(reading: &reader, sender: senderUID, senderKey: senderKeyBytes,
                                                 recipient: recipientUID, messageID: messageID, expectedRecipient: recipient,
                                                 expectedID: id))
        }
        let body = try reader.take(Int(try reader.uint32()))
        let signature = try reader.take(signatureBytes)
        guard reader.isAtEnd else { throw .malformedRecord("bytes follow the signature") }
        let (sender, boundID) = try checkNames(sender: senderUID, recipient: recipientUID, messageID: messageID,
                                               expectedRecipient: recipient, expectedID: id)

        let senderKey = IdentityPublicKey(checkedBytes: senderKeyBytes)
        let signed = signedBytes(sender: senderUID, senderKey: senderKeyBytes, recipient: recipientUID,
                                 mailboxKey: keys.publicKey.bytes, messageID: messageID, body: body)
        guard senderKey.verify(signature: signature, of: signed) else { throw .badSignature }

        let message = try ChatMessage.decode(body)
        guard message.sender.id == sender else { throw .senderMismatch }
        return .version1(OpenedEnvelope(sender: sender, senderKey: senderKey, messageID: boundID, body: body, message: message))
    }

    /// Checks the record's names against their grammar, then against the opener's uid and the
    /// delivered id, in the order of spec/envelope.md §2.6 checks 8–12. Returns sender and id.
    static func checkNames(sender senderUID: [UInt8], recipient recipientUID: [UInt8], messageID: [UInt8],
                           expectedRecipient: String, expectedID: String) throws(EnvelopeError) -> (String, String) {
        guard let sender = Optional(String(decoding: senderUID, as: UTF8.self)), Identifier.isValidUID(sender) else {
            throw .malformedRecord("the sender is not a valid uid")
        }
        guard let named = Optional(String(decoding: recipientUID, as: UTF8.self)), Identifier.isValidUID(named) else {
            throw .malformedRecord("the recipient is not a valid uid")
        }
        guard let boundID = Optional(String(decoding: messageID, as: UTF8.self)), Identifier.isValidMessageID(boundID) else {
            throw .malformedRecord("the message id is not valid")
        }
        guard named == expectedRecipient else { throw .wrongRecipient }
        guard boundID == expectedID else { throw .wrongMessageID }
        return (sender, boundID)
    }

    private static func signedBytes(sender: [UInt8], senderKey: [UInt8], recipient: [UInt8], mailboxKey: [UInt8],
                                    messageID: [UInt8], body: [UInt8]) -> [UInt8] {
        preAuthenticationEncoding([signatureLabel, sender, senderKey, recipient, mailboxKey, messageID, body])
    }
}

/// What ``Envelope/unseal(_:id:recipient:keys:)`` found: a version 1 message, opened and
/// verified, or a version 2 message, to open in its ratchet.
public enum UnsealedEnvelope: Sendable {
    /// A version 1 envelope, opened and verified.
    case version1(OpenedEnvelope)
    /// A version 2 envelope, read up to its encrypted body.
    case version2(RatchetEnvelope)
}

/// A version 2 envelope whose outer layer is open: what it says in the clear of its record, and
/// the body still encrypted in the ratchet it names (spec/ratchet.md §5).
public struct RatchetEnvelope: Sendable {
    /// The uid the record names as its sender (compare it with the relay-stamped author).
    public let sender: String
    /// The identity key the record names (compare it with the key pinned for `sender`).
    public let senderKey: IdentityPublicKey
    /// The message id the record is bound to.
    public let messageID: String
    /// The ratchet the message belongs to.
    public let ratchetID: [UInt8]
    /// The X3DH fields when the message can start the ratchet, nil otherwise.
    public let start: RatchetStart?
    /// The ratchet header.
    public let header: RatchetHeader
    let authenticatedPrefix: [UInt8]
    let ciphertext: [UInt8]

    /// Reads the version 2 fields after the message id (spec/ratchet.md §5.2, checks in order).
    init(reading reader: inout RecordReader, sender senderUID: [UInt8], senderKey: [UInt8], recipient: [UInt8],
         messageID: [UInt8], expectedRecipient: String, expectedID: String) throws(EnvelopeError) {
        let recordStart = reader.bytes.startIndex
        let ratchetID = try reader.take(Ratchet.idLength)
        let kind = try reader.byte()
        guard kind <= 1 else { throw .malformedRecord("unknown message kind \(kind)") }
        var start: RatchetStart?
        if kind == 1 {
            let ephemeral = X25519PublicKey(checkedBytes: try reader.take(X25519PublicKey.byteCount))
            let signedID = try reader.uint32(), oneTimeID = try reader.uint32()
            guard signedID != 0 else { throw .malformedRecord("the signed prekey id is 0") }
            start = RatchetStart(ephemeralKey: ephemeral, signedPrekeyID: signedID, oneTimePrekeyID: oneTimeID == 0 ? nil : oneTimeID)
        }
        let header = RatchetHeader(ratchetKey: X25519PublicKey(checkedBytes: try reader.take(X25519PublicKey.byteCount)),
                                   previousChainLength: try reader.uint32(), messageNumber: try reader.uint32())
        let prefixEnd = reader.position
        let length = Int(try reader.uint32())
        guard length >= 16 else { throw .malformedRecord("the ciphertext is shorter than its tag") }
        ciphertext = try reader.take(length)
        guard reader.isAtEnd else { throw .malformedRecord("bytes follow the ciphertext") }
        (sender, self.messageID) = try Envelope.checkNames(sender: senderUID, recipient: recipient, messageID: messageID,
                                                           expectedRecipient: expectedRecipient, expectedID: expectedID)
        self.senderKey = IdentityPublicKey(checkedBytes: senderKey)
        self.ratchetID = ratchetID
        self.start = start
        self.header = header
        authenticatedPrefix = Array(reader.bytes[recordStart..<prefixEnd])
    }

    /// Decrypts the body in `ratchet` (the ratchet this side holds with ``ratchetID``; for a new
    /// one see ``Ratchet/accept(_:identity:signedPrekey:oneTimePrekey:)``) with this side's
    /// `identity` key, at `now` (Unix seconds). Returns the message and the ratchet to store with
    /// it, in one transaction; `ratchet` itself is left as it was.
    /// `package`: opening with a stale copy of `ratchet` would accept a message a second time
    /// (its key re-derived); only the project's client, which stores the returned ratchet with the
    /// message in one transaction, calls it.
    package func open(with ratchet: Ratchet, identity: IdentityPublicKey, now: Int64) throws(EnvelopeError) -> (OpenedEnvelope, Ratchet) {
        try open(with: ratchet, identity: identity, now: now, newRatchetKey: { X25519KeyPair() })
    }

    /// ``open(with:identity:now:)`` with the key pair a ratchet step makes given: for the vectors.
    func open(with ratchet: Ratchet, identity: IdentityPublicKey, now: Int64,
              newRatchetKey: () -> X25519KeyPair) throws(EnvelopeError) -> (OpenedEnvelope, Ratchet) {
        guard constantTimeEquals(ratchet.id, ratchetID), ratchet.peerIdentity == senderKey else { throw .ratchetMismatch }
        let (key, state) = try ratchet.state.receiving(header, now: now, newRatchetKey: newRatchetKey)
        let associatedData = preAuthenticationEncoding([Envelope.version2Label, authenticatedPrefix, identity.bytes])
        guard var body = aeadOpen(ciphertext, associatedData: associatedData, key: key.key, nonce: key.nonce) else {
            throw .ratchetMismatch
        }
        let message: ChatMessage
        do { message = try ChatMessage.decode(body) } catch { wipe(&body); throw error }
        guard message.sender.id == sender else { wipe(&body); throw .senderMismatch }
        var next = ratchet
        next.state = state
        next.start = nil  // the contact answered, so it holds the ratchet
        return (OpenedEnvelope(sender: sender, senderKey: senderKey, messageID: messageID, body: body, message: message), next)
    }
}

/// Reads the record's fields in order, failing with ``EnvelopeError/malformedRecord(_:)`` on any
/// overrun. Ratchets read their stored form with it too.
struct RecordReader {
    let bytes: ArraySlice<UInt8>
    var position: Int

    init(bytes: ArraySlice<UInt8>) {
        self.bytes = bytes
        position = bytes.startIndex
    }

    var isAtEnd: Bool { position == bytes.endIndex }

    mutating func take(_ count: Int) throws(EnvelopeError) -> [UInt8] {
        guard count >= 0, bytes.endIndex - position >= count else { throw .malformedRecord("the record is truncated") }
        defer { position += count }
        return Array(bytes[position..<position + count])
    }

    mutating func byte() throws(EnvelopeError) -> UInt8 { try take(1)[0] }

    mutating func shortString() throws(EnvelopeError) -> [UInt8] { try take(Int(try byte())) }

    mutating func uint32() throws(EnvelopeError) -> UInt32 {
        try take(4).reduce(0) { $0 << 8 | UInt32($1) }
    }
}
