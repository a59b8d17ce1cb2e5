import MailslotWire

/// The subscription's hottest frames, `message`, `acked` and `sent`, written directly rather than
/// through JSONEncoder: byte for byte what the encoder writes (sorted keys), which a test checks.
/// Safe without escaping because every field is from a grammar with nothing to escape: uids and
/// message ids ([A-Za-z0-9._-]), RFC 3339 times, integers and base64url. A record with a lease
/// (its holder is free text) returns nil and takes the encoder.
enum FrameText {
    static func message(_ record: MessageRecord) -> String? {
        guard record.leaseHolder == nil, record.leaseUntil == nil, let seq = record.seq, let envelope = record.envelope else { return nil }
        var text = #"{"message":{"author":""#
        text.reserveCapacity(160 + envelope.utf8.count)
        text += record.author
        text += #"","created_at":""#
        text += record.createdAt
        text += #"","envelope":""#
        text += envelope
        text += #"","expires_at":""#
        text += record.expiresAt
        text += #"","id":""#
        text += record.id
        text += #"","seq":"#
        text += String(seq)
        text += #","size":"#
        text += String(record.size)
        text += #"},"type":"message"}"#
        return text
    }

    /// The answer to a `send`: the sender's view of the record (no seq, lease or envelope). Nil
    /// when the client's `ref` holds anything but [A-Za-z0-9._-] (it is free text: the encoder
    /// escapes it).
    static func sent(_ record: MessageRecord, ref: String, created: Bool) -> String? {
        guard record.seq == nil, record.envelope == nil, record.leaseHolder == nil, record.leaseUntil == nil,
              ref.utf8.allSatisfy(isPlain) else { return nil }
        var text = created ? #"{"created":true,"message":{"author":""# : #"{"created":false,"message":{"author":""#
        text += record.author
        text += #"","created_at":""#
        text += record.createdAt
        text += #"","expires_at":""#
        text += record.expiresAt
        text += #"","id":""#
        text += record.id
        text += #"","size":"#
        text += String(record.size)
        text += #"},"ref":""#
        text += ref
        text += #"","type":"sent"}"#
        return text
    }

    private static func isPlain(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "-"): true
        default: false
        }
    }

    static func acked(_ id: String) -> String {
        #"{"id":""# + id + #"","type":"acked"}"#
    }
}
