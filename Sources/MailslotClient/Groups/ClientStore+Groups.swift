import Foundation
import GRDB
import MailslotWire

// The client's group tables (migration v10, docs/design/groups.md §7.1). Everything here is
// bytes and rows: the formats (state, change, fold) live in MailslotCrypto, the rules in
// Groups/*. Every function with a `Database` argument runs inside its caller's transaction, so
// that a ratchet's advance, the change it carried and the fold it moved commit together.
extension ClientStore {
    /// A group as this device stores it.
    struct StoredGroup: Sendable {
        /// The group id (unpadded base64url of 16 bytes).
        let id: String
        /// The folded state's JSON (spec/groups.md §1.2).
        var state: [UInt8]
        /// Its hash (BLAKE2b-256 of its canonical bytes).
        var stateHash: [UInt8]
        /// Its version.
        var version: UInt64
        /// The first version this device folds from: 1, or the version of the change that welcomed it.
        var origin: UInt64
        /// The state it was welcomed with (the `base` of that change); nil for origin 1.
        var base: [UInt8]?
        /// Whether this user is in it.
        var status: Status
        /// Who removed this user (for ``Status/removed``).
        var removedBy: String?

        /// Where this user stands in a group.
        enum Status: String, Sendable {
            /// A member of the folded state.
            case member
            /// Removed by an admin's change.
            case removed
            /// Left by its own change.
            case left
        }
    }

    /// One change as stored: its id, version, author and the change object's JSON as received.
    struct StoredChange: Sendable {
        let changeID: [UInt8]
        let version: UInt64
        let author: String
        let json: [UInt8]
        let accepted: Bool
    }

    /// A group message not decided yet (docs/design/groups.md §3.3): opened and stored, waiting for
    /// the change it builds on, or for its turn.
    struct HeldGroupMessage: Sendable {
        let messageID: String
        let groupID: String
        let version: UInt64
        let sender: String
        let body: [UInt8]
        let receivedAt: Double
    }

    /// A copy of a group message due for the relay.
    struct QueuedCopy: Sendable {
        let messageID: String
        let recipient: String
        let groupID: String
        let sealed: Sealed
        let wake: Bool
        let resealed: Bool
    }

    /// One copy of a group message and where it stands.
    struct StoredCopy: Sendable, Equatable {
        let recipient: String
        let state: String
        let lastError: String?
    }

    // MARK: Groups

    func group(_ id: String) async throws -> StoredGroup? {
        try await pool.read { db in try Self.group(id, db) }
    }

    static func group(_ id: String, _ db: Database) throws -> StoredGroup? {
        try Row.fetchOne(db, sql: "SELECT * FROM groups WHERE id = ?", arguments: [id]).map(Self.storedGroup(from:))
    }

    /// Every group this device knows, members' first, by name order left to the caller.
    func groups() async throws -> [StoredGroup] {
        try await pool.read { db in try Row.fetchAll(db, sql: "SELECT * FROM groups ORDER BY id").map(Self.storedGroup(from:)) }
    }

    private static func storedGroup(from row: Row) -> StoredGroup {
        StoredGroup(id: row["id"], state: Array(row["state"] as Data), stateHash: Array(row["state_hash"] as Data),
                    version: UInt64(row["version"] as Int64), origin: UInt64(row["origin"] as Int64),
                    base: (row["base"] as Data?).map { Array($0) }, status: StoredGroup.Status(rawValue: row["status"]) ?? .member,
                    removedBy: row["removed_by"])
    }

    /// Writes `group` (new or folded again) and records the state it reached in `group_states`.
    static func save(_ group: StoredGroup, _ db: Database, now: Double = Date().timeIntervalSince1970) throws {
        try db.execute(sql: """
            INSERT INTO groups (id, state, state_hash, version, origin, base, status, removed_by, updated_at)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (id) DO UPDATE SET state = excluded.state, state_hash = excluded.state_hash, version = excluded.version,
                origin = excluded.origin, base = excluded.base, status = excluded.status, removed_by = excluded.removed_by,
                updated_at = excluded.updated_at
            """, arguments: [group.id, Data(group.state), Data(group.stateHash), Int64(group.version), Int64(group.origin),
                             group.base.map { Data($0) }, group.status.rawValue, group.removedBy, now])
        try recordState(group.id, version: group.version, hash: group.stateHash, db)
    }

    /// Remembers that this device reached the state `hash` at `version` of group `id`.
    static func recordState(_ id: String, version: UInt64, hash: [UInt8], _ db: Database) throws {
        try db.execute(sql: "INSERT OR IGNORE INTO group_states (group_id, version, state_hash) VALUES (?, ?, ?)",
                       arguments: [id, Int64(version), Data(hash)])
    }

    /// Whether this device ever had state `hash` at `version` of group `id`.
    static func hadState(_ id: String, version: UInt64, hash: [UInt8], _ db: Database) throws -> Bool {
        try Bool.fetchOne(db, sql: "SELECT 1 FROM group_states WHERE group_id = ? AND version = ? AND state_hash = ?",
                          arguments: [id, Int64(version), Data(hash)]) ?? false
    }

    // MARK: Changes

    /// Stores a verified change; false when it was stored before (a redelivery, a sync answer
    /// repeating what this device has).
    @discardableResult
    static func insertChange(_ groupID: String, changeID: [UInt8], version: UInt64, author: String, json: [UInt8],
                             _ db: Database, now: Double = Date().timeIntervalSince1970) throws -> Bool {
        try db.execute(sql: """
            INSERT OR IGNORE INTO group_changes (group_id, change_id, version, author, change, accepted, received_at)
            VALUES (?, ?, ?, ?, ?, 0, ?)
            """, arguments: [groupID, Data(changeID), Int64(version), author, Data(json), now])
        return db.changesCount > 0
    }

    /// Group `id`'s stored changes, by version, then as stored.
    static func changes(of groupID: String, _ db: Database) throws -> [StoredChange] {
        try Row.fetchAll(db, sql: "SELECT * FROM group_changes WHERE group_id = ? ORDER BY version, received_at, change_id",
                         arguments: [groupID]).map {
            StoredChange(changeID: Array($0["change_id"] as Data), version: UInt64($0["version"] as Int64), author: $0["author"],
                         json: Array($0["change"] as Data), accepted: $0["accepted"])
        }
    }

    func changes(of groupID: String) async throws -> [StoredChange] {
        try await pool.read { db in try Self.changes(of: groupID, db) }
    }

    /// Marks which of group `id`'s changes the last fold accepted (for the UI), the others not.
    static func markAccepted(_ groupID: String, _ accepted: Set<[UInt8]>, _ db: Database) throws {
        for change in try changes(of: groupID, db) {
            try db.execute(sql: "UPDATE group_changes SET accepted = ? WHERE group_id = ? AND change_id = ?",
                           arguments: [accepted.contains(change.changeID), groupID, Data(change.changeID)])
        }
    }

    // MARK: Held messages

    /// Stores an opened group message to be decided (it is known from now on: a redelivery is
    /// acknowledged, not opened again).
    static func hold(_ message: HeldGroupMessage, _ db: Database) throws {
        try db.execute(sql: """
            INSERT OR IGNORE INTO group_held (message_id, group_id, version, sender, body, received_at) VALUES (?, ?, ?, ?, ?, ?)
            """, arguments: [message.messageID, message.groupID, Int64(message.version), message.sender, Data(message.body), message.receivedAt])
    }

    /// The held messages, oldest first; of one group when `groupID` is given.
    func held(in groupID: String? = nil) async throws -> [HeldGroupMessage] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: """
                SELECT * FROM group_held WHERE ? IS NULL OR group_id = ? ORDER BY received_at, message_id
                """, arguments: [groupID, groupID]).map {
                HeldGroupMessage(messageID: $0["message_id"], groupID: $0["group_id"], version: UInt64($0["version"] as Int64),
                                 sender: $0["sender"], body: Array($0["body"] as Data), receivedAt: $0["received_at"])
            }
        }
    }

    static func unhold(_ messageID: String, _ db: Database) throws {
        try db.execute(sql: "DELETE FROM group_held WHERE message_id = ?", arguments: [messageID])
    }

    /// Held messages over the bounds (docs/design/groups.md §3.3): the oldest beyond
    /// ``maxHeldPerGroup`` in a group and ``maxHeld`` in all, and those older than ``heldLifetime``
    /// (messages of groups this device does not know: ``maxHeldUnknown`` and ``unknownHeldLifetime``).
    /// They are rejected `group_state_unknown` (or `group_unknown`) by the caller.
    static func heldOverBounds(_ db: Database, now: Double) throws -> [(id: String, sender: String, groupID: String, known: Bool)] {
        var over: [(String, String, String, Bool)] = []
        var seen: Set<String> = []
        func add(_ rows: [Row], known: Bool) {
            for row in rows where seen.insert(row["message_id"]).inserted {
                over.append((row["message_id"], row["sender"], row["group_id"], known))
            }
        }
        let knownGroups = "group_id IN (SELECT id FROM groups)"
        add(try Row.fetchAll(db, sql: "SELECT * FROM group_held WHERE \(knownGroups) AND received_at < ?", arguments: [now - heldLifetime]), known: true)
        add(try Row.fetchAll(db, sql: "SELECT * FROM group_held WHERE NOT \(knownGroups) AND received_at < ?",
                             arguments: [now - unknownHeldLifetime]), known: false)
        add(try Row.fetchAll(db, sql: """
            SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY group_id ORDER BY received_at DESC, message_id DESC) AS rank
                           FROM group_held WHERE \(knownGroups)) WHERE rank > ?
            """, arguments: [maxHeldPerGroup]), known: true)
        add(try Row.fetchAll(db, sql: """
            SELECT * FROM (SELECT *, row_number() OVER (ORDER BY received_at DESC, message_id DESC) AS rank
                           FROM group_held WHERE NOT \(knownGroups)) WHERE rank > ?
            """, arguments: [maxHeldUnknown]), known: false)
        // The total bound takes messages of both kinds: each is refused with its own kind's code
        // (spec/groups.md §4.3), `group_unknown` for a group this device never learned.
        for known in [true, false] {
            add(try Row.fetchAll(db, sql: """
                SELECT * FROM (SELECT *, row_number() OVER (ORDER BY received_at DESC, message_id DESC) AS rank FROM group_held)
                WHERE rank > ? AND \(known ? "" : "NOT ")\(knownGroups)
                """, arguments: [maxHeld]), known: known)
        }
        return over
    }

    /// The most held messages of one group (docs/design/groups.md §3.3).
    static let maxHeldPerGroup = 256
    /// The most held messages in all.
    static let maxHeld = 2048
    /// The most held messages of groups this device does not know.
    static let maxHeldUnknown = 64
    /// How long a message waits for the change it builds on: the relay's default message lifetime.
    static let heldLifetime: Double = 7 * 86_400
    /// How long a message of a group this device does not know waits for its welcome.
    static let unknownHeldLifetime: Double = 86_400

    /// Rejects held message `id` with `reason`, in the caller's transaction.
    static func rejectHeld(_ id: String, author: String, groupID: String, reason: String, _ db: Database,
                           now: Double = Date().timeIntervalSince1970) throws {
        try unhold(id, db)
        try db.execute(sql: "INSERT OR IGNORE INTO rejected (id, author, reason, received_at, group_id) VALUES (?, ?, ?, ?, ?)",
                       arguments: [id, author, reason, now, groupID])
    }

    // MARK: Copies

    /// Stores a group send: the `sent` row (recipient '', its state summarising the copies) and one
    /// copy per recipient, sealed (queued) or held (nil: the member's identity key changed). A
    /// file sent to a group has its `sent` row already (state `uploading`): it becomes the send's.
    static func enqueueGroupSend(id: String, groupID: String, message: ChatMessage, body: [UInt8],
                                 copies: [(recipient: String, sealed: Sealed?)], wake: Bool?, _ db: Database,
                                 now: Double = Date().timeIntervalSince1970) throws {
        try db.execute(sql: """
            INSERT INTO sent (id, recipient, type, body, envelope, key_id, state, created_at, wake, group_id) VALUES (?, '', ?, ?, NULL, NULL, 'queued', ?, ?, ?)
            ON CONFLICT (id) DO UPDATE SET type = excluded.type, body = excluded.body, state = 'queued', last_error = NULL,
                wake = excluded.wake, group_id = excluded.group_id
            """, arguments: [id, message.type.rawValue, Data(body), now, wake, groupID])
        for copy in copies {
            try db.execute(sql: "INSERT INTO group_copies (message_id, recipient, envelope, key_id, state) VALUES (?, ?, ?, ?, ?)",
                           arguments: [id, copy.recipient, copy.sealed.map { Data($0.envelope) }, copy.sealed?.keyID,
                                       copy.sealed == nil ? "held" : "queued"])
        }
        try summarise(id, db)
    }

    /// Keeps a group send's `sent.state` the summary of its copies: queued while any is queued,
    /// else held while any is held, else sent (refused when every copy was refused or dropped).
    static func summarise(_ messageID: String, _ db: Database) throws {
        let states = try String.fetchAll(db, sql: "SELECT state FROM group_copies WHERE message_id = ?", arguments: [messageID])
        let summary: String
        if states.contains("queued") { summary = "queued" } else if states.contains("held") { summary = "held" } else if states.contains("sent") || states.contains("undelivered") {
            summary = "sent"
        } else if states.isEmpty { summary = "sent" } else { summary = "refused" }
        try db.execute(sql: "UPDATE sent SET state = ? WHERE id = ? AND group_id IS NOT NULL", arguments: [summary, messageID])
    }

    /// Copies due at `now`, oldest message first.
    func dueCopies(now: Double) async throws -> [QueuedCopy] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: """
                SELECT c.message_id, c.recipient, c.envelope, c.key_id, c.resealed, s.group_id, s.type, s.wake
                FROM group_copies c JOIN sent s ON s.id = c.message_id
                WHERE c.state = 'queued' AND c.next_attempt_at <= ? ORDER BY c.message_id, c.recipient
                """, arguments: [now]).map(Self.queuedCopy(from:))
        }
    }

    /// The queued copies of one group message.
    func queuedCopies(of messageID: String) async throws -> [QueuedCopy] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: """
                SELECT c.message_id, c.recipient, c.envelope, c.key_id, c.resealed, s.group_id, s.type, s.wake
                FROM group_copies c JOIN sent s ON s.id = c.message_id
                WHERE c.message_id = ? AND c.state = 'queued' ORDER BY c.recipient
                """, arguments: [messageID]).map(Self.queuedCopy(from:))
        }
    }

    private static func queuedCopy(from row: Row) -> QueuedCopy {
        let explicit: Bool? = row["wake"]
        return QueuedCopy(messageID: row["message_id"], recipient: row["recipient"], groupID: row["group_id"],
                          sealed: Sealed(envelope: Array((row["envelope"] as Data?) ?? Data()), keyID: row["key_id"]),
                          wake: explicit ?? MessageType(rawValue: row["type"]).wakes, resealed: row["resealed"])
    }

    /// Where each copy of group message `messageID` stands, by recipient.
    func copies(of messageID: String) async throws -> [StoredCopy] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT recipient, state, last_error FROM group_copies WHERE message_id = ? ORDER BY recipient",
                             arguments: [messageID]).map { StoredCopy(recipient: $0["recipient"], state: $0["state"], lastError: $0["last_error"]) }
        }
    }

    /// Sets one copy's state (sent, refused, held): its envelope goes unless it stays queued.
    func markCopy(_ messageID: String, recipient: String, state: String, error: String? = nil) async throws {
        try await pool.write { db in
            try db.execute(sql: """
                UPDATE group_copies SET state = ?, envelope = CASE WHEN ? = 'queued' THEN envelope END,
                    key_id = CASE WHEN ? = 'queued' THEN key_id END, last_error = ? WHERE message_id = ? AND recipient = ?
                """, arguments: [state, state, state, error, messageID, recipient])
            try Self.summarise(messageID, db)
        }
    }

    /// A copy sealed again (to the member's current keys), to be tried now.
    func requeueCopy(_ messageID: String, recipient: String, sealed: Sealed) async throws {
        try await pool.write { db in
            try db.execute(sql: """
                UPDATE group_copies SET state = 'queued', envelope = ?, key_id = ?, resealed = 1, next_attempt_at = 0, last_error = NULL
                WHERE message_id = ? AND recipient = ?
                """, arguments: [Data(sealed.envelope), sealed.keyID, messageID, recipient])
            try Self.summarise(messageID, db)
        }
    }

    /// Records a failed try of one copy and when to try again (the outbox's backoff).
    func copyFailed(_ messageID: String, recipient: String, error: String, now: Double) async throws {
        try await pool.write { db in
            let attempts = (try Int.fetchOne(db, sql: "SELECT attempts FROM group_copies WHERE message_id = ? AND recipient = ?",
                                             arguments: [messageID, recipient]) ?? 0) + 1
            let delay = min(300, pow(2, Double(min(attempts, 9))))
            try db.execute(sql: "UPDATE group_copies SET attempts = ?, next_attempt_at = ?, last_error = ? WHERE message_id = ? AND recipient = ?",
                           arguments: [attempts, now + delay, error, messageID, recipient])
        }
    }

    /// Held copies to `recipient`, oldest first: sealed and sent once the user trusts its new key.
    func heldCopies(to recipient: String) async throws -> [(messageID: String, groupID: String, body: [UInt8])] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: """
                SELECT c.message_id, s.group_id, s.body FROM group_copies c JOIN sent s ON s.id = c.message_id
                WHERE c.recipient = ? AND c.state = 'held' ORDER BY c.message_id
                """, arguments: [recipient]).map { ($0["message_id"], $0["group_id"], Array($0["body"] as Data)) }
        }
    }

    /// Removal holds (docs/design/groups.md §3.2 step 6, §3.5): every queued or held copy of group
    /// `groupID`'s messages to someone not in `members` is dropped, its envelope erased. Returns
    /// how many were. Not the copies of changes and sync messages: a removed member must learn
    /// of its removal, and a leaving member's leave must reach the others.
    @discardableResult
    static func dropCopies(in groupID: String, notIn members: [String], _ db: Database) throws -> Int {
        let ids = try String.fetchAll(db, sql: """
            SELECT DISTINCT c.message_id FROM group_copies c JOIN sent s ON s.id = c.message_id
            WHERE s.group_id = ? AND c.state IN ('queued', 'held') AND s.type NOT IN ('group_change', 'group_sync', 'group_history')
            """, arguments: [groupID])
        guard !ids.isEmpty else { return 0 }
        let keep = Set(members)
        var dropped = 0
        for id in ids {
            for recipient in try String.fetchAll(db, sql: "SELECT recipient FROM group_copies WHERE message_id = ? AND state IN ('queued', 'held')",
                                                 arguments: [id]) where !keep.contains(recipient) {
                try db.execute(sql: """
                    UPDATE group_copies SET state = 'dropped', envelope = NULL, key_id = NULL, last_error = 'not_a_member'
                    WHERE message_id = ? AND recipient = ?
                    """, arguments: [id, recipient])
                dropped += 1
            }
            try summarise(id, db)
        }
        return dropped
    }

    // MARK: Asks and answers

    /// Records an ask of `peer` about group `groupID` unless one was made within ``askInterval``;
    /// returns whether this one may go.
    func mayAsk(_ groupID: String, peer: String, now: Double = Date().timeIntervalSince1970) async throws -> Bool {
        try await pool.write { db in
            if let last = try Double.fetchOne(db, sql: "SELECT asked_at FROM group_asks WHERE group_id = ? AND peer = ?", arguments: [groupID, peer]),
               now - last < Self.askInterval { return false }
            try db.execute(sql: """
                INSERT INTO group_asks (group_id, peer, asked_at) VALUES (?, ?, ?)
                ON CONFLICT (group_id, peer) DO UPDATE SET asked_at = excluded.asked_at
                """, arguments: [groupID, peer, now])
            return true
        }
    }

    /// Records an answer to `peer` about group `groupID` unless one went within `interval`;
    /// returns whether this one may go.
    func mayAnswer(_ groupID: String, peer: String, interval: Double, now: Double = Date().timeIntervalSince1970) async throws -> Bool {
        try await pool.write { db in
            if let last = try Double.fetchOne(db, sql: "SELECT answered_at FROM group_asks WHERE group_id = ? AND peer = ?", arguments: [groupID, peer]),
               now - last < interval { return false }
            try db.execute(sql: """
                INSERT INTO group_asks (group_id, peer, asked_at, answered_at) VALUES (?, ?, 0, ?)
                ON CONFLICT (group_id, peer) DO UPDATE SET answered_at = excluded.answered_at
                """, arguments: [groupID, peer, now])
            return true
        }
    }

    /// At most one ask per (group, peer) in this many seconds (docs/design/groups.md §3.3).
    static let askInterval: Double = 60
}
