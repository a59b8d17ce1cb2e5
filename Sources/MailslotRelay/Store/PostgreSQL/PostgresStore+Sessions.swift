import Foundation
import Logging
import PostgresNIO

extension PostgresStore {
    /// Stores the hashes of a new sign-in's access/refresh pair in a new `family`. When `uid`
    /// already has `maxFamilies` sign-ins, the least recently refreshed ones are revoked to make
    /// room. The uid's sign-ins are locked (an advisory lock for the transaction) while they are
    /// counted, so concurrent sign-ins cannot together pass the cap. The number revoked.
    @discardableResult
    func insertSessionPair(uid: String, family: Data, accessHash: Data, accessExpiresAt: Int64,
                           refreshHash: Data, refreshExpiresAt: Int64, maxFamilies: Int) async throws -> Int {
        try await write("insert_session_pair") { connection, logger in
            try await Self.lock(connection, logger, space: .signIns, key: uid)
            // A family's latest refresh token expires last: the family refreshed longest ago comes first.
            let rows = try await connection.query("""
                SELECT family FROM sessions WHERE uid = \(uid) AND kind = 1 GROUP BY family
                ORDER BY max(expires_at) DESC OFFSET \(Int64(max(0, maxFamilies - 1)))
                """, logger: logger)
            var evicted: [Data] = []
            for try await family in rows.decode(Data.self) { evicted.append(family) }
            for family in evicted {
                try await connection.query("DELETE FROM sessions WHERE family = \(family)", logger: logger)
                try await Self.deleteRegistrations(connection, logger, family: family)
            }
            try await Self.insertPair(connection, logger, uid: uid, family: family, accessHash: accessHash, accessExpiresAt: accessExpiresAt,
                                      refreshHash: refreshHash, refreshExpiresAt: refreshExpiresAt)
            return evicted.count
        }
    }

    private static func insertPair(_ connection: PostgresConnection, _ logger: Logger, uid: String, family: Data, accessHash: Data,
                                   accessExpiresAt: Int64, refreshHash: Data, refreshExpiresAt: Int64) async throws {
        try await connection.query("""
            INSERT INTO sessions (hash, kind, uid, family, expires_at)
            VALUES (\(accessHash), 0, \(uid), \(family), \(accessExpiresAt)), (\(refreshHash), 1, \(uid), \(family), \(refreshExpiresAt))
            """, logger: logger)
    }

    /// The session whose secret hashes to `hash`, if any. A row of a kind this relay does not
    /// know is no session at all (fail closed; the schema's CHECK refuses such rows anyway).
    func session(hash: Data) async throws -> StoredSession? {
        try await read("session") { connection, logger in
            guard let row = try await Self.first(connection, """
                SELECT kind, uid, family, expires_at, spent FROM sessions WHERE hash = \(hash)
                """, logger) else { return nil }
            let (kind, uid, family, expiresAt, spent) = try row.decode((Int16, String, Data, Int64, Int16).self)
            guard let kind = StoredSession.Kind(rawValue: Int(kind)) else { return nil }
            return StoredSession(kind: kind, uid: uid, family: family, expiresAt: expiresAt, spent: spent != 0)
        }
    }

    /// Spends the refresh token with `hash` and stores its successor pair, atomically: its row is
    /// locked (FOR UPDATE) while it is checked, so of two concurrent refreshes with the same token
    /// the second finds it spent — the reuse it is.
    func rotateRefresh(hash: Data, now: Int64, accessHash: Data, accessExpiresAt: Int64,
                       refreshHash: Data, refreshExpiresAt: Int64) async throws -> RefreshOutcome {
        try await write("rotate_refresh") { connection, logger in
            guard let row = try await Self.first(connection, """
                SELECT uid, family, expires_at, spent FROM sessions WHERE hash = \(hash) AND kind = 1 FOR UPDATE
                """, logger) else { return .invalid }
            let (uid, family, expiresAt, spent) = try row.decode((String, Data, Int64, Int16).self)
            if spent != 0 {
                // A spent refresh token came back: someone holds a copy. Revoke the whole sign-in.
                try await connection.query("DELETE FROM sessions WHERE family = \(family)", logger: logger)
                try await Self.deleteRegistrations(connection, logger, family: family)
                return .reused
            }
            guard expiresAt > now else { return .invalid }
            try await connection.query("UPDATE sessions SET spent = 1 WHERE hash = \(hash)", logger: logger)
            // One live access session per family: the previous one ends with the rotation.
            try await connection.query("DELETE FROM sessions WHERE family = \(family) AND kind = 0", logger: logger)
            try await Self.insertPair(connection, logger, uid: uid, family: family, accessHash: accessHash, accessExpiresAt: accessExpiresAt,
                                      refreshHash: refreshHash, refreshExpiresAt: refreshExpiresAt)
            // Spent tokens are kept to recognise their reuse, but only the latest few: a client
            // refreshing in a loop must not grow its rows without bound. An older spent token
            // comes back as unknown, not as reused.
            try await connection.query("""
                DELETE FROM sessions WHERE hash IN (
                    SELECT hash FROM sessions WHERE family = \(family) AND kind = 1 AND spent = 1
                    ORDER BY expires_at DESC OFFSET \(Int64(StoredSession.spentRefreshTokensKept)))
                """, logger: logger)
            return .rotated(uid: uid)
        }
    }

    /// Revokes every session of `family` (sign-out) and, in the same transaction, the push
    /// registrations it wrote: the device that signs out stops being woken at once.
    func revokeFamily(_ family: Data) async throws {
        try await write("revoke_family") { connection, logger in
            _ = try await connection.query("DELETE FROM sessions WHERE family = \(family)", logger: logger)
            try await Self.deleteRegistrations(connection, logger, family: family)
        }
    }
}
