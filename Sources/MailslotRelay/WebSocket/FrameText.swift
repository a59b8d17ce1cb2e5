import MailslotWire

/// The subscription's two hottest frames, `message` and `acked`, written directly rather than
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

    static func acked(_ id: String) -> String {
        #"{"id":""# + id + #"","type":"acked"}"#
    }
}
