import Foundation
import GRDB

// One-time prekeys on SQLite (``RelayStore``; spec/protocol.md §4.14). Every write runs in the
// pool's one writer transaction at a time, which is what makes a claim atomic here: no two
// claims read the same lowest id.
extension SQLiteStore {
    /// Adds `prekeys` to `uid`'s supply in one transaction; a retry of a stored one changes
    /// nothing, one stored with another key or a supply over `limit` refuses all of them.
    func addPrekeys(uid: String, _ prekeys: [StoredPrekey], limit: Int, now: Int64) async throws -> Int {
        try await write("add_prekeys") { db in
            let lookup = try db.cachedStatement(sql: "SELECT key FROM prekeys WHERE uid = ? AND id = ?")
            var added: [StoredPrekey] = []
            for prekey in prekeys {
                guard let existing = try String.fetchOne(lookup, arguments: [uid, Int64(prekey.id)]) else {
                    added.append(prekey)
                    continue
                }
                // Prekeys are public keys: no need for a constant-time compare.
                guard existing == prekey.key else { throw StoreRefusal.prekeyConflict }
            }
            let stored = try Self.prekeyCount(db, uid: uid)
            guard stored + added.count <= limit else { throw StoreRefusal.tooManyPrekeys }
            let insert = try db.cachedStatement(sql: "INSERT INTO prekeys (uid, id, key, created_at) VALUES (?, ?, ?, ?)")
            for prekey in added { try insert.execute(arguments: [uid, Int64(prekey.id), prekey.key, now]) }
            return stored + added.count
        }
    }

    /// The number of `uid`'s stored prekeys.
    func prekeyCount(uid: String) async throws -> Int {
        try await read("prekey_count") { db in try Self.prekeyCount(db, uid: uid) }
    }

    private static func prekeyCount(_ db: Database, uid: String) throws -> Int {
        try Int.fetchOne(db.cachedStatement(sql: "SELECT count(*) FROM prekeys WHERE uid = ?"), arguments: [uid]) ?? 0
    }

    /// Erases all of `uid`'s prekeys.
    func deletePrekeys(uid: String) async throws {
        try await write("delete_prekeys") { db in
            try db.cachedStatement(sql: "DELETE FROM prekeys WHERE uid = ?").execute(arguments: [uid])
        }
    }

    /// Takes and erases `uid`'s prekey of the lowest id, unless `uid` has blocked `claimer`; with
    /// the number left, counted in the same transaction.
    func claimPrekey(uid: String, claimer: String) async throws -> ClaimedPrekey? {
        try await write("claim_prekey") { db in
            if try Bool.fetchOne(db.cachedStatement(sql: "SELECT 1 FROM blocked WHERE owner = ? AND author = ?"),
                                 arguments: [uid, claimer]) != nil {
                throw StoreRefusal.blocked
            }
            let row = try Row.fetchOne(db.cachedStatement(sql: """
                DELETE FROM prekeys WHERE uid = ? AND id = (SELECT min(id) FROM prekeys WHERE uid = ?) RETURNING id, key
                """), arguments: [uid, uid])
            guard let row else { return nil }
            return ClaimedPrekey(prekey: StoredPrekey(id: UInt32(row["id"] as Int64), key: row["key"]),
                                 remaining: try Self.prekeyCount(db, uid: uid))
        }
    }
}
