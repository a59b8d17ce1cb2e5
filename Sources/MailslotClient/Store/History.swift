import Foundation
import GRDB
import MailslotWire

/// A message this client received but did not accept: it did not open or verify. Kept with why,
/// so that nothing is lost in silence.
public struct RejectedMessage: Sendable, Equatable {
    /// The message id.
    public let id: String
    /// The author the relay stamped on it (its sender's uid; not verified end to end, since the
    /// message did not open or verify).
    public let author: String
    /// Why it was rejected.
    public let reason: Reason
    /// When this client received it, by this device's clock.
    public let receivedAt: Date
    /// The group it named, for a group message or change refused by the group rules (and one that
    /// opened but failed a group check); nil for a 1:1 message, or one that did not open.
    public var group: GroupID? = nil

    /// Why a received message was not accepted.
    public enum Reason: Sendable, Hashable, CustomStringConvertible {
        /// It was sealed to keys this device does not hold (a reinstall, keys older than the
        /// longest message lifetime, a ratchet it lost): `code` is the envelope error code
        /// (`envelope_cannot_decrypt`, `envelope_no_session`, `envelope_unknown_prekey`,
        /// `envelope_session_mismatch`, spec/envelope.md). Its author, if a contact, is told
        /// (spec/envelope.md §4.2 item 4) and may send it again.
        case unreadable(code: String)
        /// The envelope is malformed or does not verify: `code` is its envelope error code
        /// (spec/envelope.md).
        case invalidEnvelope(code: String)
        /// The relay delivered a record without an envelope.
        case envelopeMissing
        /// The envelope was signed by someone else than the author the relay named.
        case authorMismatch
        /// The sender's identity key changed and is not trusted yet: messages after
        /// ``MailslotClient/trust(_:safetyNumber:)`` open.
        case keyChanged
        /// The sender has published no keys to check the message with.
        case senderHasNoKeys
        /// A version 1 envelope from a contact that writes in ratchets (a downgrade).
        case downgrade
        /// A group message or change refused by the group rules (spec/groups.md): `code` is
        /// `group_not_member` (its sender is not a member of the group as this device knows it),
        /// `group_left` (this user is out of the group), `group_state_unknown` / `group_unknown`
        /// (held past the bounds without the change it built on), or a change's refusal
        /// (`group_bad_signature`, `group_author_mismatch`, `group_duplicate_genesis`, …).
        case group(code: String)

        /// The stable code stored and shown (`envelope_cannot_decrypt`, `author_mismatch`, …).
        public var code: String {
            switch self {
            case .unreadable(let code), .invalidEnvelope(let code), .group(let code): code
            case .envelopeMissing: "envelope_missing"
            case .authorMismatch: "author_mismatch"
            case .keyChanged: ClientError.keyChangedCode
            case .senderHasNoKeys: "sender_has_no_keys"
            case .downgrade: "envelope_downgrade"
            }
        }

        /// The reason stored under `code`.
        init(code: String) {
            switch code {
            case "envelope_missing": self = .envelopeMissing
            case "author_mismatch": self = .authorMismatch
            case ClientError.keyChangedCode: self = .keyChanged
            case "sender_has_no_keys": self = .senderHasNoKeys
            case "envelope_downgrade": self = .downgrade
            case _ where ClientStore.unreadableCodes.contains(code): self = .unreadable(code: code)
            case _ where code.hasPrefix("group_"): self = .group(code: code)
            default: self = .invalidEnvelope(code: code)
            }
        }

        /// The code.
        public var description: String { code }
    }
}

/// One entry of ``MailslotClient/timeline(with:)``: a message received or sent, in the order this
/// client stored them.
public enum HistoryEntry: Sendable, Equatable {
    /// A message received and stored, and when it was stored.
    case received(ReceivedMessage, storedAt: Date)
    /// A message this client sent or is sending (``OutgoingMessage/createdAt`` is when).
    case sent(OutgoingMessage)

    /// When this client stored it (received, or composed), by this device's clock.
    public var storedAt: Date {
        switch self {
        case .received(_, let storedAt): storedAt
        case .sent(let message): message.createdAt
        }
    }

    /// The message id.
    public var id: String {
        switch self {
        case .received(let message, _): message.id
        case .sent(let message): message.id
        }
    }
}

extension ClientStore {
    /// Stored messages, with when each was stored, oldest first (by this device's clock, not by
    /// message id: ids carry their sender's clock), optionally from one contact.
    func inbox(from sender: String? = nil) async throws -> [(message: ReceivedMessage, storedAt: Date)] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM inbox WHERE (? IS NULL OR sender = ?) ORDER BY received_at, id",
                             arguments: [sender, sender]).compactMap { row in
                let body: Data = row["body"]
                guard let message = try? ChatMessage.decode(Array(body)) else { return nil }
                return (ReceivedMessage(id: row["id"], sender: row["sender"], message: message, body: Array(body),
                                        group: try Self.groupContext(of: message, db),
                                        events: try Self.groupEvents(of: message, db)),
                        Date(timeIntervalSince1970: row["received_at"]))
            }
        }
    }

    /// Rejected messages with the reason, oldest first.
    func rejected() async throws -> [RejectedMessage] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM rejected ORDER BY received_at, id").map {
                RejectedMessage(id: $0["id"], author: $0["author"], reason: RejectedMessage.Reason(code: $0["reason"]), receivedAt: Date(timeIntervalSince1970: $0["received_at"]),
                                group: ($0["group_id"] as String?).flatMap(GroupID.init(rawValue:)))
            }
        }
    }

    /// Every message sent or being sent, oldest first (by when it was composed).
    func outgoing() async throws -> [OutgoingMessage] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM sent ORDER BY created_at, id").map { row in
                let body: Data = row["body"]
                return OutgoingMessage(id: row["id"], recipient: row["recipient"], state: OutgoingMessage.State(rawValue: row["state"]) ?? .queued,
                                       attempts: row["attempts"], lastError: row["last_error"], message: try? ChatMessage.decode(Array(body)),
                                       createdAt: Date(timeIntervalSince1970: row["created_at"]))
            }
        }
    }
}

extension MailslotClient {
    /// Stored messages, oldest first (in the order this client stored them); from one contact
    /// when `from` is given.
    public func history(from sender: String? = nil) async throws -> [ReceivedMessage] {
        var messages: [ReceivedMessage] = []
        for entry in try await store.inbox(from: sender) { messages.append(try await withStoredAttachments(entry.message)) }
        return messages
    }

    /// `message` with its attachments as they stand now (none are fetched).
    func withStoredAttachments(_ message: ReceivedMessage) async throws -> ReceivedMessage {
        guard message.message.payload.attachments != nil || message.message.payload.files != nil else { return message }
        var result = message
        result.attachments = try await attachments(of: message.id)
        return result
    }

    /// Received and sent messages in one sequence, oldest first: in the order this client stored
    /// them (received, or composed), by this device's clock; with one contact when `uid` is given.
    /// Message ids are not used for the order: they carry the clock of whoever made them.
    public func timeline(with uid: String? = nil) async throws -> [HistoryEntry] {
        var received: [HistoryEntry] = []
        for entry in try await store.inbox(from: uid) {
            received.append(.received(try await withStoredAttachments(entry.message), storedAt: entry.storedAt))
        }
        let sent = try await store.outgoing().filter { uid == nil || $0.recipient == uid }.map(HistoryEntry.sent)
        // Both are sorted already; the sort is stable, so equal times keep received before sent.
        return (received + sent).enumerated().sorted { a, b in
            (a.element.storedAt, a.offset) < (b.element.storedAt, b.offset)
        }.map(\.element)
    }

    /// Messages that failed to open or verify, with the reason (``RejectedMessage/Reason``),
    /// oldest first. Messages this client sent that the
    /// relay refused are in ``outgoing()`` with the state ``OutgoingMessage/State/refused``.
    public func rejected() async throws -> [RejectedMessage] { try await store.rejected() }
}
