import Foundation
import GRDB
import MailslotWire

// Push registrations and pending wake-ups on SQLite (``PushRecords``; docs/design/wakeups.md
// §1.4–§2.4). Every call is one write transaction through the store's single writer, so a claim
// serialises with message commits and two claims never take one row.

// The conformance comes with RelayStore's (which refines PushRecords).
extension SQLiteStore {
    /// The statement a waking create runs after its insert (design §2.2): one row per
    /// registration of the recipient, due at once unless the registration was woken less than an
    /// interval ago; a registration with a pending row keeps it (the older message's).
    private static let queueWakeupsSQL = """
        INSERT INTO push_wakeups (uid, id, provider, route, first_seq, due_at, attempt)
        SELECT r.uid, r.id, r.provider, r.route, ?, max(?, r.woken_at + ?), 0
        FROM push_registrations r WHERE r.uid = ?
        ON CONFLICT (uid, id) DO NOTHING
        """

    /// Inserts the wake-up rows of message `seq` created in `recipient`'s mailbox, inside the
    /// create's transaction. Cannot fail a message for any reason of its own: no foreign key, no
    /// constraint but the primary key its `ON CONFLICT` handles.
    static func queueWakeups(_ db: Database, recipient: String, seq: Int64, now: Int64, interval: Int64) throws {
        try db.cachedStatement(sql: queueWakeupsSQL).run(.integer(seq), .integer(now), .integer(interval), .text(recipient))
    }

    /// Deletes the registrations written by sign-in `family` and their pending wake-ups, inside
    /// the transaction that revokes the family.
    static func deleteRegistrations(_ db: Database, family: Data) throws {
        try db.cachedStatement(sql: """
            DELETE FROM push_wakeups WHERE (uid, id) IN (SELECT uid, id FROM push_registrations WHERE family = ?)
            """).execute(arguments: [family])
        try db.cachedStatement(sql: "DELETE FROM push_registrations WHERE family = ?").execute(arguments: [family])
    }

    private static let registrationColumns = "uid, id, provider, target, route, tag, version, created_at, updated_at, woken_at, failures"

    private static func registration(_ row: Row) throws -> PushRegistrationRow {
        let code: Int = row["provider"]
        guard let provider = PushProviderKind(storeCode: code) else {
            // The schema's CHECK admits only known codes; a row that still has another is not ours to read.
            throw DatabaseError(resultCode: .SQLITE_CORRUPT, message: "push registration of unknown provider \(code)")
        }
        return PushRegistrationRow(uid: row["uid"], id: row["id"], provider: provider, target: row["target"], route: row["route"],
                                   tag: row["tag"], version: row["version"], createdAt: row["created_at"],
                                   updatedAt: row["updated_at"], wokenAt: row["woken_at"], failures: row["failures"])
    }

    func putRegistration(_ registration: NewPushRegistration, family: Data, max: Int, now: Int64) async throws -> PushPutOutcome {
        let outcome = try await write("put_push_registration") { db -> PushPutOutcome in
            let exists = try Bool.fetchOne(db.cachedStatement(sql: "SELECT 1 FROM push_registrations WHERE uid = ? AND id = ?"),
                                           arguments: [registration.uid, registration.id]) ?? false
            if exists {
                // A replacement starts its failure count again and keeps woken_at: coalescing goes on.
                let row = try Row.fetchOne(db.cachedStatement(sql: """
                    UPDATE push_registrations SET family = ?, provider = ?, target = ?, route = ?, tag = ?, version = version + 1,
                        updated_at = ?, failures = 0
                    WHERE uid = ? AND id = ? RETURNING \(Self.registrationColumns)
                    """), arguments: [family, registration.provider.storeCode, registration.target, registration.route, registration.tag,
                                      now, registration.uid, registration.id])
                // A pending wake-up goes out through the new body's provider and route.
                try db.cachedStatement(sql: "UPDATE push_wakeups SET provider = ?, route = ? WHERE uid = ? AND id = ?")
                    .execute(arguments: [registration.provider.storeCode, registration.route, registration.uid, registration.id])
                return .replaced(try Self.registration(row!))
            }
            let count = try Int.fetchOne(db.cachedStatement(sql: "SELECT count(*) FROM push_registrations WHERE uid = ?"),
                                         arguments: [registration.uid]) ?? 0
            guard count < max else { return .tooMany }
            let row = try Row.fetchOne(db.cachedStatement(sql: """
                INSERT INTO push_registrations (uid, id, family, provider, target, route, tag, version, created_at, updated_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?) RETURNING \(Self.registrationColumns)
                """), arguments: [registration.uid, registration.id, family, registration.provider.storeCode, registration.target,
                                  registration.route, registration.tag, now, now])
            // Before the commit: a create committed after this one must see the uid.
            self.wakeUIDs.withLock { _ = $0.insert(registration.uid) }
            return .created(try Self.registration(row!))
        }
        return outcome
    }

    func registrations(uid: String) async throws -> [PushRegistrationRow] {
        try await read("push_registrations") { db in
            try Row.fetchAll(db.cachedStatement(sql: "SELECT \(Self.registrationColumns) FROM push_registrations WHERE uid = ? ORDER BY id"),
                             arguments: [uid]).map(Self.registration)
        }
    }

    func registration(uid: String, id: String) async throws -> PushRegistrationRow? {
        try await read("push_registration") { db in
            try Row.fetchOne(db.cachedStatement(sql: "SELECT \(Self.registrationColumns) FROM push_registrations WHERE uid = ? AND id = ?"),
                             arguments: [uid, id]).map(Self.registration)
        }
    }

    func deleteRegistration(uid: String, id: String) async throws -> Bool {
        try await write("delete_push_registration") { db in
            try Self.removeRegistration(db, uid: uid, id: id, version: nil)
        }
    }

    /// Deletes registration `id` of `uid` (only at `version`, when given) and its pending
    /// wake-up; whether it was there.
    private static func removeRegistration(_ db: Database, uid: String, id: String, version: Int64?) throws -> Bool {
        let version: DatabaseValueConvertible? = version
        try db.cachedStatement(sql: "DELETE FROM push_registrations WHERE uid = ? AND id = ? AND (? IS NULL OR version = ?)")
            .execute(arguments: [uid, id, version, version])
        guard db.changesCount > 0 else { return false }
        try db.cachedStatement(sql: "DELETE FROM push_wakeups WHERE uid = ? AND id = ?").execute(arguments: [uid, id])
        return true
    }

    func claimWakeups(now: Int64, limit: Int, excludedRoutes: [String], excludedProviders: [PushProviderKind],
                      interval: Int64, presence: Int64,
                      isLiveHere: @escaping @Sendable (String) -> Bool) async throws -> WakeupClaim {
        guard limit > 0 else { return WakeupClaim() }
        let claimed = try await write("claim_wakeups") { db -> WakeupClaim in
            // The exclusions vary in length: this statement is compiled per call (a claim is rare
            // beside creates), with one placeholder per excluded route and provider.
            let routes = excludedRoutes.isEmpty ? "" : " AND route NOT IN (\(Array(repeating: "?", count: excludedRoutes.count).joined(separator: ", ")))"
            let providers = excludedProviders.isEmpty ? "" : " AND provider NOT IN (\(Array(repeating: "?", count: excludedProviders.count).joined(separator: ", ")))"
            var arguments: StatementArguments = [now]
            arguments += StatementArguments(excludedRoutes)
            arguments += StatementArguments(excludedProviders.map(\.storeCode))
            arguments += [limit]
            // Out of the table before anything is sent: at most once (design §2.4).
            let taken = try Row.fetchAll(db, sql: """
                DELETE FROM push_wakeups WHERE (uid, id) IN (
                    SELECT uid, id FROM push_wakeups INDEXED BY push_wakeups_by_due WHERE due_at <= ?\(routes)\(providers) ORDER BY due_at LIMIT ?)
                RETURNING uid, id, provider, route, first_seq, due_at, attempt, event
                """, arguments: arguments)
            let pending = try db.cachedStatement(sql: "SELECT 1 FROM messages WHERE recipient = ? AND seq >= ? AND expires_at > ? LIMIT 1")
            let postpone = try db.cachedStatement(sql: """
                INSERT INTO push_wakeups (uid, id, provider, route, first_seq, due_at, attempt, event) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                """)
            let woken = try db.cachedStatement(sql: """
                UPDATE push_registrations SET woken_at = ? WHERE uid = ? AND id = ? RETURNING provider, target, route, tag, version
                """)
            var claim = WakeupClaim()
            for row in taken {
                let uid: String = row["uid"], id: String = row["id"], firstSeq: Int64 = row["first_seq"]
                // The owner received everything since (any way, any device): nothing to wake for.
                guard try Bool.fetchOne(pending, arguments: [uid, firstSeq, now]) ?? false else {
                    claim.received += 1
                    continue
                }
                if isLiveHere(uid) {
                    // Connected: the message is being delivered. Looked at again after an interval
                    // (by then, most likely, received and dropped).
                    try postpone.execute(arguments: [uid, id, row["provider"] as Int, row["route"] as String, firstSeq, now + interval,
                                                     row["attempt"] as Int, row["event"] as String?])
                    claim.postponed += 1
                    continue
                }
                // Joined with the registration as it is now; a row whose registration went is dropped.
                guard let registration = try Row.fetchOne(woken, arguments: [now, uid, id]),
                      let provider = PushProviderKind(storeCode: registration["provider"]) else { continue }
                claim.wakeups.append(ClaimedWakeup(uid: uid, registrationID: id, provider: provider, target: registration["target"],
                                                   route: registration["route"], tag: registration["tag"], version: registration["version"],
                                                   firstSeq: firstSeq, attempt: row["attempt"], event: row["event"]))
            }
            // An index range count: what is left due now (excluded routes and providers included).
            claim.due = try Int.fetchOne(db.cachedStatement(sql: "SELECT count(*) FROM push_wakeups INDEXED BY push_wakeups_by_due WHERE due_at <= ?"),
                                         arguments: [now]) ?? 0
            return claim
        }
        return claimed
    }

    func requeueWakeup(_ wakeup: ClaimedWakeup, event: String, dueAt: Int64) async throws {
        try await write("requeue_wakeup") { db in
            // Through the registration as it is now (none: nothing to requeue); a row a newer
            // message made meanwhile merges with this one: the earlier due time and message, the
            // higher attempt, this wake-up's event id.
            try db.cachedStatement(sql: """
                INSERT INTO push_wakeups (uid, id, provider, route, first_seq, due_at, attempt, event)
                SELECT r.uid, r.id, r.provider, r.route, ?, ?, ?, ? FROM push_registrations r WHERE r.uid = ? AND r.id = ?
                ON CONFLICT (uid, id) DO UPDATE SET due_at = min(due_at, excluded.due_at), first_seq = min(first_seq, excluded.first_seq),
                    attempt = max(attempt, excluded.attempt), event = excluded.event
                """).execute(arguments: [wakeup.firstSeq, dueAt, wakeup.attempt + 1, event, wakeup.uid, wakeup.registrationID])
        }
    }

    func recordWakeOutcome(uid: String, id: String, version: Int64, _ verdict: RegistrationVerdict) async throws -> Bool {
        try await write("record_wake_outcome") { db in
            switch verdict {
            case .ok:
                try db.cachedStatement(sql: "UPDATE push_registrations SET failures = 0 WHERE uid = ? AND id = ? AND version = ?")
                    .execute(arguments: [uid, id, version])
                return false
            case .blamed:
                let failures = try Int.fetchOne(db.cachedStatement(sql: """
                    UPDATE push_registrations SET failures = failures + 1 WHERE uid = ? AND id = ? AND version = ? RETURNING failures
                    """), arguments: [uid, id, version])
                guard let failures, failures >= PushRegistrationRow.failuresRemoved else { return false }
                return try Self.removeRegistration(db, uid: uid, id: id, version: version)
            case .dead:
                return try Self.removeRegistration(db, uid: uid, id: id, version: version)
            }
        }
    }

    func sweepPushRegistrations(now: Int64, batch: Int) async throws -> Int {
        try await write("sweep_push_registrations") { db in
            // A family is live while any of its sessions is unexpired (its newest refresh token
            // expires last); revoked families have no rows left at all.
            let gone = try Row.fetchAll(db.cachedStatement(sql: """
                DELETE FROM push_registrations WHERE (uid, id) IN (
                    SELECT r.uid, r.id FROM push_registrations r
                    WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.family = r.family AND s.expires_at > ?) LIMIT ?)
                RETURNING uid, id
                """), arguments: [now, batch])
            let wakeup = try db.cachedStatement(sql: "DELETE FROM push_wakeups WHERE uid = ? AND id = ?")
            for row in gone { try wakeup.execute(arguments: [row[0] as String, row[1] as String]) }
            return gone.count
        }
    }

    func nextWakeupDue() async throws -> Int64? {
        try await read("next_wakeup_due") { db in
            try Int64.fetchOne(db.cachedStatement(sql: "SELECT min(due_at) FROM push_wakeups"))
        }
    }

    /// One process owns an SQLite store: no other relay to tell that this one is alive.
    func heartbeat(node: String, now: Int64) async throws {}
}
