import Foundation
import GRDB
import MailslotWire

// The push targets this device registered and the account's wake-up tag (client migration v9).
// A target is kept so that every sign-in registers it again: the relay removes a registration
// with the sign-in that wrote it (docs/design/wakeups.md §1.5, spec/push.md §2).
extension ClientStore {
    /// A push target as stored: its registration id, the provider, the provider's members as the
    /// JSON of the `PUT` body without the tag, and the tag it was registered with (nil: the
    /// account's tag).
    struct StoredPushTarget: Sendable, Equatable {
        let id: String
        let provider: PushProviderKind
        let target: String
        let tag: String?
    }

    /// Every stored target, by id.
    func pushTargets() async throws -> [StoredPushTarget] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT id, provider, target, tag FROM push_targets ORDER BY id").compactMap { row in
                // A provider this version does not know (a later version's row) is left alone.
                PushProviderKind(rawValue: row["provider"]).map { StoredPushTarget(id: row["id"], provider: $0, target: row["target"], tag: row["tag"]) }
            }
        }
    }

    /// The id of the stored target of `provider`, if there is one (the newest when several).
    func pushTargetID(of provider: PushProviderKind) async throws -> String? {
        try await pool.read { db in
            try String.fetchOne(db, sql: "SELECT id FROM push_targets WHERE provider = ? ORDER BY updated_at DESC, id LIMIT 1",
                                arguments: [provider.rawValue])
        }
    }

    /// Stores `target` under its id, replacing what the id held.
    func savePushTarget(_ target: StoredPushTarget) async throws {
        try await pool.write { db in
            try db.execute(sql: """
                INSERT INTO push_targets (id, provider, target, tag, updated_at) VALUES (?, ?, ?, ?, ?)
                ON CONFLICT (id) DO UPDATE SET provider = excluded.provider, target = excluded.target, tag = excluded.tag,
                    updated_at = excluded.updated_at
                """, arguments: [target.id, target.provider.rawValue, target.target, target.tag, Date().timeIntervalSince1970])
        }
    }

    /// Forgets target `id`: it is not registered again.
    func deletePushTarget(_ id: String) async throws {
        try await pool.write { db in try db.execute(sql: "DELETE FROM push_targets WHERE id = ?", arguments: [id]) }
    }

    /// The account's wake-up tag, made on first use (16 random bytes, unpadded base64url: 22
    /// characters) and the same from then on.
    func pushTag() async throws -> String {
        try await pool.write { db in
            if let tag = try String.fetchOne(db, sql: "SELECT tag FROM push_account WHERE id = 1") { return tag }
            let tag = Base64URL.encode(randomBytes(16))
            try db.execute(sql: "INSERT INTO push_account (id, tag) VALUES (1, ?)", arguments: [tag])
            return tag
        }
    }
}
