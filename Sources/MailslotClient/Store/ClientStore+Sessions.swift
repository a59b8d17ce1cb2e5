import Foundation
import GRDB
import MailslotWire

// Sessions with forward secrecy on the client's SQLite (spec/sessions.md §6): this device's
// prekeys, and the sessions with each contact. A session's state is written in the same
// transaction as what it was used for — the stored message when receiving, before the ack — so a
// crash never loses a readable message nor leaves a session behind its messages; and sealing
// reads, advances and writes the active session in one transaction, so two sends never use one
// message key.
extension ClientStore {
    /// How long a signed prekey is the current one before it is replaced (7 days).
    static let signedPrekeyPeriod: Double = 7 * 86_400
    /// The most one-time prekey secrets kept; beyond, the oldest go (the relay holds at most 200).
    static let maxOneTimePrekeys = 1000
    /// The most sessions kept with one contact; the least recently used inactive ones go first.
    static let maxSessionsPerContact = 8

    // MARK: This device's prekeys

    /// The current signed prekey: made on first use, replaced when older than
    /// ``signedPrekeyPeriod`` (the bundle is then unpublished until the relay takes the new one).
    /// Replaced ones past ``previousKeyLifetime`` are erased.
    func currentSignedPrekey(now: Double = Date().timeIntervalSince1970) async throws -> (id: UInt32, pair: X25519KeyPair) {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM signed_prekeys WHERE retired_at <= ?", arguments: [now - Self.previousKeyLifetime])
            if let row = try Row.fetchOne(db, sql: "SELECT id, secret_key, created_at FROM signed_prekeys WHERE retired_at IS NULL"),
               (row["created_at"] as Double) > now - Self.signedPrekeyPeriod, let pair = Self.keyPair(row["secret_key"]) {
                return (UInt32(row["id"] as Int64), pair)
            }
            try db.execute(sql: "UPDATE signed_prekeys SET retired_at = ? WHERE retired_at IS NULL", arguments: [now])
            let id = (try Int64.fetchOne(db, sql: "SELECT MAX(id) FROM signed_prekeys") ?? 0) % Int64(UInt32.max) + 1
            let pair = X25519KeyPair()
            try db.execute(sql: "INSERT OR REPLACE INTO signed_prekeys (id, secret_key, created_at) VALUES (?, ?, ?)",
                           arguments: [id, pair.secretKey.withUnsafeBytes { Data($0) }, now])
            try db.execute(sql: "UPDATE identity SET published = 0 WHERE id = 1")
            return (UInt32(id), pair)
        }
    }

    /// Makes `count` one-time prekeys, keeps their secrets, and returns the public halves to upload.
    func makeOneTimePrekeys(_ count: Int, now: Double = Date().timeIntervalSince1970) async throws -> [PublishedPrekey] {
        // Never a negative range, nor more than are kept, whatever the caller computed.
        let count = max(0, min(count, Self.maxOneTimePrekeys))
        return try await pool.write { db in
            let first = (try Int64.fetchOne(db, sql: "SELECT MAX(id) FROM one_time_prekeys") ?? 0) + 1
            var made: [PublishedPrekey] = []
            for offset in 0..<Int64(count) where first + offset <= Int64(UInt32.max) {
                let pair = X25519KeyPair()
                try db.execute(sql: "INSERT INTO one_time_prekeys (id, secret_key, created_at) VALUES (?, ?, ?)",
                               arguments: [first + offset, pair.secretKey.withUnsafeBytes { Data($0) }, now])
                made.append(PublishedPrekey(id: UInt32(first + offset), key: pair.publicKey))
            }
            try db.execute(sql: "DELETE FROM one_time_prekeys WHERE id <= (SELECT MAX(id) FROM one_time_prekeys) - ?",
                           arguments: [Self.maxOneTimePrekeys])
            return made
        }
    }

    private static func keyPair(_ secret: Data?) -> X25519KeyPair? {
        secret.flatMap { X25519KeyPair(secretKey: SecretBytes(copying: $0)) }
    }

    // MARK: Sessions

    /// Whether a session with `contact`'s pinned identity is active for sending.
    func hasActiveSession(with contact: Contact) async throws -> Bool {
        try await pool.read { db in
            try Bool.fetchOne(db, sql: "SELECT 1 FROM sessions WHERE contact = ? AND peer_identity = ? AND active = 1",
                              arguments: [contact.uid, Data(contact.identityKey.bytes)]) ?? false
        }
    }

    /// Keeps `session`, just started with `contact`, as the active one — unless another send
    /// started one meanwhile, which is then kept (this one was never used).
    func startSession(_ session: Session, with contact: Contact, now: Double = Date().timeIntervalSince1970) async throws {
        try await pool.write { db in
            guard try !(Bool.fetchOne(db, sql: "SELECT 1 FROM sessions WHERE contact = ? AND peer_identity = ? AND active = 1",
                                      arguments: [contact.uid, Data(contact.identityKey.bytes)]) ?? false) else { return }
            try Self.save(session, contact: contact.uid, db, now: now)
            try Self.activate(session.id, contact: contact.uid, db, now: now)
        }
    }

    /// Seals `message` in the active session with `contact`, advancing it in the same
    /// transaction. Nil when there is no active session.
    func sealInActiveSession(_ message: ChatMessage, id: String, as me: Identity, to contact: Contact,
                             now: Double = Date().timeIntervalSince1970) async throws -> [UInt8]? {
        try await pool.write { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT state FROM sessions WHERE contact = ? AND peer_identity = ? AND active = 1",
                                             arguments: [contact.uid, Data(contact.identityKey.bytes)]),
                  var session = Self.session(row["state"]) else { return nil }
            guard session.canSend else {  // its counter is at its end: never wrapped, a new session instead
                try db.execute(sql: "UPDATE sessions SET active = 0 WHERE id = ?", arguments: [Data(session.id)])
                return nil
            }
            let envelope = try Envelope.seal(message, id: id, from: me.uid, identity: me.signing, to: contact.uid,
                                             mailboxKey: contact.mailboxKey, session: &session)
            try Self.save(session, contact: contact.uid, db, now: now)
            return envelope
        }
    }

    /// The contact said it could not read a message: no session with it stays active but
    /// `kept` (the session the contact wrote that in, which it does hold); without one, the next
    /// message starts a new session. The sessions stay, for receiving.
    func deactivateSessions(with contact: String, except kept: [UInt8]?) async throws {
        try await pool.write { db in
            try db.execute(sql: "UPDATE sessions SET active = (id IS ?) WHERE contact = ?", arguments: [kept.map { Data($0) }, contact])
        }
    }

    /// Opens a version 2 message in its session — found by id, or started from the prekeys it
    /// names — and, in the same transaction, keeps the advanced session, erases the one-time
    /// prekey it used, and stores the message unless it is a typing indicator. Throws
    /// ``EnvelopeError`` when it does not open; nothing is written then.
    func openInSession(_ sealed: SessionEnvelope, as me: Identity, now: Double = Date().timeIntervalSince1970) async throws -> OpenedEnvelope {
        try await pool.write { db in
            let (opened, next, usedOneTimePrekey, started) = try Self.open(sealed, as: me, db, now: now)
            let contact = sealed.sender
            try Self.save(next, contact: contact, db, now: now)
            if let usedOneTimePrekey {  // one-time: gone once used, in the same transaction
                try db.execute(sql: "DELETE FROM one_time_prekeys WHERE id = ?", arguments: [Int64(usedOneTimePrekey)])
            }
            // Not for a typing indicator: its id is not stored, so a replay of one would not be known.
            if started && opened.message.type != .typing { try Self.adopt(next, contact: contact, db, now: now) }
            try db.execute(sql: "UPDATE contacts SET sessions_used = 1 WHERE uid = ?", arguments: [contact])
            if opened.message.type != .typing {
                try Self.storeReceived(ReceivedMessage(id: sealed.messageID, sender: opened.sender, message: opened.message,
                                                       body: opened.body), db)
            }
            return opened
        }
    }

    /// Opens a version 2 message without keeping anything: for a notice under an identity key
    /// not trusted yet, which is read (it can only mark messages sent to its author) but starts
    /// no session with that key.
    func openWithoutKeeping(_ sealed: SessionEnvelope, as me: Identity, now: Double = Date().timeIntervalSince1970) async throws -> OpenedEnvelope {
        try await pool.read { db in try Self.open(sealed, as: me, db, now: now).opened }
    }

    /// The opening itself: the session by id, or a new one from the prekeys the start names.
    private static func open(_ sealed: SessionEnvelope, as me: Identity, _ db: Database,
                             now: Double) throws -> (opened: OpenedEnvelope, next: Session, usedOneTimePrekey: UInt32?, started: Bool) {
        let session: Session
        var usedOneTimePrekey: UInt32?
        var started = false
        if let row = try Row.fetchOne(db, sql: "SELECT contact, state FROM sessions WHERE id = ?", arguments: [Data(sealed.sessionID)]) {
            // A session id is one session's, whoever names it: another contact's is not this one's.
            guard (row["contact"] as String) == sealed.sender else { throw EnvelopeError.sessionMismatch }
            guard let stored = Self.session(row["state"]) else { throw EnvelopeError.noSession }
            session = stored
        } else {
            guard let start = sealed.start else { throw EnvelopeError.noSession }
            // A replaced signed prekey still counts: messages sealed before the rotation arrive later.
            guard let signedPrekey = keyPair(try Data.fetchOne(db, sql: "SELECT secret_key FROM signed_prekeys WHERE id = ?",
                                                               arguments: [Int64(start.signedPrekeyID)])) else {
                throw EnvelopeError.unknownPrekey
            }
            var oneTimePrekey: X25519KeyPair?
            if let id = start.oneTimePrekeyID {
                guard let pair = keyPair(try Data.fetchOne(db, sql: "SELECT secret_key FROM one_time_prekeys WHERE id = ?",
                                                           arguments: [Int64(id)])) else { throw EnvelopeError.unknownPrekey }
                oneTimePrekey = pair
                usedOneTimePrekey = id
            }
            session = try Session.accept(sealed, identity: me.signing, signedPrekey: signedPrekey, oneTimePrekey: oneTimePrekey)
            started = true
        }
        let (opened, next) = try sealed.open(with: session, identity: me.signing.publicKey, now: Int64(now))
        return (opened, next, usedOneTimePrekey, started)
    }

    /// Drops the skipped message keys past their lifetime from every session, also those that
    /// receive nothing more (receiving drops them too); returns how many sessions changed.
    @discardableResult
    func dropExpiredSkippedKeys(now: Double = Date().timeIntervalSince1970) async throws -> Int {
        try await pool.write { db in
            var changed = 0
            for row in try Row.fetchAll(db, sql: "SELECT contact, state, used_at FROM sessions") {
                guard let session = Self.session(row["state"]), let pruned = session.droppingExpiredSkippedKeys(now: Int64(now)) else { continue }
                try Self.save(pruned, contact: row["contact"], db, now: row["used_at"])
                changed += 1
            }
            return changed
        }
    }

    /// Whether a version 1 envelope from `contact` is a downgrade: a version 2 message from it was
    /// accepted before (spec/sessions.md §6).
    func usesSessions(_ contact: String) async throws -> Bool {
        try await pool.read { db in
            try Bool.fetchOne(db, sql: "SELECT sessions_used FROM contacts WHERE uid = ?", arguments: [contact]) ?? false
        }
    }

    private static func session(_ state: Data?) -> Session? {
        guard let state else { return nil }
        var bytes = [UInt8](state)
        defer { wipe(&bytes) }
        return Session(serialized: bytes)
    }

    private static func save(_ session: Session, contact: String, _ db: Database, now: Double) throws {
        var state = session.serialized()
        defer { wipe(&state) }
        try db.execute(sql: """
            INSERT INTO sessions (id, contact, peer_identity, state, active, used_at) VALUES (?, ?, ?, ?, 0, ?)
            ON CONFLICT (id) DO UPDATE SET state = excluded.state, used_at = excluded.used_at WHERE sessions.contact = excluded.contact
            """, arguments: [Data(session.id), contact, Data(session.peerIdentity.bytes), Data(state), now])
        guard db.changesCount == 1 else { throw EnvelopeError.sessionMismatch }
    }

    /// A session the contact started: it becomes the active one, unless this side's active
    /// session is one this side started that the contact has not answered yet and has the
    /// smaller id — then both sides keep that one (two contacts who started at the same moment
    /// end on one session).
    private static func adopt(_ session: Session, contact: String, _ db: Database, now: Double) throws {
        if let row = try Row.fetchOne(db, sql: "SELECT id, state FROM sessions WHERE contact = ? AND active = 1", arguments: [contact]),
           let current = Self.session(row["state"]), current.initiated, current.start != nil,
           current.peerIdentity == session.peerIdentity, current.id.lexicographicallyPrecedes(session.id) {
            return
        }
        try activate(session.id, contact: contact, db, now: now)
    }

    /// Makes session `id` the active one with `contact`, and drops the sessions past the bounds:
    /// more than ``maxSessionsPerContact``, or inactive and unused for the longest message lifetime.
    private static func activate(_ id: [UInt8], contact: String, _ db: Database, now: Double) throws {
        try db.execute(sql: "UPDATE sessions SET active = (id = ?) WHERE contact = ?", arguments: [Data(id), contact])
        try db.execute(sql: """
            DELETE FROM sessions WHERE contact = ? AND active = 0 AND id NOT IN (
                SELECT id FROM sessions WHERE contact = ? AND active = 0 ORDER BY used_at DESC LIMIT ?)
            """, arguments: [contact, contact, maxSessionsPerContact - 1])
        try db.execute(sql: "DELETE FROM sessions WHERE active = 0 AND used_at < ?", arguments: [now - previousKeyLifetime])
    }
}
