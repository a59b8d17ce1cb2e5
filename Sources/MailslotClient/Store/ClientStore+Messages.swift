import Foundation
import GRDB
import MailslotWire

/// A message in the local inbox: opened, verified, and stored before it was acknowledged.
public struct ReceivedMessage: Sendable, Equatable {
    /// The message id (the same on the sender's side).
    public let id: String
    /// The verified sender.
    public let sender: String
    /// The chat message.
    public let message: ChatMessage
    /// The signed body bytes, exactly as the sender wrote them.
    public let body: [UInt8]
    /// The files it carries (inline and as blobs) and where each stands, as of when it was
    /// returned by ``MailslotClient/receive()`` or ``MailslotClient/messages(onState:)``;
    /// ``MailslotClient/attachments(of:)`` tells where they stand now.
    public internal(set) var attachments: [ReceivedAttachment] = []
    /// The group it was sent to, as this device knows it; nil for a 1:1 message.
    public internal(set) var group: GroupContext?
    /// For a group change (type `group_change`): what it did — "alice added dave" — as of when
    /// it was returned (``GroupEvent``); empty for every other message. Group changes come in
    /// the same sequence as messages, so that an app shows them in order with the conversation
    /// and handles them at least once like any message; ``MailslotClient/changes(of:)`` gives a
    /// group's whole history.
    public internal(set) var events: [GroupEvent] = []
}

/// A message this client sent or is still sending.
public struct OutgoingMessage: Sendable, Equatable {
    /// Where it stands.
    public enum State: String, Sendable {
        /// In the outbox: the relay has not confirmed it yet.
        case queued
        /// The relay stored it.
        case sent
        /// The relay refused it for good; ``OutgoingMessage/reason`` says why.
        case refused
        /// Not sealed yet: the recipient's identity key changed. It goes out, sealed to the new
        /// keys, when the user trusts them (``MailslotClient/trust(_:safetyNumber:)``).
        case held
        /// The recipient's device said it could not open it (sealed to keys it does not have).
        /// ``MailslotClient/resend(_:)`` seals it again to the recipient's current keys.
        case undelivered
        /// A file send whose upload is not finished: the relay has not all of the file yet.
        /// ``MailslotClient/flush()`` resumes it; ``OutgoingMessage/reason`` says what stopped it.
        case uploading
    }
    /// The message id.
    public let id: String
    /// To whom.
    public let recipient: String
    /// Where it stands.
    public let state: State
    /// How many times delivery failed and was retried.
    public let attempts: Int
    /// The last failure as the outbox recorded it (a problem code, `key_changed`, …); public as ``reason``.
    let lastError: String?
    /// Why it is not sent, or was not the last time it was tried: the relay's problem, the relay
    /// unreachable, the recipient's key changed (held), their device could not open it
    /// (undelivered), a file send interrupted. Nil when nothing failed.
    public var reason: MailslotClient.SendOutcome.Reason? { lastError.map(MailslotClient.SendOutcome.Reason.init(recorded:)) }
    /// The chat message, as signed.
    public let message: ChatMessage?
    /// When it was composed and stored in the outbox, by this device's clock.
    public let createdAt: Date
}

extension ClientStore {
    // MARK: Sign-in session

    func session() async throws -> (session: String, refresh: String, expiresAt: Double)? {
        try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM session WHERE id = 1").map { ($0["session"], $0["refresh"], $0["expires_at"]) }
        }
    }

    func saveSession(_ grant: SessionGrant) async throws {
        let expiresAt = Timestamp.parse(grant.expiresAt) ?? 0
        try await pool.write { db in
            try db.execute(sql: """
                INSERT INTO session (id, session, refresh, expires_at) VALUES (1, ?, ?, ?)
                ON CONFLICT (id) DO UPDATE SET session = excluded.session, refresh = excluded.refresh, expires_at = excluded.expires_at
                """, arguments: [grant.session, grant.refresh, expiresAt])
        }
    }

    func clearSession() async throws {
        try await pool.write { db in try db.execute(sql: "DELETE FROM session") }
    }

    // MARK: Inbox and rejected

    /// Whether message `id` was already stored, or rejected for a reason that a new copy cannot
    /// change (a redelivery after a crash). An id rejected as unreadable on this device
    /// (``MailslotClient/isUnreadable(_:)``) is not known: its sender may send it again, sealed
    /// to this device's keys or in a ratchet it holds (``MailslotClient/resend(_:)``).
    func knows(_ id: String) async throws -> Bool {
        try await pool.read { db in
            try Bool.fetchOne(db, sql: """
                SELECT 1 FROM inbox WHERE id = ? UNION SELECT 1 FROM group_held WHERE message_id = ?
                UNION SELECT 1 FROM rejected WHERE id = ? AND reason NOT IN (?, ?, ?, ?)
                """, arguments: StatementArguments([id, id, id] + Self.unreadableCodes)) ?? false
        }
    }

    /// The codes of ``MailslotClient/isUnreadable(_:)``.
    static let unreadableCodes = [EnvelopeError.cannotDecrypt, .noRatchet, .unknownPrekey, .ratchetMismatch].map(\.code)

    /// The most notices that may wait unsent for one author: someone who sends envelopes nobody can
    /// open gets at most this many answers, however many it sends.
    static let maxWaitingNotices = 8

    /// The most notices made for one author in a day (``noticeWindow``), sent or not.
    static let maxNoticesPerAuthor = 16
    /// The most notices made in a day for all authors together.
    static let maxNotices = 128
    /// The window of ``maxNoticesPerAuthor`` and ``maxNotices``, in seconds (a day).
    static let noticeWindow: Double = 86_400

    /// Whether `author`, whose message `createdAt` (the relay's time) did not open, may be sent an
    /// `unreadable` notice (spec/envelope.md §4.2 item 4). Only someone this device exchanged a
    /// readable message with — a message stored from it, a message (not a notice) sent to it, a
    /// ratchet with it — or whose message the relay stored before this device's keys existed
    /// (sealed to a previous install's: the reinstall the notice is for); never a stranger,
    /// who would otherwise draw a notice per envelope and have this device pin it and claim its
    /// prekeys. And within the bounds: ``maxWaitingNotices`` waiting and ``maxNoticesPerAuthor`` a
    /// day for the author, ``maxNotices`` a day in all. Asked before anything is fetched for the
    /// notice; ``enqueueNotice(_:noticeID:for:to:body:sealed:)`` checks the bounds again.
    func mayNotify(_ author: String, createdAt: String, now: Double = Date().timeIntervalSince1970) async throws -> Bool {
        try await pool.read { db in
            let exchanged = try Bool.fetchOne(db, sql: """
                SELECT EXISTS (SELECT 1 FROM inbox WHERE sender = ?) OR EXISTS (SELECT 1 FROM sessions WHERE contact = ?)
                    OR EXISTS (SELECT 1 FROM sent WHERE recipient = ? AND type <> ?)
                """, arguments: [author, author, author, MessageType.receipt.rawValue]) ?? false
            let keysMadeAt = try Double.fetchOne(db, sql: "SELECT created_at FROM identity WHERE id = 1")
            let sealedBeforeKeys = keysMadeAt.flatMap { made in Timestamp.parse(createdAt).map { $0 < made } } ?? false
            guard exchanged || sealedBeforeKeys else { return false }
            return try Self.noticeAllowed(to: author, db, now: now)
        }
    }

    /// Whether the bounds leave room for one more notice to `author`.
    private static func noticeAllowed(to author: String, _ db: Database, now: Double) throws -> Bool {
        let notices = "SELECT sent.recipient, sent.state, sent.created_at FROM rejected JOIN sent ON sent.id = rejected.notice_id"
        let waiting = try Int.fetchOne(db, sql: "SELECT count(*) FROM (\(notices)) WHERE recipient = ? AND state IN ('queued', 'held')",
                                       arguments: [author]) ?? 0
        let recent = try Int.fetchOne(db, sql: "SELECT count(*) FROM (\(notices)) WHERE recipient = ? AND created_at > ?",
                                      arguments: [author, now - noticeWindow]) ?? 0
        let all = try Int.fetchOne(db, sql: "SELECT count(*) FROM (\(notices)) WHERE created_at > ?", arguments: [now - noticeWindow]) ?? 0
        return waiting < maxWaitingNotices && recent < maxNoticesPerAuthor && all < maxNotices
    }

    /// Until the message it speaks of is acknowledged, a notice waits unreleased: never due.
    static let unreleased = Double(Int64.max)

    /// Whether message `id`, rejected as unopenable, already has its notice (once is enough).
    func hasNotice(for id: String) async throws -> Bool {
        try await pool.read { db in
            try Bool.fetchOne(db, sql: "SELECT 1 FROM rejected WHERE id = ? AND notice_id IS NOT NULL", arguments: [id]) ?? false
        }
    }

    /// The notice about message `id`, while it still waits to be sent.
    func waitingNotice(for id: String) async throws -> Queued? {
        try await pool.read { db in
            try Row.fetchOne(db, sql: """
                SELECT sent.id, sent.recipient, sent.envelope, sent.key_id, sent.resealed, sent.type, sent.wake FROM rejected JOIN sent ON sent.id = rejected.notice_id
                WHERE rejected.id = ? AND sent.state = 'queued'
                """, arguments: [id]).map(Self.queued(from:))
        }
    }

    /// Stores notice `notice` (sealed, or held unsealed) for rejected message `id`, unreleased, in
    /// one transaction with the record that `id` has its notice — unless it has one already or
    /// the bounds of ``mayNotify(_:createdAt:now:)`` are reached. Returns whether it was stored.
    func enqueueNotice(_ notice: ChatMessage, noticeID: String, for id: String, to author: String, body: [UInt8],
                       sealed: Sealed?) async throws -> Bool {
        try await pool.write { db in
            guard try Bool.fetchOne(db, sql: "SELECT 1 FROM rejected WHERE id = ? AND notice_id IS NULL", arguments: [id]) == true else {
                return false
            }
            guard try Self.noticeAllowed(to: author, db, now: Date().timeIntervalSince1970) else { return false }
            try db.execute(sql: """
                INSERT INTO sent (id, recipient, type, body, envelope, key_id, state, next_attempt_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                """, arguments: [noticeID, author, notice.type.rawValue, Data(body), sealed.map { Data($0.envelope) }, sealed?.keyID,
                                 sealed == nil ? OutgoingMessage.State.held.rawValue : OutgoingMessage.State.queued.rawValue,
                                 Self.unreleased, Date().timeIntervalSince1970])
            try db.execute(sql: "UPDATE rejected SET notice_id = ? WHERE id = ?", arguments: [noticeID, id])
            return true
        }
    }

    /// Makes notice `noticeID` due now: the message it speaks of was acknowledged.
    func release(_ noticeID: String) async throws {
        try await pool.write { db in
            try db.execute(sql: "UPDATE sent SET next_attempt_at = 0 WHERE id = ? AND next_attempt_at = ?", arguments: [noticeID, Self.unreleased])
        }
    }

    /// Stores a received message; a copy of it rejected earlier as unopenable is forgotten.
    func storeReceived(_ message: ReceivedMessage) async throws {
        try await pool.write { db in try Self.storeReceived(message, db) }
    }

    /// ``storeReceived(_:)`` inside a transaction (a ratchet's advance is written in the same one).
    static func storeReceived(_ message: ReceivedMessage, _ db: Database) throws {
        try db.execute(sql: "DELETE FROM rejected WHERE id = ?", arguments: [message.id])
        // Not handled yet: the app has not seen it (``MailslotClient/messages(onState:)`` yields it until it is).
        // A group message is decided first (held, refused or shown: Groups/GroupReceiving.swift),
        // in this transaction only stored, as the ratchet's advance is.
        if let group = message.message.group {
            try hold(HeldGroupMessage(messageID: message.id, groupID: group.id.rawValue, version: group.version, sender: message.sender,
                                      body: message.body, receivedAt: Date().timeIntervalSince1970), db)
            return
        }
        try db.execute(sql: "INSERT OR IGNORE INTO inbox (id, sender, type, body, received_at, handled) VALUES (?, ?, ?, ?, ?, 0)",
                       arguments: [message.id, message.sender, message.message.type.rawValue, Data(message.body), Date().timeIntervalSince1970])
        if db.changesCount > 0 { try storeAttachments(of: message, db) }
    }

    // MARK: Handling by the app (at least once)

    /// Stored messages the app has not handled yet, oldest first (in the order they were stored),
    /// at most `limit` of them: what the live stream yields before anything new.
    func unhandled(limit: Int) async throws -> [ReceivedMessage] {
        try await pool.write { db in
            var messages: [ReceivedMessage] = []
            for row in try Row.fetchAll(db, sql: "SELECT * FROM inbox WHERE handled = 0 ORDER BY received_at, id LIMIT ?", arguments: [limit]) {
                let body: Data = row["body"], id: String = row["id"]
                guard let message = try? ChatMessage.decode(Array(body)) else {
                    // Stored only after it decoded: a row that no longer does is damage, and must not
                    // hold the stream for ever. It stays in the inbox (``history(from:)`` skips it).
                    try db.execute(sql: "UPDATE inbox SET handled = 1 WHERE id = ?", arguments: [id])
                    continue
                }
                messages.append(ReceivedMessage(id: id, sender: row["sender"], message: message, body: Array(body),
                                                group: try Self.groupContext(of: message, db),
                                                events: try Self.groupEvents(of: message, db)))
            }
            return messages
        }
    }

    /// How many stored messages the app has not handled yet.
    func unhandledCount() async throws -> Int {
        try await pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM inbox WHERE handled = 0") ?? 0 }
    }

    /// Marks messages as handled by the app: the stream does not yield them again.
    func markHandled(_ ids: [String]) async throws {
        guard !ids.isEmpty else { return }
        try await pool.write { db in
            for id in ids { try db.execute(sql: "UPDATE inbox SET handled = 1 WHERE id = ? AND handled = 0", arguments: [id]) }
        }
    }

    func storeRejected(id: String, author: String, reason: RejectedMessage.Reason) async throws {
        try await pool.write { db in
            try db.execute(sql: "INSERT OR IGNORE INTO rejected (id, author, reason, received_at) VALUES (?, ?, ?, ?)",
                           arguments: [id, author, reason.code, Date().timeIntervalSince1970])
        }
    }

    // MARK: Outbox

    /// An envelope in the outbox, and the recipient keys it was sealed to (none for a message
    /// queued before clients sent key ids).
    struct Sealed: Sendable {
        let envelope: [UInt8]
        let keyID: String?
    }

    /// A queued message as the outbox sends it.
    struct Queued: Sendable {
        let id: String
        let recipient: String
        let sealed: Sealed
        /// Whether its create may wake the recipient's devices (`wake`, spec/protocol.md §4.7):
        /// not for typing indicators and receipts (`MessageType.wakes`), nor for a message
        /// sent with `wake: false`.
        let wake: Bool
        /// Sealed again under its id: an older copy may still wait on the relay.
        var resealed = false
    }

    /// Puts a message in the outbox: queued with its envelope, or held (no envelope) while the
    /// recipient's changed keys wait for the user's trust.
    /// `wake`: false keeps even a message of a waking type from waking anyone; nil leaves it to
    /// the type.
    func enqueue(id: String, recipient: String, message: ChatMessage, body: [UInt8], sealed: Sealed?, wake: Bool? = nil) async throws {
        try await pool.write { db in
            try db.execute(sql: """
                INSERT INTO sent (id, recipient, type, body, envelope, key_id, state, created_at, wake) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                """, arguments: [id, recipient, message.type.rawValue, Data(body), sealed.map { Data($0.envelope) }, sealed?.keyID,
                                 sealed == nil ? OutgoingMessage.State.held.rawValue : OutgoingMessage.State.queued.rawValue,
                                 Date().timeIntervalSince1970, wake])
        }
    }

    /// Whether sent message `id`'s create may wake its recipient: its `wake` column, else its type.
    func wakes(_ id: String) async throws -> Bool {
        try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT type, wake FROM sent WHERE id = ?", arguments: [id]).map(Self.wakes(from:)) ?? true
        }
    }

    private static func wakes(from row: Row) -> Bool {
        let explicit: Bool? = row["wake"]
        return explicit ?? MessageType(rawValue: row["type"]).wakes
    }

    /// Queued messages due for a try at `now`, oldest first.
    func due(now: Double) async throws -> [Queued] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: """
                SELECT id, recipient, envelope, key_id, resealed, type, wake FROM sent WHERE state = 'queued' AND next_attempt_at <= ? ORDER BY id
                """, arguments: [now]).map(Self.queued(from:))
        }
    }

    private static func queued(from row: Row) -> Queued {
        Queued(id: row["id"], recipient: row["recipient"],
               sealed: Sealed(envelope: Array((row["envelope"] as Data?) ?? Data()), keyID: row["key_id"]), wake: wakes(from: row),
               resealed: row["resealed"])
    }

    /// The signed body of sent message `id`, its recipient, where it stands and why, to seal it again.
    func outgoingBody(_ id: String) async throws -> (recipient: String, body: [UInt8], state: OutgoingMessage.State, lastError: String?)? {
        try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT recipient, body, state, last_error FROM sent WHERE id = ?", arguments: [id]).map {
                ($0["recipient"], Array($0["body"] as Data), OutgoingMessage.State(rawValue: $0["state"]) ?? .queued, $0["last_error"])
            }
        }
    }

    /// Ids of messages to `recipient` in `state`, oldest first.
    func outgoingIDs(to recipient: String, state: OutgoingMessage.State) async throws -> [String] {
        try await pool.read { db in
            try String.fetchAll(db, sql: "SELECT id FROM sent WHERE recipient = ? AND state = ? ORDER BY id", arguments: [recipient, state.rawValue])
        }
    }

    /// Queues message `id` again with a new envelope (sealed to the recipient's current keys), to be tried now.
    func requeue(_ id: String, sealed: Sealed) async throws {
        try await pool.write { db in
            try db.execute(sql: """
                UPDATE sent SET state = 'queued', envelope = ?, key_id = ?, resealed = 1, next_attempt_at = 0, last_error = NULL WHERE id = ?
                """, arguments: [Data(sealed.envelope), sealed.keyID, id])
        }
    }

    /// Holds message `id` unsealed until the recipient's changed keys are trusted.
    func markHeld(_ id: String, error: String) async throws {
        try await pool.write { db in
            try db.execute(sql: "UPDATE sent SET state = 'held', envelope = NULL, key_id = NULL, last_error = ? WHERE id = ?", arguments: [error, id])
        }
    }

    /// Marks the messages among `ids` that this client sent to `recipient` as undelivered: that
    /// recipient's device said it could not open them. Messages to anyone else are untouched, so
    /// a notice can only speak of what was sent to its own author. Returns how many changed.
    @discardableResult
    func markUndelivered(_ ids: [String], recipient: String, reason: String) async throws -> Int {
        try await pool.write { db in
            var changed = 0
            for id in ids {
                try db.execute(sql: "UPDATE sent SET state = 'undelivered', envelope = NULL, last_error = ? WHERE id = ? AND recipient = ? AND state = 'sent'",
                               arguments: [reason, id, recipient])
                changed += db.changesCount
            }
            return changed
        }
    }

    func markSent(_ id: String) async throws {
        try await pool.write { db in
            try db.execute(sql: "UPDATE sent SET state = 'sent', envelope = NULL, last_error = NULL WHERE id = ?", arguments: [id])
        }
    }

    /// Takes a refused message out of the outbox, keeping why.
    func markRefused(_ id: String, error: String) async throws {
        try await pool.write { db in
            try db.execute(sql: "UPDATE sent SET state = 'refused', envelope = NULL, last_error = ? WHERE id = ?", arguments: [error, id])
        }
    }

    /// Records a failed try and when to try again (exponential backoff, at most 5 minutes).
    func markFailed(_ id: String, error: String, now: Double) async throws {
        try await pool.write { db in
            let attempts = (try Int.fetchOne(db, sql: "SELECT attempts FROM sent WHERE id = ?", arguments: [id]) ?? 0) + 1
            let delay = min(300, pow(2, Double(min(attempts, 9))))
            try db.execute(sql: "UPDATE sent SET attempts = ?, next_attempt_at = ?, last_error = ? WHERE id = ?",
                           arguments: [attempts, now + delay, error, id])
        }
    }
}
