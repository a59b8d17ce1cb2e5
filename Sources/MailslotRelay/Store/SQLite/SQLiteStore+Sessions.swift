import Foundation
import GRDB

extension SQLiteStore {
    /// Stores the hashes of a new sign-in's access/refresh pair in a new `family`. When `uid`
    /// already has `maxFamilies` sign-ins, the least recently refreshed ones are revoked to make
    /// room: a uid's rows stay bounded however often it signs in. The number revoked.
    @discardableResult
    func insertSessionPair(uid: String, family: Data, accessHash: Data, accessExpiresAt: Int64,
                           refreshHash: Data, refreshExpiresAt: Int64, maxFamilies: Int = .max) async throws -> Int {
        try await write("insert_session_pair") { db in
            // A family's latest refresh token expires last: the family refreshed longest ago comes first.
            let evicted = try Data.fetchAll(db.cachedStatement(sql: """
                SELECT family FROM sessions WHERE uid = ? AND kind = 1 GROUP BY family ORDER BY max(expires_at) DESC LIMIT -1 OFFSET ?
                """), arguments: [uid, max(0, maxFamilies - 1)])
            let revoke = try db.cachedStatement(sql: "DELETE FROM sessions WHERE family = ?")
            for family in evicted {
                try revoke.execute(arguments: [family])
                try Self.deleteRegistrations(db, family: family)
            }
            try Self.insertPair(db, uid: uid, family: family, accessHash: accessHash, accessExpiresAt: accessExpiresAt,
                                refreshHash: refreshHash, refreshExpiresAt: refreshExpiresAt)
            return evicted.count
        }
    }

    private static func insertPair(_ db: Database, uid: String, family: Data, accessHash: Data, accessExpiresAt: Int64,
                                   refreshHash: Data, refreshExpiresAt: Int64) throws {
        try db.execute(sql: "INSERT INTO sessions (hash, kind, uid, family, expires_at) VALUES (?, 0, ?, ?, ?)",
                       arguments: [accessHash, uid, family, accessExpiresAt])
        try db.execute(sql: "INSERT INTO sessions (hash, kind, uid, family, expires_at) VALUES (?, 1, ?, ?, ?)",
                       arguments: [refreshHash, uid, family, refreshExpiresAt])
    }

    /// The session whose secret hashes to `hash`, if any. A row of a kind this relay does not
    /// know is no session at all (fail closed; the schema refuses such rows since `v5`).
    func session(hash: Data) async throws -> StoredSession? {
        try await read("session") { db in
            guard let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT * FROM sessions WHERE hash = ?"), arguments: [hash]),
                  let kind = StoredSession.Kind(rawValue: row["kind"]) else { return nil }
            return StoredSession(kind: kind, uid: row["uid"], family: row["family"], expiresAt: row["expires_at"], spent: row["spent"] != 0)
        }
    }

    /// Spends the refresh token with `hash` and stores its successor pair, atomically: two
    /// concurrent refreshes with the same token cannot both succeed.
    func rotateRefresh(hash: Data, now: Int64, accessHash: Data, accessExpiresAt: Int64,
                       refreshHash: Data, refreshExpiresAt: Int64) async throws -> RefreshOutcome {
        try await write("rotate_refresh") { db in
            guard let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT * FROM sessions WHERE hash = ? AND kind = 1"), arguments: [hash]) else {
                return .invalid
            }
            let family: Data = row["family"]
            if row["spent"] != 0 {
                // A spent refresh token came back: someone holds a copy. Revoke the whole sign-in.
                try db.cachedStatement(sql: "DELETE FROM sessions WHERE family = ?").execute(arguments: [family])
                try Self.deleteRegistrations(db, family: family)
                return .reused
            }
            guard (row["expires_at"] as Int64) > now else { return .invalid }
            let uid: String = row["uid"]
            try db.cachedStatement(sql: "UPDATE sessions SET spent = 1 WHERE hash = ?").execute(arguments: [hash])
            // One live access session per family: the previous one ends with the rotation.
            try db.cachedStatement(sql: "DELETE FROM sessions WHERE family = ? AND kind = 0").execute(arguments: [family])
            try Self.insertPair(db, uid: uid, family: family, accessHash: accessHash, accessExpiresAt: accessExpiresAt,
                                refreshHash: refreshHash, refreshExpiresAt: refreshExpiresAt)
            // Spent tokens are kept to recognise their reuse, but only the latest few: a client
            // refreshing in a loop must not grow its rows without bound. An older spent token
            // comes back as unknown (refresh_invalid) rather than as reused.
            try db.cachedStatement(sql: """
                DELETE FROM sessions WHERE hash IN (
                    SELECT hash FROM sessions WHERE family = ? AND kind = 1 AND spent = 1 ORDER BY expires_at DESC LIMIT -1 OFFSET ?)
                """).execute(arguments: [family, Self.spentRefreshTokensKept])
            return .rotated(uid: uid)
        }
    }

    /// Spent refresh tokens kept per family, to recognise their reuse (every backend's bound).
    static var spentRefreshTokensKept: Int { StoredSession.spentRefreshTokensKept }

    /// Revokes every session of `family` (sign-out) and, in the same transaction, the push
    /// registrations it wrote: the device that signs out stops being woken at once.
    func revokeFamily(_ family: Data) async throws {
        try await write("revoke_family") { db in
            try db.cachedStatement(sql: "DELETE FROM sessions WHERE family = ?").execute(arguments: [family])
            try Self.deleteRegistrations(db, family: family)
        }
    }
}
