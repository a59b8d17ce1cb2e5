import Foundation
import GRDB
import MailslotWire

/// The user's own keys: the Ed25519 identity that signs, the X25519 mailbox key that opens, and
/// the mailbox keys a rotation replaced, kept while messages sealed to them may still arrive.
struct Identity: Sendable {
    let uid: String
    let signing: IdentityKeyPair
    let mailbox: MailboxKeyPair
    /// Replaced mailbox keys, newest first, no older than ``ClientStore/previousKeyLifetime``.
    var previousMailboxes: [MailboxKeyPair] = []

    /// The self-signed bundle to publish at `/v1/users/{uid}/keys`, with the current signed prekey.
    func bundle(signedPrekey: PublishedPrekey, at date: Date = Date()) -> KeyBundle {
        KeyBundle(uid: uid, identity: signing, mailboxKey: mailbox.publicKey, signedPrekey: signedPrekey, createdAt: date)
    }

    /// Opens an envelope's outer layer with the current mailbox key, or else with a previous one:
    /// a sender may have sealed it before the rotation. Any failure other than "sealed to another
    /// key" is final.
    func unseal(_ envelope: [UInt8], id: String) throws(EnvelopeError) -> UnsealedEnvelope {
        do { return try Envelope.unseal(envelope, id: id, recipient: uid, keys: mailbox) } catch .cannotDecrypt {
            for previous in previousMailboxes {
                do { return try Envelope.unseal(envelope, id: id, recipient: uid, keys: previous) } catch .cannotDecrypt { continue }
            }
            throw .cannotDecrypt
        }
    }
}

extension ClientStore {
    /// How long a replaced mailbox key is kept: the longest message lifetime a relay grants, and a
    /// day for clocks and a recipient that was away. After that no relay still holds a message
    /// sealed to it, and its secret is erased.
    static let previousKeyLifetime: Double = Double(Defaults.maxMessageTTL) + 86_400

    /// The stored identity, if any, with its unexpired previous mailbox keys.
    func identity(now: Double = Date().timeIntervalSince1970) async throws -> Identity? {
        try await pool.read { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT * FROM identity WHERE id = 1") else { return nil }
            let identitySecret: Data = row["identity_secret"], mailboxSecret: Data = row["mailbox_secret"]
            guard let signing = IdentityKeyPair(secretKey: SecretBytes(copying: identitySecret)),
                  let mailbox = MailboxKeyPair(secretKey: SecretBytes(copying: mailboxSecret)) else { return nil }
            let previous = try Data.fetchAll(db, sql: "SELECT secret_key FROM previous_mailbox_keys WHERE retired_at > ? ORDER BY retired_at DESC",
                                             arguments: [now - Self.previousKeyLifetime])
                .compactMap { MailboxKeyPair(secretKey: SecretBytes(copying: $0)) }
            return Identity(uid: row["uid"], signing: signing, mailbox: mailbox, previousMailboxes: previous)
        }
    }

    /// Creates and stores the identity of `uid` on first use; returns the stored one otherwise.
    /// A store that belongs to another uid is refused: one profile, one user.
    func identity(creatingFor uid: String) async throws -> Identity {
        if let existing = try await identity() {
            guard existing.uid == uid else { throw ClientError.profileMismatch(owner: existing.uid, requested: uid) }
            return existing
        }
        let created = Identity(uid: uid, signing: IdentityKeyPair(), mailbox: MailboxKeyPair())
        let identitySecret = created.signing.secretKey.withUnsafeBytes { Data($0) }
        let mailboxSecret = created.mailbox.secretKey.withUnsafeBytes { Data($0) }
        try await pool.write { db in
            try db.execute(sql: "INSERT INTO identity (id, uid, identity_secret, mailbox_secret, created_at) VALUES (1, ?, ?, ?, ?)",
                           arguments: [uid, identitySecret, mailboxSecret, Date().timeIntervalSince1970])
        }
        return created
    }

    /// Replaces the mailbox key with a new one, keeping the old one as a previous key, and erases
    /// previous keys past their lifetime.
    func rotateMailboxKey(now: Double = Date().timeIntervalSince1970) async throws -> Identity {
        let fresh = MailboxKeyPair()
        let freshSecret = fresh.secretKey.withUnsafeBytes { Data($0) }
        try await pool.write { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT mailbox_secret FROM identity WHERE id = 1") else { throw ClientError.notSignedIn }
            let oldSecret: Data = row["mailbox_secret"]
            guard let old = MailboxKeyPair(secretKey: SecretBytes(copying: oldSecret)) else { throw ClientError.notSignedIn }
            try db.execute(sql: "INSERT OR REPLACE INTO previous_mailbox_keys (public_key, secret_key, retired_at) VALUES (?, ?, ?)",
                           arguments: [Data(old.publicKey.bytes), oldSecret, now])
            try db.execute(sql: "UPDATE identity SET mailbox_secret = ?, published = 0 WHERE id = 1", arguments: [freshSecret])
        }
        try await erasePreviousKeys(now: now)
        guard let rotated = try await identity(now: now) else { throw ClientError.notSignedIn }
        return rotated
    }

    /// Erases the previous mailbox keys that are past their lifetime at `now` (the database
    /// overwrites deleted rows: `secure_delete`); returns how many.
    @discardableResult
    func erasePreviousKeys(now: Double = Date().timeIntervalSince1970) async throws -> Int {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM previous_mailbox_keys WHERE retired_at <= ?", arguments: [now - Self.previousKeyLifetime])
            return db.changesCount
        }
    }

    /// Copies the WAL into the database and truncates it, so that erased rows leave no older copy
    /// in the WAL file either.
    func checkpoint() async throws {
        try await pool.writeWithoutTransaction { db in _ = try db.checkpoint(.truncate) }
        counters.checkpointed()
    }

    /// Whether the relay was given `identity`'s current mailbox key.
    func isPublished(_ identity: Identity) async throws -> Bool {
        try await pool.read { db in
            try Bool.fetchOne(db, sql: "SELECT published FROM identity WHERE id = 1 AND mailbox_secret = ?",
                              arguments: [identity.mailbox.secretKey.withUnsafeBytes { Data($0) }]) ?? false
        }
    }

    /// Records that the relay took `identity`'s bundle — only if its mailbox key is still the
    /// current one (a rotation meanwhile stays unpublished).
    func markPublished(_ identity: Identity) async throws {
        let secret = identity.mailbox.secretKey.withUnsafeBytes { Data($0) }
        try await pool.write { db in
            try db.execute(sql: "UPDATE identity SET published = 1 WHERE id = 1 AND mailbox_secret = ?", arguments: [secret])
        }
    }
}
