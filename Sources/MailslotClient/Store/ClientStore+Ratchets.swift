import Foundation
import GRDB
import MailslotWire

// Ratchets with forward secrecy on the client's SQLite (spec/ratchet.md §6): this device's
// prekeys, and the ratchets with each contact. A ratchet's state is written in the same
// transaction as what it was used for — the stored message when receiving, before the ack — so a
// crash never loses a readable message nor leaves a ratchet behind its messages; and sealing
// reads, advances and writes the active ratchet in one transaction, so two sends never use one
// message key.
extension ClientStore {
    /// How long a signed prekey is the current one before it is replaced (7 days).
    static let signedPrekeyPeriod: Double = 7 * 86_400
    /// The most one-time prekey secrets kept; beyond, the oldest go (the relay holds at most 200).
    static let maxOneTimePrekeys = 1000
    /// The most ratchets kept with one contact; the least recently used inactive ones go first.
    static let maxRatchetsPerContact = 8

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

    // MARK: Ratchets

    /// Whether a ratchet with `contact`'s pinned identity is active for sending.
    func hasActiveRatchet(with contact: Contact) async throws -> Bool {
        try await pool.read { db in
            try Bool.fetchOne(db, sql: "SELECT 1 FROM sessions WHERE contact = ? AND peer_identity = ? AND active = 1",
                              arguments: [contact.uid, Data(contact.identityKey.bytes)]) ?? false
        }
    }

    /// Keeps `ratchet`, just started with `contact`, as the active one — unless another send
    /// started one meanwhile, which is then kept (this one was never used).
    func startRatchet(_ ratchet: Ratchet, with contact: Contact, now: Double = Date().timeIntervalSince1970) async throws {
        try await pool.write { db in
            guard try !(Bool.fetchOne(db, sql: "SELECT 1 FROM sessions WHERE contact = ? AND peer_identity = ? AND active = 1",
                                      arguments: [contact.uid, Data(contact.identityKey.bytes)]) ?? false) else { return }
            try Self.save(ratchet, contact: contact.uid, db, now: now)
            try Self.activate(ratchet.id, contact: contact.uid, db, now: now)
        }
    }

    /// Seals `message` in the active ratchet with `contact`, advancing it in the same
    /// transaction. Nil when there is no active ratchet.
    func sealInActiveRatchet(_ message: ChatMessage, id: String, as me: Identity, to contact: Contact,
                             now: Double = Date().timeIntervalSince1970) async throws -> [UInt8]? {
        try await pool.write { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT state FROM sessions WHERE contact = ? AND peer_identity = ? AND active = 1",
                                             arguments: [contact.uid, Data(contact.identityKey.bytes)]),
                  var ratchet = Self.ratchet(row["state"]) else { return nil }
            guard ratchet.canSend else {  // its counter is at its end: never wrapped, a new ratchet instead
                try db.execute(sql: "UPDATE sessions SET active = 0 WHERE id = ?", arguments: [Data(ratchet.id)])
                return nil
            }
            let envelope = try Envelope.seal(message, id: id, from: me.uid, identity: me.signing, to: contact.uid,
                                             mailboxKey: contact.mailboxKey, ratchet: &ratchet)
            try Self.save(ratchet, contact: contact.uid, db, now: now)
            return envelope
        }
    }

    /// The contact said it could not read a message: no ratchet with it stays active but
    /// `kept` (the ratchet the contact wrote that in, which it does hold); without one, the next
    /// message starts a new ratchet. The ratchets stay, for receiving.
    func deactivateRatchets(with contact: String, except kept: [UInt8]?) async throws {
        try await pool.write { db in
            try db.execute(sql: "UPDATE sessions SET active = (id IS ?) WHERE contact = ?", arguments: [kept.map { Data($0) }, contact])
        }
    }

    /// Opens a version 2 message in its ratchet — found by id, or started from the prekeys it
    /// names — and, in the same transaction, keeps the advanced ratchet, erases the one-time
    /// prekey it used, and stores the message unless it is a typing indicator. Throws
    /// ``EnvelopeError`` when it does not open; nothing is written then.
    func openInRatchet(_ sealed: RatchetEnvelope, as me: Identity, now: Double = Date().timeIntervalSince1970) async throws -> OpenedEnvelope {
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
    /// no ratchet with that key.
    func openWithoutKeeping(_ sealed: RatchetEnvelope, as me: Identity, now: Double = Date().timeIntervalSince1970) async throws -> OpenedEnvelope {
        try await pool.read { db in try Self.open(sealed, as: me, db, now: now).opened }
    }

    /// The opening itself: the ratchet by id, or a new one from the prekeys the start names.
    private static func open(_ sealed: RatchetEnvelope, as me: Identity, _ db: Database,
                             now: Double) throws -> (opened: OpenedEnvelope, next: Ratchet, usedOneTimePrekey: UInt32?, started: Bool) {
        let ratchet: Ratchet
        var usedOneTimePrekey: UInt32?
        var started = false
        if let row = try Row.fetchOne(db, sql: "SELECT contact, state FROM sessions WHERE id = ?", arguments: [Data(sealed.ratchetID)]) {
            // A ratchet id is one ratchet's, whoever names it: another contact's is not this one's.
            guard (row["contact"] as String) == sealed.sender else { throw EnvelopeError.ratchetMismatch }
            guard let stored = Self.ratchet(row["state"]) else { throw EnvelopeError.noRatchet }
            ratchet = stored
        } else {
            guard let start = sealed.start else { throw EnvelopeError.noRatchet }
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
            ratchet = try Ratchet.accept(sealed, identity: me.signing, signedPrekey: signedPrekey, oneTimePrekey: oneTimePrekey)
            started = true
        }
        let (opened, next) = try sealed.open(with: ratchet, identity: me.signing.publicKey, now: Int64(now))
        return (opened, next, usedOneTimePrekey, started)
    }

    /// Drops the skipped message keys past their lifetime from every ratchet, also those that
    /// receive nothing more (receiving drops them too); returns how many ratchets changed.
    @discardableResult
    func dropExpiredSkippedKeys(now: Double = Date().timeIntervalSince1970) async throws -> Int {
        try await pool.write { db in
            var changed = 0
            for row in try Row.fetchAll(db, sql: "SELECT contact, state, used_at FROM sessions") {
                guard let ratchet = Self.ratchet(row["state"]), let pruned = ratchet.droppingExpiredSkippedKeys(now: Int64(now)) else { continue }
                try Self.save(pruned, contact: row["contact"], db, now: row["used_at"])
                changed += 1
            }
            return changed
        }
    }

    /// Whether a version 1 envelope from `contact` is a downgrade: a version 2 message from it was
    /// accepted before (spec/ratchet.md §6).
    func usesRatchets(_ contact: String) async throws -> Bool {
        try await pool.read { db in
            try Bool.fetchOne(db, sql: "SELECT sessions_used FROM contacts WHERE uid = ?", arguments: [contact]) ?? false
        }
    }

    static func ratchet(_ state: Data?) -> Ratchet? {
        guard let state else { return nil }
        var bytes = [UInt8](state)
        defer { wipe(&bytes) }
        return Ratchet(serialized: bytes)
    }

    static func save(_ ratchet: Ratchet, contact: String, _ db: Database, now: Double) throws {
        var state = ratchet.serialized()
        defer { wipe(&state) }
        try db.execute(sql: """
            INSERT INTO sessions (id, contact, peer_identity, state, active, used_at) VALUES (?, ?, ?, ?, 0, ?)
            ON CONFLICT (id) DO UPDATE SET state = excluded.state, used_at = excluded.used_at WHERE sessions.contact = excluded.contact
            """, arguments: [Data(ratchet.id), contact, Data(ratchet.peerIdentity.bytes), Data(state), now])
        guard db.changesCount == 1 else { throw EnvelopeError.ratchetMismatch }
    }

    /// A ratchet the contact started: it becomes the active one, unless this side's active
    /// ratchet is one this side started that the contact has not answered yet and has the
    /// smaller id — then both sides keep that one (two contacts who started at the same moment
    /// end on one ratchet).
    private static func adopt(_ ratchet: Ratchet, contact: String, _ db: Database, now: Double) throws {
        if let row = try Row.fetchOne(db, sql: "SELECT id, state FROM sessions WHERE contact = ? AND active = 1", arguments: [contact]),
           let current = Self.ratchet(row["state"]), current.initiated, current.start != nil,
           current.peerIdentity == ratchet.peerIdentity, current.id.lexicographicallyPrecedes(ratchet.id) {
            return
        }
        try activate(ratchet.id, contact: contact, db, now: now)
    }

    /// Makes ratchet `id` the active one with `contact`, and drops the ratchets past the bounds:
    /// more than ``maxRatchetsPerContact``, or inactive and unused for the longest message lifetime.
    private static func activate(_ id: [UInt8], contact: String, _ db: Database, now: Double) throws {
        try db.execute(sql: "UPDATE sessions SET active = (id = ?) WHERE contact = ?", arguments: [Data(id), contact])
        try db.execute(sql: """
            DELETE FROM sessions WHERE contact = ? AND active = 0 AND id NOT IN (
                SELECT id FROM sessions WHERE contact = ? AND active = 0 ORDER BY used_at DESC LIMIT ?)
            """, arguments: [contact, contact, maxRatchetsPerContact - 1])
        try db.execute(sql: "DELETE FROM sessions WHERE active = 0 AND used_at < ?", arguments: [now - previousKeyLifetime])
    }
}
