import Foundation
import Logging
import PostgresNIO

// One-time prekeys on PostgreSQL (``RelayStore``; spec/protocol.md §4.14; ``PostgresSchema``,
// migration 3). No write here changes a mailbox or author size, so none takes the write lock.
extension PostgresStore {
    /// Adds `prekeys` to `uid`'s supply in one transaction; a retry of a stored one changes
    /// nothing, one stored with another key or a supply over `limit` refuses all of them. The
    /// owner's prekeys are locked (an advisory lock for the transaction) while they are counted,
    /// so concurrent uploads cannot together pass the limit.
    func addPrekeys(uid: String, _ prekeys: [StoredPrekey], limit: Int, now: Int64) async throws -> Int {
        try await write("add_prekeys") { connection, logger in
            try await Self.lock(connection, logger, space: .prekeys, key: uid)
            let ids = prekeys.map { Int64($0.id) }
            var existing: [Int64: String] = [:]
            let rows = try await connection.query("SELECT id, key FROM prekeys WHERE uid = \(uid) AND id = ANY(\(ids))", logger: logger)
            for try await (id, key) in rows.decode((Int64, String).self) { existing[id] = key }
            var added: [StoredPrekey] = []
            for prekey in prekeys {
                guard let stored = existing[Int64(prekey.id)] else {
                    added.append(prekey)
                    continue
                }
                // Prekeys are public keys: no need for a constant-time compare.
                guard stored == prekey.key else { throw StoreRefusal.prekeyConflict }
            }
            let count = try await Self.first(connection, "SELECT count(*) FROM prekeys WHERE uid = \(uid)", logger)?.decode(Int64.self) ?? 0
            guard Int(count) + added.count <= limit else { throw StoreRefusal.tooManyPrekeys }
            if !added.isEmpty {
                let addedIDs = added.map { Int64($0.id) }, addedKeys = added.map(\.key)
                try await connection.query("""
                    INSERT INTO prekeys (uid, id, key, created_at)
                    SELECT \(uid), id, key, \(now) FROM unnest(\(addedIDs)::BIGINT[], \(addedKeys)::TEXT[]) AS added (id, key)
                    """, logger: logger)
            }
            return Int(count) + added.count
        }
    }

    /// The number of `uid`'s stored prekeys.
    func prekeyCount(uid: String) async throws -> Int {
        try await read("prekey_count") { connection, logger in
            Int(try await Self.first(connection, "SELECT count(*) FROM prekeys WHERE uid = \(uid)", logger)?.decode(Int64.self) ?? 0)
        }
    }

    /// Erases all of `uid`'s prekeys.
    func deletePrekeys(uid: String) async throws {
        try await write("delete_prekeys") { connection, logger in
            try await Self.lock(connection, logger, space: .prekeys, key: uid)
            try await connection.query("DELETE FROM prekeys WHERE uid = \(uid)", logger: logger)
        }
    }

    /// Takes and erases `uid`'s prekey of the lowest id, unless `uid` has blocked `claimer`. The
    /// claim first takes the owner's prekey lock (an advisory lock for the transaction, the one
    /// uploads and bundle changes take), so that the claims and uploads of one owner, on every
    /// relay, run one after another. That is what makes the count exact: under READ COMMITTED,
    /// two claims at once from 26 would each see its own delete and not the other's, both count
    /// 25, and neither would cross the low-water mark — no frame at all, and none until an
    /// upload, which a claimer could aim for. Serialised, each statement after the lock sees
    /// every earlier claim committed, so exactly one claim leaves 24. The row is deleted by one
    /// statement that picks the lowest id (SKIP LOCKED stays as a guard: no two claims take one
    /// row even without the lock). A claim that crossed the mark notifies the other relays
    /// (delivered at the commit), whose hub may hold the owner's subscription.
    func claimPrekey(uid: String, claimer: String) async throws -> ClaimedPrekey? {
        try await write("claim_prekey") { [notifications] connection, logger in
            try await Self.lock(connection, logger, space: .prekeys, key: uid)
            if try await Self.first(connection, "SELECT 1 FROM blocked WHERE owner = \(uid) AND author = \(claimer)", logger) != nil {
                throw StoreRefusal.blocked
            }
            guard let row = try await Self.first(connection, """
                DELETE FROM prekeys WHERE (uid, id) = (
                    SELECT uid, id FROM prekeys WHERE uid = \(uid) ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
                RETURNING id, key
                """, logger) else { return nil }
            let (id, key) = try row.decode((Int64, String).self)
            guard let id32 = UInt32(exactly: id) else { throw PostgresSchema.Refusal(description: "a stored prekey id is out of range") }
            let remaining = try await Self.first(connection, "SELECT count(*) FROM prekeys WHERE uid = \(uid)", logger)?.decode(Int64.self) ?? 0
            let claimed = ClaimedPrekey(prekey: StoredPrekey(id: id32, key: key), remaining: Int(remaining))
            if claimed.crossedLowWater {
                try await notifications.notify(.prekeysLow(mailbox: uid, count: claimed.remaining), on: connection, logger: logger)
            }
            return claimed
        }
    }
}
