import Foundation
import GRDB
import MailslotWire

/// The user's own keys: the Ed25519 identity that signs, the X25519 mailbox key that opens.
struct Identity: Sendable {
    let uid: String
    let signing: IdentityKeyPair
    let mailbox: MailboxKeyPair

    /// The self-signed bundle to publish at `/v1/users/{uid}/keys`.
    func bundle(at date: Date = Date()) -> KeyBundle {
        KeyBundle(uid: uid, identity: signing, mailboxKey: mailbox.publicKey, createdAt: date)
    }
}

extension ClientStore {
    /// The stored identity, if any.
    func identity() async throws -> Identity? {
        try await pool.read { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT * FROM identity WHERE id = 1") else { return nil }
            let identitySecret: Data = row["identity_secret"], mailboxSecret: Data = row["mailbox_secret"]
            guard let signing = IdentityKeyPair(secretKey: SecretBytes(copying: identitySecret)),
                  let mailbox = MailboxKeyPair(secretKey: SecretBytes(copying: mailboxSecret)) else { return nil }
            return Identity(uid: row["uid"], signing: signing, mailbox: mailbox)
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
            try db.execute(sql: "INSERT INTO identity (id, uid, identity_secret, mailbox_secret) VALUES (1, ?, ?, ?)",
                           arguments: [uid, identitySecret, mailboxSecret])
        }
        return created
    }
}
