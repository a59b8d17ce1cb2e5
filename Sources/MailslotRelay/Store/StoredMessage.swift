import Foundation
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
    /// The envelope's length in bytes (a power of two: spec/envelope.md).
    let size: Int
    /// The sealed envelope as its sender sent it: canonical unpadded base64url. Stored and
    /// forwarded as text, so the relay never decodes or re-encodes what it cannot open anyway.
    let envelope: String
    let leaseUntil: Int64?
    let leaseHolder: String?

    /// A message with every field; a new one has no lease.
    init(seq: Int64, recipient: String, id: String, author: String, createdAt: Int64, expiresAt: Int64, envelope: String, size: Int,
         leaseUntil: Int64? = nil, leaseHolder: String? = nil) {
        self.seq = seq
        self.recipient = recipient
        self.id = id
        self.author = author
        self.createdAt = createdAt
        self.expiresAt = expiresAt
        self.size = size
        self.envelope = envelope
        self.leaseUntil = leaseUntil
        self.leaseHolder = leaseHolder
    }

    /// The columns ``init(row:)`` reads, in its order: read by position, which spares a
    /// case-insensitive name lookup per column per row.
    static let columns = "seq, recipient, id, author, created_at, expires_at, size, envelope, lease_until, lease_holder"

    /// The wire form. The envelope, the mailbox position and the lease only for the owner: `seq`
    /// counts every message the relay stored, which is no business of a sender.
    func record(forOwner: Bool) -> MessageRecord {
        MessageRecord(id: id, author: author, createdAt: EpochMilliseconds.format(createdAt), expiresAt: EpochMilliseconds.format(expiresAt),
                      size: size, seq: forOwner ? seq : nil, leaseUntil: forOwner ? leaseUntil.map(EpochMilliseconds.format) : nil,
                      leaseHolder: forOwner ? leaseHolder : nil, envelope: forOwner ? envelope : nil)
    }
}

/// Milliseconds since the epoch, the relay's unit of time: the wall clock, and the format of its
/// values. (Not named `Clock`, which would shadow Swift's protocol in this module.) The relay
/// reads "now" through ``RelayConfiguration/clock``, whose default reads this.
enum EpochMilliseconds {
    static func now() -> Int64 { Int64((Date().timeIntervalSince1970 * 1000).rounded(.down)) }

    /// RFC 3339 with milliseconds, in UTC.
    static func format(_ milliseconds: Int64) -> String {
        Timestamp.format(milliseconds: milliseconds)
    }
}
