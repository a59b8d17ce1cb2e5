import Foundation
import GRDB
import MailslotWire

/// A contact's keys as this client knows them, and how far they are trusted.
public struct Contact: Sendable, Equatable {
    /// How the contact's identity key is trusted.
    public enum Trust: String, Sendable {
        /// Pinned on first use, not compared out of band.
        case pinned
        /// The user compared the safety number and said so (`trust`).
        case verified
        /// The relay now serves another identity key: sending and receiving are refused until the
        /// user trusts the new key.
        case changed
        /// The user compared the safety number of the pinned key and it did not match (the relay,
        /// or whoever holds the issuer key, may have substituted keys at first contact): sending
        /// and receiving are refused, as for a changed key, until a comparison matches.
        case disputed
    }
    /// The contact's uid.
    public let uid: String
    /// The pinned identity key.
    public let identityKey: IdentityPublicKey
    /// The mailbox key from the pinned bundle.
    public let mailboxKey: MailboxPublicKey
    /// How far it is trusted.
    public let trust: Trust
    /// The signed prekey of the contact's bundle (version 2): messages to it go in a ratchet with
    /// forward secrecy (spec/ratchet.md). Nil for a contact that publishes none (version 1).
    public let signedPrekey: PublishedPrekey?

    /// The key id of the pinned keys, sent with every message sealed to them (`KeyBundle.keyID`).
    public var keyID: String { KeyBundle.keyID(identityKey: identityKey, mailboxKey: mailboxKey) }
}

extension ClientStore {
    func contact(_ uid: String) async throws -> Contact? {
        try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM contacts WHERE uid = ?", arguments: [uid]).flatMap(Self.contact(from:))
        }
    }

    func contacts() async throws -> [Contact] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM contacts ORDER BY uid").compactMap(Self.contact(from:))
        }
    }

    private static func contact(from row: Row) -> Contact? {
        let identity: Data = row["identity_key"], mailbox: Data = row["mailbox_key"], trust: String = row["trust"]
        guard let identityKey = IdentityPublicKey(bytes: identity), let mailboxKey = MailboxPublicKey(bytes: mailbox),
              let level = Contact.Trust(rawValue: trust) else { return nil }
        let prekeyID: Int64? = row["signed_prekey_id"], prekey: Data? = row["signed_prekey"]
        let signedPrekey = prekeyID.flatMap { id in
            prekey.flatMap(MailboxPublicKey.init(bytes:)).map { PublishedPrekey(id: UInt32(truncatingIfNeeded: id), key: $0) }
        }
        return Contact(uid: row["uid"], identityKey: identityKey, mailboxKey: mailboxKey, trust: level, signedPrekey: signedPrekey)
    }

    /// Pins `bundle` (already verified for its uid) on first use.
    func pin(_ bundle: KeyBundle) async throws {
        try await pool.write { db in
            try db.execute(sql: """
                INSERT INTO contacts (uid, identity_key, mailbox_key, trust, updated_at, signed_prekey_id, signed_prekey)
                VALUES (?, ?, ?, 'pinned', ?, ?, ?)
                ON CONFLICT (uid) DO NOTHING
                """, arguments: [bundle.uid, Data(bundle.identityKey.bytes), Data(bundle.mailboxKey.bytes), Date().timeIntervalSince1970,
                                 bundle.signedPrekey.map { Int64($0.id) }, bundle.signedPrekey.map { Data($0.key.bytes) }])
        }
    }

    /// Updates the mailbox key and signed prekey of a contact whose identity key is unchanged
    /// (keys rotate under one identity). A bundle without a signed prekey leaves the known one:
    /// a contact once seen with ratchets is never sent version 1 again (spec/ratchet.md §6).
    func updateMailboxKey(_ bundle: KeyBundle) async throws {
        try await pool.write { db in
            try db.execute(sql: """
                UPDATE contacts SET mailbox_key = ?, updated_at = ?,
                    signed_prekey_id = COALESCE(?, signed_prekey_id), signed_prekey = COALESCE(?, signed_prekey)
                WHERE uid = ? AND identity_key = ?
                """, arguments: [Data(bundle.mailboxKey.bytes), Date().timeIntervalSince1970, bundle.signedPrekey.map { Int64($0.id) },
                                 bundle.signedPrekey.map { Data($0.key.bytes) }, bundle.uid, Data(bundle.identityKey.bytes)])
        }
    }

    /// Marks the contact as changed and keeps the new bundle on offer until the user trusts it —
    /// if the contact still holds `pinned`, the identity key the bundle was compared with: a key
    /// trusted meanwhile (by another process) is not marked changed by a stale comparison.
    func markChanged(_ uid: String, offered bundle: KeyBundle, replacing pinned: IdentityPublicKey) async throws {
        try await pool.write { db in
            try db.execute(sql: "UPDATE contacts SET trust = 'changed', offered_bundle = ?, updated_at = ? WHERE uid = ? AND identity_key = ?",
                           arguments: [Data(bundle.encoded()), Date().timeIntervalSince1970, uid, Data(pinned.bytes)])
        }
    }

    /// Takes back a change the relay no longer shows (it serves the pinned identity key again):
    /// the contact is pinned again, the keys it offered forgotten.
    func withdrawChange(_ uid: String) async throws {
        try await pool.write { db in
            try db.execute(sql: "UPDATE contacts SET trust = 'pinned', offered_bundle = NULL, updated_at = ? WHERE uid = ? AND trust = 'changed'",
                           arguments: [Date().timeIntervalSince1970, uid])
        }
    }

    /// The keys trusting `uid` would install, with the pinned contact: a changed contact's
    /// offered bundle (verified again for its uid), otherwise the pinned keys. Nil for an unknown
    /// contact.
    struct TrustCandidate: Sendable {
        let pinned: Contact
        /// The offered bundle while the contact changed; nil when trusting keeps the pinned keys.
        let offered: KeyBundle?
        /// The contact changed but no offered bundle is kept that verifies (a store written by an
        /// older version, or damaged): there is nothing to compare until the keys are fetched again.
        var offerMissing: Bool { pinned.trust == .changed && offered == nil }
        var identityKey: IdentityPublicKey { offered?.identityKey ?? pinned.identityKey }
        var keyID: String { offered?.keyID ?? pinned.keyID }
    }

    func trustCandidate(_ uid: String) async throws -> TrustCandidate? {
        try await pool.read { db in try Self.trustCandidate(uid, db) }
    }

    private static func trustCandidate(_ uid: String, _ db: Database) throws -> TrustCandidate? {
        guard let row = try Row.fetchOne(db, sql: "SELECT * FROM contacts WHERE uid = ?", arguments: [uid]),
              let pinned = contact(from: row) else { return nil }
        let offered = (row["offered_bundle"] as Data?).flatMap { try? KeyBundle.decode(Array($0), for: uid) }
        return TrustCandidate(pinned: pinned, offered: offered)
    }

    /// Trusts the contact if `expected` (60 ASCII digits) is the safety number of `me` and the
    /// identity key trusting installs: a changed contact takes its offered keys; the contact
    /// becomes verified. Checked and installed in one transaction, so the bundle compared is the
    /// bundle installed (a relay cannot swap the offer between the two). When the number differs
    /// nothing is trusted, and a contact pinned on first use becomes ``Contact/Trust/disputed``
    /// in the same transaction, so that nothing more is sealed to a key the user found wrong.
    func trust(_ uid: String, expecting expected: [UInt8], as me: Identity) async throws -> TrustOutcome {
        try await pool.write { db in
            guard let candidate = try Self.trustCandidate(uid, db) else { return .unknown }
            guard !candidate.offerMissing else { return .offerMissing }
            // Not a secret, but compared whole and in constant time all the same: all 60 digits.
            guard constantTimeEquals(SafetyNumberCheck.digits(me, uid, candidate.identityKey), expected) else {
                // A first-contact key whose comparison failed is not used until one matches.
                try db.execute(sql: "UPDATE contacts SET trust = 'disputed', updated_at = ? WHERE uid = ? AND trust = 'pinned'",
                               arguments: [Date().timeIntervalSince1970, uid])
                return .mismatch
            }
            if let bundle = candidate.offered {
                // A new identity: new keys, and the ratchets with the old one are over.
                try db.execute(sql: """
                    UPDATE contacts SET identity_key = ?, mailbox_key = ?, signed_prekey_id = ?, signed_prekey = ?, sessions_used = 0
                    WHERE uid = ?
                    """, arguments: [Data(bundle.identityKey.bytes), Data(bundle.mailboxKey.bytes), bundle.signedPrekey.map { Int64($0.id) },
                                     bundle.signedPrekey.map { Data($0.key.bytes) }, uid])
                try db.execute(sql: "DELETE FROM sessions WHERE contact = ? AND peer_identity <> ?",
                               arguments: [uid, Data(bundle.identityKey.bytes)])
            }
            try db.execute(sql: "UPDATE contacts SET trust = 'verified', offered_bundle = NULL, updated_at = ? WHERE uid = ?",
                           arguments: [Date().timeIntervalSince1970, uid])
            return try Row.fetchOne(db, sql: "SELECT * FROM contacts WHERE uid = ?", arguments: [uid]).flatMap(Self.contact(from:))
                .map(TrustOutcome.trusted) ?? .unknown
        }
    }

    /// What ``trust(_:expecting:as:)`` did.
    enum TrustOutcome: Sendable {
        /// The contact is verified, with the keys whose number matched.
        case trusted(Contact)
        /// No such contact.
        case unknown
        /// The number did not match: nothing was trusted (a pinned contact is now disputed).
        case mismatch
        /// The contact changed but no offer is kept to compare: fetch the keys again first.
        case offerMissing
    }
}
