import Foundation
import GRDB
import MailslotWire

/// One thing that happened to a group, as an app shows it: "alice added dave", "carol removed
/// you", "bob renamed the group to Trip" (docs/design/groups.md §7.2).
///
/// Events come from the group's signed changes (spec/groups.md §1.3). One change may make several
/// events (a last admin leaving names a successor: ``Kind/left`` and ``Kind/promoted(_:)``), all
/// with the change's author, version and time. An app gets them two ways:
/// - as they arrive, on the change's message: ``ReceivedMessage/events`` of a message of type
///   `group_change`, yielded by ``MailslotClient/receive()`` and
///   ``MailslotClient/messages(onState:)`` like any message (handled at least once, kept in
///   ``MailslotClient/history(from:)``);
/// - as the group's whole history: ``MailslotClient/changes(of:)``, which also holds the changes
///   this device made and those it learnt from another member's sync answer.
///
/// Whether the change took effect is ``standing``: the fold (spec/groups.md §3) may find a change
/// void (its author was removed or demoted by a senior at the same version), and a change may
/// arrive after later ones (late: it applies at its version, and the group is folded again).
public struct GroupEvent: Sendable, Equatable {
    /// What happened.
    public enum Kind: Sendable, Equatable {
        /// The author created the group, named `name`, with `members` (the author among them).
        case created(name: String, members: [String])
        /// The author added these members.
        case added([String])
        /// The author removed these members (this user is never among them: see ``removedMe``).
        case removed([String])
        /// The author made these members admins.
        case promoted([String])
        /// The author made these admins plain members again.
        case demoted([String])
        /// The author renamed the group (a label chosen by an admin: show it sanitised).
        case renamed(to: String)
        /// The author left the group.
        case left
        /// The author removed this user from the group.
        case removedMe
    }

    /// Whether the change took effect, as this device folds the group now.
    public enum Standing: Sendable, Equatable {
        /// Applied, in the order it came.
        case applied
        /// Applied at its version, but it came after a change of that version or later this
        /// device already had: the group was folded again (show it as late, not as news).
        case late
        /// Void: the fold did not apply it (its author was no longer an admin at its version,
        /// or a senior admin's change at the same version overrode it). Nothing changed.
        case void
        /// Not folded yet: a change before it has not reached this device (it asks for it).
        case waiting
    }

    /// What happened.
    public let kind: Kind
    /// Who did it (the change's signed author).
    public let author: String
    /// The group, with its name as this device knows it now and the change's version.
    public let group: GroupContext
    /// The version the change made (1 for the creation).
    public let version: UInt64
    /// When this device stored the change (its own clock).
    public let time: Date
    /// Whether it took effect.
    public let standing: Standing
}

extension GroupEvent {
    /// The events of one change of `group`, for this user `me`, with `standing` and `time`.
    static func events(of change: GroupChange, group: GroupContext, me: String, standing: Standing, time: Date) -> [GroupEvent] {
        let operations = change.operations
        var kinds: [Kind] = []
        if change.isGenesis {
            kinds.append(.created(name: operations.name ?? group.name, members: (operations.add ?? []).sorted()))
        } else {
            if let add = operations.add, !add.isEmpty { kinds.append(.added(add.sorted())) }
            if let remove = operations.remove, !remove.isEmpty {
                if remove.contains(change.author) { kinds.append(.left) }
                if remove.contains(me), change.author != me { kinds.append(.removedMe) }
                let others = remove.filter { $0 != change.author && $0 != me }.sorted()
                if !others.isEmpty { kinds.append(.removed(others)) }
            }
            if let promote = operations.promote, !promote.isEmpty { kinds.append(.promoted(promote.sorted())) }
            if let demote = operations.demote, !demote.isEmpty { kinds.append(.demoted(demote.sorted())) }
            if let name = operations.name { kinds.append(.renamed(to: name)) }
        }
        return kinds.map {
            GroupEvent(kind: $0, author: change.author, group: group, version: change.version, time: time, standing: standing)
        }
    }
}

extension ClientStore {
    /// The uid this device signed in as (nil before sign-in).
    static func myUID(_ db: Database) throws -> String? {
        try String.fetchOne(db, sql: "SELECT uid FROM identity WHERE id = 1")
    }

    /// Every stored change of group `id` as events, in version order (then as stored).
    static func groupEvents(of id: GroupID, _ db: Database) throws -> [GroupEvent] {
        guard let stored = try group(id.rawValue, db), let state = try? GroupState.decode(stored.state) else { return [] }
        let me = try myUID(db) ?? ""
        let changes = try Row.fetchAll(db, sql: """
            SELECT change_id, version, change, accepted, received_at FROM group_changes WHERE group_id = ?
            ORDER BY version, received_at, change_id
            """, arguments: [id.rawValue])
        return changes.flatMap { row -> [GroupEvent] in
            guard let change = try? GroupChange.decode(Array(row["change"] as Data)) else { return [] }
            let receivedAt: Double = row["received_at"]
            let standing = Self.standing(accepted: row["accepted"], version: change.version, receivedAt: receivedAt,
                                         changeID: Array(row["change_id"] as Data), folded: stored.version, among: changes)
            return GroupEvent.events(of: change, group: GroupContext(id: id, name: state.name, version: change.version), me: me,
                                     standing: standing, time: Date(timeIntervalSince1970: receivedAt))
        }
    }

    /// The events of a received `group_change` message (none for any other message, or when its
    /// change is not stored: a redelivery of a refused one).
    static func groupEvents(of message: ChatMessage, _ db: Database) throws -> [GroupEvent] {
        guard message.type == .groupChange, let reference = message.group, let change = message.payload.groupChange else { return [] }
        return try eventsOfChange(change.id(group: reference.id), group: reference.id, db)
    }

    /// The events of the stored change `changeID` of `group`.
    private static func eventsOfChange(_ changeID: [UInt8], group id: GroupID, _ db: Database) throws -> [GroupEvent] {
        guard let stored = try group(id.rawValue, db), let state = try? GroupState.decode(stored.state),
              let row = try Row.fetchOne(db, sql: "SELECT * FROM group_changes WHERE group_id = ? AND change_id = ?",
                                         arguments: [id.rawValue, Data(changeID)]),
              let change = try? GroupChange.decode(Array(row["change"] as Data)) else { return [] }
        let all = try Row.fetchAll(db, sql: "SELECT change_id, version, received_at FROM group_changes WHERE group_id = ?",
                                   arguments: [id.rawValue])
        let receivedAt: Double = row["received_at"]
        let standing = Self.standing(accepted: row["accepted"], version: change.version, receivedAt: receivedAt, changeID: changeID,
                                     folded: stored.version, among: all)
        return GroupEvent.events(of: change, group: GroupContext(id: id, name: state.name, version: change.version),
                                 me: try myUID(db) ?? "", standing: standing, time: Date(timeIntervalSince1970: receivedAt))
    }

    /// Whether a stored change took effect: void when the fold did not accept it though it
    /// reached its version; waiting when the fold has not reached it; late when a change of its
    /// version or later was stored before it.
    private static func standing(accepted: Bool, version: UInt64, receivedAt: Double, changeID: [UInt8], folded: UInt64,
                                 among rows: [Row]) -> GroupEvent.Standing {
        // The genesis is the state the fold starts from, not a change it applies: stored at
        // all, it is the group's (a second genesis is refused before it is stored).
        guard accepted || version == 1 else { return version > folded ? .waiting : .void }
        let overtaken = rows.contains { row in
            UInt64(row["version"] as Int64) >= version && (row["received_at"] as Double) < receivedAt
                && Array(row["change_id"] as Data) != changeID
        }
        return overtaken ? .late : .applied
    }
}

extension MailslotClient {
    /// Group `group`'s history for the UI: every change this device has stored — its own, the
    /// members' it received, those a sync answer brought — as events, oldest version first, each
    /// with its standing (applied, late, void, waiting).
    ///
    /// ```swift
    /// for event in try await client.changes(of: trip.id) where event.standing != .void {
    ///     if case .added(let uids) = event.kind { print("\(event.author) added \(uids.joined(separator: ", "))") }
    /// }
    /// ```
    ///
    /// A device added to a group starts at the change that added it: it has no earlier history.
    /// - Throws: ``ClientError/unknownGroup(_:)``.
    public func changes(of group: GroupID) async throws -> [GroupEvent] {
        _ = try await identity()
        return try await store.pool.read { db in
            guard try ClientStore.group(group.rawValue, db) != nil else { throw ClientError.unknownGroup(group) }
            return try ClientStore.groupEvents(of: group, db)
        }
    }
}
