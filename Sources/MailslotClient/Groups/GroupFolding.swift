import Foundation
import GRDB
import MailslotWire

// The fold driver (docs/design/groups.md §7.3): a group's state is always the fold of its stored
// changes from this device's origin (``GroupFold``), recomputed in the transaction that stores a
// change. Folding from scratch is cheap (changes are rare), and it makes a late or concurrent
// change land exactly where every other member puts it.
extension ClientStore {
    /// What taking one verified change into the store came to.
    enum TakenChange: Equatable {
        /// Stored (or known already) and folded; `missing` is the lowest version the fold stopped
        /// at for want of a change (the caller asks for it).
        case taken(missing: UInt64?)
        /// A change for a group this device does not know that does not welcome it: the message
        /// stays held until the welcome comes (docs/design/groups.md §3.3 rule 3).
        case unknownGroup
        /// For a group this user is out of, and not adding it back: ignored.
        case ignored
        /// A second genesis for a group this device holds (`group_duplicate_genesis`).
        case duplicateGenesis
    }

    /// Stores the verified `change` of group `group` and folds again; creates the group on this
    /// device when the change welcomes `me` (a genesis adding it, or a change adding it with its
    /// `base`), and starts a new history when it adds `me` back after a removal.
    static func take(_ change: GroupChange, group: GroupID, me: String, _ db: Database) throws -> TakenChange {
        let addsMe = change.operations.add?.contains(me) ?? false
        let id = change.id(group: group)
        if var stored = try self.group(group.rawValue, db) {
            if change.isGenesis {
                // One genesis per group on a device (spec/groups.md §2.3 check 6).
                let genesis = try changes(of: group.rawValue, db).first { $0.version == 1 }
                if let genesis, genesis.changeID != id { return .duplicateGenesis }
            }
            if stored.status != .member {
                guard addsMe, let base = change.base else { return .ignored }
                // Added back: a new origin, from the state it was welcomed into.
                stored.origin = change.version
                stored.base = base.encoded()
                try save(stored, db)
            }
            try insertChange(group.rawValue, changeID: id, version: change.version, author: change.author, json: change.storedJSON, db)
            return .taken(missing: try refold(group, me: me, db)?.missingVersion)
        }
        let start: GroupState
        let origin: UInt64
        if change.isGenesis, addsMe, let genesis = try? GroupState(genesis: change, group: group) {
            start = genesis
            origin = 1
        } else if addsMe, let base = change.base {
            start = base
            origin = change.version
        } else {
            return .unknownGroup
        }
        try save(StoredGroup(id: group.rawValue, state: start.encoded(), stateHash: start.hash, version: start.version, origin: origin,
                             base: start.encoded(), status: .member, removedBy: nil), db)
        try insertChange(group.rawValue, changeID: id, version: change.version, author: change.author, json: change.storedJSON, db)
        return .taken(missing: try refold(group, me: me, db)?.missingVersion)
    }

    /// Folds group `group`'s stored changes from this device's origin, and stores what it
    /// reached: the state, every state on the way (`group_states`), which changes were accepted,
    /// and this user's status (removed by whom, or left). Removal holds from here: every queued
    /// or held copy of a message to someone no longer a member is dropped (§3.2 step 6) — every
    /// copy at all when this user is out.
    @discardableResult
    static func refold(_ group: GroupID, me: String, _ db: Database) throws -> GroupFold.Result? {
        guard var stored = try self.group(group.rawValue, db), let baseJSON = stored.base,
              let start = try? GroupState.decode(folded: baseJSON) else { return nil }
        let storedChanges = try changes(of: group.rawValue, db)
        let decoded = storedChanges.compactMap { try? GroupChange.decode($0.json) }
        let result = GroupFold.fold(from: start, changes: decoded)
        for state in result.states { try recordState(group.rawValue, version: state.version, hash: state.hash, db) }
        try markAccepted(group.rawValue, result.accepted, db)
        let wasMember = stored.status == .member
        let state = result.state
        stored.state = state.encoded()
        stored.stateHash = state.hash
        stored.version = state.version
        if state.isMember(me) {
            stored.status = .member
            stored.removedBy = nil
        } else if wasMember {
            // Who took this user out: the latest accepted change removing it.
            let remover = decoded.filter { result.accepted.contains($0.id(group: group)) && ($0.operations.remove?.contains(me) ?? false) }
                .max { $0.version < $1.version }?.author
            if remover == nil || remover == me {
                stored.status = .left
                stored.removedBy = nil
            } else {
                stored.status = .removed
                stored.removedBy = remover
            }
        }
        try save(stored, db)
        try dropCopies(in: group.rawValue, notIn: stored.status == .member ? state.members : [], db)
        return result
    }

    /// The folded state of group `id` and this user's status in it, as a ``ChatGroup``.
    static func chatGroup(_ id: String, me: String, _ db: Database) throws -> ChatGroup? {
        guard let stored = try group(id, db), let state = try? GroupState.decode(folded: stored.state) else { return nil }
        return ChatGroup(state, status: stored.chatStatus, me: me)
    }
}

extension ClientStore.StoredGroup {
    /// The status as the public API says it.
    var chatStatus: ChatGroup.Status {
        switch status {
        case .member: .member
        case .left: .left
        case .removed: .removed(by: removedBy ?? "")
        }
    }
}

extension GroupChange {
    /// The change's JSON without `base`: what is stored (the base, when it welcomed this device,
    /// is kept as the group's origin state).
    var storedJSON: [UInt8] { with(base: nil).encoded() }
}
