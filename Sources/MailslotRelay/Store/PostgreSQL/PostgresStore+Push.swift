import Foundation
import Logging
import MailslotWire
import PostgresNIO

// Push registrations and pending wake-ups on PostgreSQL (``PushRecords``; docs/design/wakeups.md
// §1.4–§2.4; tables and functions: ``PostgresSchema`` migration 6). Several relays share them:
// a uid's registrations are counted under an advisory lock, and a claim locks its rows with
// SKIP LOCKED and deletes them in its transaction, so two relays never take one wake-up.

// The conformance comes with RelayStore's (which refines PushRecords).
extension PostgresStore {
    private static let registrationColumns = "uid, id, provider, target, route, tag, version, created_at, updated_at, woken_at, failures"

    private static func registration(_ row: PostgresRow) throws -> PushRegistrationRow {
        let (uid, id, code, target, route, tag, version, createdAt, updatedAt, wokenAt, failures) =
            try row.decode((String, String, Int16, String, String, String, Int64, Int64, Int64, Int64, Int32).self)
        guard let provider = PushProviderKind(storeCode: Int(code)) else {
            throw PostgresSchema.Refusal(description: "a push registration of unknown provider \(code)")
        }
        return PushRegistrationRow(uid: uid, id: id, provider: provider, target: target, route: route, tag: tag, version: version,
                                   createdAt: createdAt, updatedAt: updatedAt, wokenAt: wokenAt, failures: Int(failures))
    }

    /// Deletes the registrations written by sign-in `family` and their pending wake-ups, inside
    /// the transaction that revokes the family.
    static func deleteRegistrations(_ connection: PostgresConnection, _ logger: Logger, family: Data) async throws {
        try await connection.query("""
            WITH gone AS (DELETE FROM push_registrations WHERE family = \(family) RETURNING uid, id)
            DELETE FROM push_wakeups w USING gone WHERE w.uid = gone.uid AND w.id = gone.id
            """, logger: logger)
    }

    func putRegistration(_ registration: NewPushRegistration, family: Data, max: Int, now: Int64) async throws -> PushPutOutcome {
        try await write("put_push_registration") { connection, logger in
            // The uid's registrations are counted one writer at a time, on every node.
            try await Self.lock(connection, logger, space: .pushRegistrations, key: registration.uid)
            let code = Int16(registration.provider.storeCode)
            // A replacement starts its failure count again and keeps woken_at: coalescing goes on.
            if let row = try await Self.first(connection, """
                UPDATE push_registrations SET family = \(family), provider = \(code), target = \(registration.target),
                    route = \(registration.route), tag = \(registration.tag), version = version + 1, updated_at = \(now), failures = 0
                WHERE uid = \(registration.uid) AND id = \(registration.id) RETURNING \(unescaped: Self.registrationColumns)
                """, logger) {
                // A pending wake-up goes out through the new body's provider and route.
                try await connection.query("""
                    UPDATE push_wakeups SET provider = \(code), route = \(registration.route)
                    WHERE uid = \(registration.uid) AND id = \(registration.id)
                    """, logger: logger)
                return .replaced(try Self.registration(row))
            }
            let count = try await Self.first(connection, "SELECT count(*) FROM push_registrations WHERE uid = \(registration.uid)", logger)?
                .decode(Int64.self) ?? 0
            guard count < Int64(max) else { return .tooMany }
            guard let row = try await Self.first(connection, """
                INSERT INTO push_registrations (uid, id, family, provider, target, route, tag, version, created_at, updated_at)
                VALUES (\(registration.uid), \(registration.id), \(family), \(code), \(registration.target), \(registration.route),
                        \(registration.tag), 1, \(now), \(now))
                RETURNING \(unescaped: Self.registrationColumns)
                """, logger) else { throw PostgresSchema.Refusal(description: "a push registration insert returned no row") }
            return .created(try Self.registration(row))
        }
    }

    func registrations(uid: String) async throws -> [PushRegistrationRow] {
        try await read("push_registrations") { connection, logger in
            let rows = try await connection.query("""
                SELECT \(unescaped: Self.registrationColumns) FROM push_registrations WHERE uid = \(uid) ORDER BY id
                """, logger: logger)
            var registrations: [PushRegistrationRow] = []
            for try await row in rows { registrations.append(try Self.registration(row)) }
            return registrations
        }
    }

    func registration(uid: String, id: String) async throws -> PushRegistrationRow? {
        try await read("push_registration") { connection, logger in
            try await Self.first(connection, """
                SELECT \(unescaped: Self.registrationColumns) FROM push_registrations WHERE uid = \(uid) AND id = \(id)
                """, logger).map(Self.registration)
        }
    }

    func deleteRegistration(uid: String, id: String) async throws -> Bool {
        try await write("delete_push_registration") { connection, logger in
            try await Self.removeRegistration(connection, logger, uid: uid, id: id, version: nil)
        }
    }

    /// Deletes registration `id` of `uid` (only at `version`, when given) and its pending
    /// wake-up; whether it was there.
    private static func removeRegistration(_ connection: PostgresConnection, _ logger: Logger, uid: String, id: String,
                                           version: Int64?) async throws -> Bool {
        let removed = try await first(connection, """
            WITH gone AS (DELETE FROM push_registrations WHERE uid = \(uid) AND id = \(id) AND (\(version)::BIGINT IS NULL OR version = \(version))
                          RETURNING uid, id),
                 wakeup AS (DELETE FROM push_wakeups w USING gone WHERE w.uid = gone.uid AND w.id = gone.id)
            SELECT count(*) FROM gone
            """, logger)?.decode(Int64.self) ?? 0
        return removed > 0
    }

    func claimWakeups(now: Int64, limit: Int, excludedRoutes: [String], excludedProviders: [PushProviderKind],
                      interval: Int64, presence: Int64,
                      isLiveHere: @escaping @Sendable (String) -> Bool) async throws -> WakeupClaim {
        guard limit > 0 else { return WakeupClaim() }
        let providers = excludedProviders.map { Int16($0.storeCode) }
        let claimed = try await write("claim_wakeups") { connection, logger -> WakeupClaim in
            let rows = try await connection.query("""
                SELECT * FROM mailslot_claim_wakeups(\(now), \(Int32(clamping: limit)), \(excludedRoutes)::TEXT[],
                                                              \(providers)::SMALLINT[], \(interval), \(presence))
                """, logger: logger)
            var claim = WakeupClaim()
            var wakeups: [ClaimedWakeup] = []
            for try await (skip, uid, id, code, target, route, tag, version, firstSeq, attempt, event)
                in rows.decode((String?, String, String, Int16, String?, String, String?, Int64?, Int64, Int32, String?).self) {
                switch skip {
                case "received"?: claim.received += 1; continue
                case "connected"?: claim.postponed += 1; continue
                default: break
                }
                guard let provider = PushProviderKind(storeCode: Int(code)), let target, let tag, let version else { continue }
                wakeups.append(ClaimedWakeup(uid: uid, registrationID: id, provider: provider, target: target, route: route, tag: tag,
                                             version: version, firstSeq: firstSeq, attempt: Int(attempt), event: event))
            }
            // This node's own subscriptions are in live_subscriptions too (``PostgresNotifications``
            // sets their node), so the function postponed them already; one that began after its
            // announcement reached the table is caught here and put back as the function would
            // (its registration's woken_at already moved: the next wake-up of it waits an
            // interval, as the postponed one does anyway).
            for wakeup in wakeups {
                guard isLiveHere(wakeup.uid) else {
                    claim.wakeups.append(wakeup)
                    continue
                }
                claim.postponed += 1
                try await connection.query("""
                    INSERT INTO push_wakeups AS p (uid, id, provider, route, first_seq, due_at, attempt, event)
                    VALUES (\(wakeup.uid), \(wakeup.registrationID), \(Int16(wakeup.provider.storeCode)), \(wakeup.route), \(wakeup.firstSeq),
                            \(now + interval), \(Int32(clamping: wakeup.attempt)), \(wakeup.event))
                    ON CONFLICT (uid, id) DO UPDATE SET first_seq = least(p.first_seq, excluded.first_seq)
                    """, logger: logger)
            }
            // What is left due now (excluded routes and providers included), for the gauge.
            let due = try await connection.query("SELECT count(*) FROM push_wakeups WHERE due_at <= \(now)", logger: logger)
            for try await count in due.decode(Int64.self) { claim.due = Int(count) }
            return claim
        }
        return claimed
    }

    func requeueWakeup(_ wakeup: ClaimedWakeup, event: String, dueAt: Int64) async throws {
        try await write("requeue_wakeup") { connection, logger in
            // Through the registration as it is now (none: nothing to requeue); a row a newer
            // message made meanwhile merges with this one: the earlier due time and message, the
            // higher attempt, this wake-up's event id.
            _ = try await connection.query("""
                INSERT INTO push_wakeups AS p (uid, id, provider, route, first_seq, due_at, attempt, event)
                SELECT r.uid, r.id, r.provider, r.route, \(wakeup.firstSeq), \(dueAt), \(Int32(clamping: wakeup.attempt + 1)), \(event)
                FROM push_registrations r WHERE r.uid = \(wakeup.uid) AND r.id = \(wakeup.registrationID)
                ON CONFLICT (uid, id) DO UPDATE SET due_at = least(p.due_at, excluded.due_at), first_seq = least(p.first_seq, excluded.first_seq),
                    attempt = greatest(p.attempt, excluded.attempt), event = excluded.event
                """, logger: logger)
        }
    }

    func recordWakeOutcome(uid: String, id: String, version: Int64, _ verdict: RegistrationVerdict) async throws -> Bool {
        try await write("record_wake_outcome") { connection, logger in
            switch verdict {
            case .ok:
                try await connection.query("""
                    UPDATE push_registrations SET failures = 0 WHERE uid = \(uid) AND id = \(id) AND version = \(version) AND failures <> 0
                    """, logger: logger)
                return false
            case .blamed:
                let failures = try await Self.first(connection, """
                    UPDATE push_registrations SET failures = failures + 1 WHERE uid = \(uid) AND id = \(id) AND version = \(version)
                    RETURNING failures
                    """, logger)?.decode(Int32.self)
                guard let failures, failures >= PushRegistrationRow.failuresRemoved else { return false }
                return try await Self.removeRegistration(connection, logger, uid: uid, id: id, version: version)
            case .dead:
                return try await Self.removeRegistration(connection, logger, uid: uid, id: id, version: version)
            }
        }
    }

    func sweepPushRegistrations(now: Int64, batch: Int) async throws -> Int {
        try await write("sweep_push_registrations") { connection, logger in
            // A family is live while any of its sessions is unexpired (its newest refresh token
            // expires last); revoked families have no rows left at all.
            try await Self.first(connection, """
                WITH gone AS (DELETE FROM push_registrations WHERE (uid, id) IN (
                                  SELECT r.uid, r.id FROM push_registrations r
                                  WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.family = r.family AND s.expires_at > \(now))
                                  LIMIT \(Int64(batch)) FOR UPDATE SKIP LOCKED)
                              RETURNING uid, id),
                     wakeups AS (DELETE FROM push_wakeups w USING gone WHERE w.uid = gone.uid AND w.id = gone.id)
                SELECT count(*) FROM gone
                """, logger).map { Int(try $0.decode(Int64.self)) } ?? 0
        }
    }

    func nextWakeupDue() async throws -> Int64? {
        try await read("next_wakeup_due") { connection, logger in
            try await Self.first(connection, "SELECT min(due_at) FROM push_wakeups", logger)?.decode(Int64?.self) ?? nil
        }
    }

    /// Records that `node` is alive now: its subscriptions count as live for the claims of every
    /// node (design §2.3).
    func heartbeat(node: String, now: Int64) async throws {
        try await write("relay_heartbeat") { connection, logger in
            try await Self.heartbeat(connection, logger, node: node, now: now)
        }
    }

    /// The heartbeat's statement, on `connection`.
    static func heartbeat(_ connection: PostgresConnection, _ logger: Logger, node: String, now: Int64) async throws {
        _ = try await connection.query("""
            INSERT INTO relay_nodes (node, seen_at) VALUES (\(node), \(now))
            ON CONFLICT (node) DO UPDATE SET seen_at = greatest(relay_nodes.seen_at, excluded.seen_at)
            """, logger: logger)
    }
}
