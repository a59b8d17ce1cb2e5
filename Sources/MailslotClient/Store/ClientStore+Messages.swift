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
}

/// A message this client sent or is still sending.
public struct OutgoingMessage: Sendable, Equatable {
    /// Where it stands.
    public enum State: String, Sendable {
        /// In the outbox: the relay has not confirmed it yet.
        case queued
        /// The relay stored it.
        case sent
        /// The relay refused it for good; `lastError` says why.
        case refused
    }
    public let id: String
    public let recipient: String
    public let state: State
    public let attempts: Int
    public let lastError: String?
}

extension ClientStore {
    // MARK: Session

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

    /// Whether message `id` was already stored or rejected (a redelivery after a crash).
    func knows(_ id: String) async throws -> Bool {
        try await pool.read { db in
            try Bool.fetchOne(db, sql: "SELECT 1 FROM inbox WHERE id = ? UNION SELECT 1 FROM rejected WHERE id = ?", arguments: [id, id]) ?? false
        }
    }

    func storeReceived(_ message: ReceivedMessage) async throws {
        try await pool.write { db in
            try db.execute(sql: "INSERT OR IGNORE INTO inbox (id, sender, type, body, received_at) VALUES (?, ?, ?, ?, ?)",
                           arguments: [message.id, message.sender, message.message.type.rawValue, Data(message.body), Date().timeIntervalSince1970])
        }
    }

    func storeRejected(id: String, author: String, reason: String) async throws {
        try await pool.write { db in
            try db.execute(sql: "INSERT OR IGNORE INTO rejected (id, author, reason, received_at) VALUES (?, ?, ?, ?)",
                           arguments: [id, author, reason, Date().timeIntervalSince1970])
        }
    }

    /// Stored messages, oldest first, optionally with one contact (either direction for sent ones is separate).
    func inbox(from sender: String? = nil) async throws -> [ReceivedMessage] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM inbox WHERE (? IS NULL OR sender = ?) ORDER BY id",
                             arguments: [sender, sender]).compactMap { row in
                let body: Data = row["body"]
                guard let message = try? ChatMessage.decode(Array(body)) else { return nil }
                return ReceivedMessage(id: row["id"], sender: row["sender"], message: message, body: Array(body))
            }
        }
    }

    /// Rejected messages with the reason, oldest first.
    func rejected() async throws -> [(id: String, author: String, reason: String)] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM rejected ORDER BY received_at").map { ($0["id"], $0["author"], $0["reason"]) }
        }
    }

    // MARK: Outbox

    func enqueue(id: String, recipient: String, message: ChatMessage, body: [UInt8], envelope: [UInt8]) async throws {
        try await pool.write { db in
            try db.execute(sql: """
                INSERT INTO sent (id, recipient, type, body, envelope, state, created_at) VALUES (?, ?, ?, ?, ?, 'queued', ?)
                """, arguments: [id, recipient, message.type.rawValue, Data(body), Data(envelope), Date().timeIntervalSince1970])
        }
    }

    /// Queued messages due for a try at `now`, oldest first.
    func due(now: Double) async throws -> [(id: String, recipient: String, envelope: [UInt8])] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT id, recipient, envelope FROM sent WHERE state = 'queued' AND next_attempt_at <= ? ORDER BY id",
                             arguments: [now]).map { ($0["id"], $0["recipient"], Array(($0["envelope"] as Data?) ?? Data())) }
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

    func outgoing() async throws -> [OutgoingMessage] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM sent ORDER BY id").map { row in
                OutgoingMessage(id: row["id"], recipient: row["recipient"], state: OutgoingMessage.State(rawValue: row["state"]) ?? .queued,
                                attempts: row["attempts"], lastError: row["last_error"])
            }
        }
    }
}
