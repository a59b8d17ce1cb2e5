// The sealed-envelope format, version 1: the one place that says what the relay stores for each
// message. Specified byte for byte in spec/envelope.md.
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
    /// The smallest envelope, in bytes.
    public static let minimumSize = 512
    /// The largest envelope, in bytes (the relay may set a lower limit; 64 KiB by default).
    public static let maximumSize = 1 << 20
    /// The domain-separation label that starts every signed record.
    static let signatureLabel = Array("mailslot-envelope-v1".utf8)
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
        guard Identifier.isValidUID(sender) else { throw .malformedRecord("the sender is not a valid uid") }
        guard Identifier.isValidUID(recipient) else { throw .malformedRecord("the recipient is not a valid uid") }
        guard Identifier.isValidMessageID(id) else { throw .malformedRecord("the message id is not valid") }
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

    /// Lays out the record's fields (see the table at the top of this file).
    static func record(version: UInt8, sender: [UInt8], senderKey: [UInt8], recipient: [UInt8], messageID: [UInt8],
                       body: [UInt8], signature: [UInt8]) -> [UInt8] {
        var record: [UInt8] = [version]
        record.append(UInt8(sender.count)); record += sender
        record += senderKey
        record.append(UInt8(recipient.count)); record += recipient
        record.append(UInt8(messageID.count)); record += messageID
        let length = UInt32(clamping: body.count)
        record += [UInt8(length >> 24), UInt8(length >> 16 & 0xFF), UInt8(length >> 8 & 0xFF), UInt8(length & 0xFF)]
        record += body
        record += signature
        return record
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

    /// Opens `envelope` with the recipient's `keys` and checks everything: that it was sealed to
    /// these keys, for `recipient` and message id `id`, signed by the key it names, and that the
    /// body is a chat message from that sender. The caller then compares ``OpenedEnvelope/sender``
    /// with the relay-stamped author and ``OpenedEnvelope/senderKey`` with the pinned key.
    public static func open(_ envelope: [UInt8], id: String, recipient: String,
                            keys: MailboxKeyPair) throws(EnvelopeError) -> OpenedEnvelope {
        guard envelope.count >= minimumSize, envelope.count <= maximumSize,
              envelope.count & (envelope.count - 1) == 0 else { throw .invalidSize }
        guard var padded = keys.open(sealed: envelope) else { throw .cannotDecrypt }
        defer { wipe(&padded) }

        // Strip ISO/IEC 7816-4 padding. The box is authenticated already, so this is no oracle.
        guard let marker = padded.lastIndex(where: { $0 != 0 }), padded[marker] == 0x80,
              sizeClass(forRecordLength: marker) == envelope.count else { throw .badPadding }  // the smallest class only
        var reader = RecordReader(bytes: padded[..<marker])

        let recordVersion = try reader.byte()
        guard recordVersion == version else { throw .unsupportedVersion(recordVersion) }
        let senderUID = try reader.shortString()
        let senderKeyBytes = try reader.take(IdentityPublicKey.byteCount)
        let recipientUID = try reader.shortString()
        let messageID = try reader.shortString()
        let body = try reader.take(Int(try reader.uint32()))
        let signature = try reader.take(signatureBytes)
        guard reader.isAtEnd else { throw .malformedRecord("bytes follow the signature") }

        guard let sender = Optional(String(decoding: senderUID, as: UTF8.self)), Identifier.isValidUID(sender) else {
            throw .malformedRecord("the sender is not a valid uid")
        }
        guard let named = Optional(String(decoding: recipientUID, as: UTF8.self)), Identifier.isValidUID(named) else {
            throw .malformedRecord("the recipient is not a valid uid")
        }
        guard let boundID = Optional(String(decoding: messageID, as: UTF8.self)), Identifier.isValidMessageID(boundID) else {
            throw .malformedRecord("the message id is not valid")
        }
        guard named == recipient else { throw .wrongRecipient }
        guard boundID == id else { throw .wrongMessageID }

        let senderKey = IdentityPublicKey(checkedBytes: senderKeyBytes)
        let signed = signedBytes(sender: senderUID, senderKey: senderKeyBytes, recipient: recipientUID,
                                 mailboxKey: keys.publicKey.bytes, messageID: messageID, body: body)
        guard senderKey.verify(signature: signature, of: signed) else { throw .badSignature }

        let message = try ChatMessage.decode(body)
        guard message.sender.id == sender else { throw .senderMismatch }
        return OpenedEnvelope(sender: sender, senderKey: senderKey, messageID: boundID, body: body, message: message)
    }

    private static func signedBytes(sender: [UInt8], senderKey: [UInt8], recipient: [UInt8], mailboxKey: [UInt8],
                                    messageID: [UInt8], body: [UInt8]) -> [UInt8] {
        preAuthenticationEncoding([signatureLabel, sender, senderKey, recipient, mailboxKey, messageID, body])
    }
}

/// Reads the record's fields in order, failing with ``EnvelopeError/malformedRecord(_:)`` on any overrun.
private struct RecordReader {
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
