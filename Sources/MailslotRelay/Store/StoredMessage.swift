import Foundation
import GRDB
import MailslotWire

/// A message row: everything the relay keeps of one message.
struct StoredMessage: Sendable, Equatable {
    let seq: Int64
    let recipient: String
    let id: String
    let author: String
    /// Milliseconds since the epoch.
    let createdAt: Int64
    /// Milliseconds since the epoch.
    let expiresAt: Int64
    let size: Int
    let envelope: Data
    let leaseUntil: Int64?
    let leaseHolder: String?

    init(row: Row) {
        seq = row["seq"]
        recipient = row["recipient"]
        id = row["id"]
        author = row["author"]
        createdAt = row["created_at"]
        expiresAt = row["expires_at"]
        size = row["size"]
        envelope = row["envelope"]
        leaseUntil = row["lease_until"]
        leaseHolder = row["lease_holder"]
    }

    /// The wire form. The envelope, the mailbox position and the lease only for the owner: `seq`
    /// counts every message the relay stored, which is no business of a sender.
    func record(forOwner: Bool) -> MessageRecord {
        MessageRecord(id: id, author: author, createdAt: Clock.format(createdAt), expiresAt: Clock.format(expiresAt),
                      size: size, seq: forOwner ? seq : nil, leaseUntil: forOwner ? leaseUntil.map(Clock.format) : nil,
                      leaseHolder: forOwner ? leaseHolder : nil, envelope: forOwner ? Base64URL.encode(envelope) : nil)
    }
}

/// Milliseconds since the epoch, the relay's unit of time.
enum Clock {
    static func now() -> Int64 { Int64((Date().timeIntervalSince1970 * 1000).rounded(.down)) }

    /// RFC 3339 with milliseconds, in UTC.
    static func format(_ milliseconds: Int64) -> String {
        let seconds = milliseconds >= 0 ? milliseconds / 1000 : (milliseconds - 999) / 1000
        let fraction = milliseconds - seconds * 1000
        let whole = Timestamp.format(seconds)  // "YYYY-MM-DDTHH:MM:SS+00:00"
        let digits = String(fraction)
        return whole.dropLast(6) + "." + String(repeating: "0", count: 3 - digits.count) + digits + "Z"
    }
}
