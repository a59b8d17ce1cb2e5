/// The convergence rule of groups (spec/groups.md §3): every member folds the same set of valid
/// changes into the same state, whatever order they arrived in.
///
/// Changes apply as operations, version by version, each authorised against the state before its
/// version. Within one version a seniority pass orders them (admins by seniority, then other
/// authors by uid, then change id); a change whose author a more senior change of the same
/// version demotes or removes is void. The accepted changes merge: removal wins over adding,
/// demotion over promotion, and the most senior renamer's name. Nothing is ever discarded for
/// losing a race, and nothing depends on a hash an author can grind.
public enum GroupFold {
    /// What a fold reached.
    public struct Result: Sendable, Equatable {
        /// The folded state: the tip.
        public let state: GroupState
        /// Every state the fold reached, ascending by version, starting with the state it started
        /// from (a member records them: a message naming one of these hashes is not news).
        public let states: [GroupState]
        /// The ids (`change_id`) of the changes the fold accepted.
        public let accepted: Set<[UInt8]>
        /// The ids of the changes the fold found void: not authorised against the state before
        /// their version (in the seniority pass of that version).
        public let void: Set<[UInt8]>
        /// The ids of the changes the fold did not reach: past a gap in the versions (a version
        /// missing below them means a change this member has not received, §3.1).
        public let waiting: Set<[UInt8]>
        /// The ids of the changes at or below the starting state's version: before this member's
        /// history (a joiner's origin), ignored.
        public let beforeHistory: Set<[UInt8]>
        /// The lowest version missing when the fold stopped at a gap, else nil.
        public let missingVersion: UInt64?
    }

    /// Folds `changes` onto `start`: the genesis state (``GroupState/init(genesis:group:)``) or
    /// the `base` a joiner was welcomed with. The changes must have passed
    /// ``GroupChange/verify(group:authorKey:)`` for `start.id`; duplicates (same change id) count
    /// once. A pure function of its input: the order of `changes` does not matter.
    public static func fold(from start: GroupState, changes: [GroupChange]) -> Result {
        let group = start.id
        // By version, each change once (by id), with its id computed once.
        var byVersion: [UInt64: [(id: [UInt8], change: GroupChange)]] = [:]
        var seen = Set<[UInt8]>()
        var beforeHistory = Set<[UInt8]>()
        for change in changes {
            let id = change.id(group: group)
            guard seen.insert(id).inserted else { continue }
            if change.version <= start.version { beforeHistory.insert(id); continue }
            byVersion[change.version, default: []].append((id, change))
        }
        var state = start
        var states = [start]
        var accepted = Set<[UInt8]>(), void = Set<[UInt8]>(), waiting = Set<[UInt8]>()
        var expected = start.version + 1
        var missing: UInt64?
        for version in byVersion.keys.sorted() {
            let changes = byVersion[version]!
            guard missing == nil, version == expected else {
                if missing == nil { missing = expected }
                waiting.formUnion(changes.map(\.id))
                continue
            }
            expected = version + 1
            let step = apply(version: version, changes: changes, to: state)
            accepted.formUnion(step.accepted)
            void.formUnion(step.void)
            if let next = step.state {
                state = next
                states.append(next)
            }
        }
        return Result(state: state, states: states, accepted: accepted, void: void, waiting: waiting,
                      beforeHistory: beforeHistory, missingVersion: missing)
    }

    /// One version of the fold (spec/groups.md §3.2): the changes of `version` against `before`,
    /// the state before it. Returns the state at `version` (nil when no change was accepted: the
    /// version is skipped) and which change ids were accepted and which void.
    public static func apply(version: UInt64, changes: [GroupChange], to before: GroupState)
        -> (state: GroupState?, accepted: [[UInt8]], void: [[UInt8]]) {
        var seen = Set<[UInt8]>()
        let identified = changes.map { (id: $0.id(group: before.id), change: $0) }.filter { seen.insert($0.id).inserted }
        return apply(version: version, changes: identified, to: before)
    }

    private static func apply(version: UInt64, changes: [(id: [UInt8], change: GroupChange)], to before: GroupState)
        -> (state: GroupState?, accepted: [[UInt8]], void: [[UInt8]]) {
        let ordered = changes.sorted { lhs, rhs in
            let left = rank(lhs.change.author, in: before), right = rank(rhs.change.author, in: before)
            if left != right { return left < right }
            return lhs.id.lexicographicallyPrecedes(rhs.id)
        }
        var authority = before.admins
        var accepted: [GroupChange] = [], acceptedIDs: [[UInt8]] = [], voidIDs: [[UInt8]] = []
        for (id, change) in ordered {
            if authorised(change, before: before, authority: authority) {
                accepted.append(change)
                acceptedIDs.append(id)
                let lost = Set((change.operations.demote ?? []) + (change.operations.remove ?? []))
                authority.removeAll { lost.contains($0) }
            } else {
                voidIDs.append(id)
            }
        }
        guard !accepted.isEmpty else { return (nil, acceptedIDs, voidIDs) }
        // Within the limits by construction: the capped merge drops adds until the state fits,
        // and the state without them is no larger than `before`.
        return (merge(before, accepted: accepted, version: version, capped: true), acceptedIDs, voidIDs)
    }

    /// The order of the seniority pass: admins of `before` by seniority, then everyone else by uid.
    private static func rank(_ author: String, in before: GroupState) -> Rank {
        if let seniority = before.seniority(of: author) { return Rank(seniority: seniority, uid: "") }
        return Rank(seniority: Int.max, uid: author)
    }

    private struct Rank: Equatable {
        let seniority: Int
        let uid: String
        static func < (lhs: Rank, rhs: Rank) -> Bool {
            lhs.seniority != rhs.seniority ? lhs.seniority < rhs.seniority : utf8Less(lhs.uid, rhs.uid)
        }
    }

    /// Whether `change` is authorised against `before` while `authority` (the admins of
    /// `before` not yet demoted or removed in this version's pass) stands (spec/groups.md §3.2):
    /// a leave by any member; otherwise an admin in `authority` adding non-members, removing
    /// members (admins only if junior or itself), demoting admins junior or itself, and promoting
    /// members or uids it adds.
    public static func authorised(_ change: GroupChange, before: GroupState, authority: [String]) -> Bool {
        refusalReason(change, before: before, authority: authority) == nil
    }

    /// Why ``build`` refuses a change, in words for the caller's error.
    static func refusal(of change: GroupChange, before: GroupState) -> String {
        refusalReason(change, before: before, authority: before.admins) ?? "allowed"
    }

    private static func refusalReason(_ change: GroupChange, before: GroupState, authority: [String]) -> String? {
        let author = change.author, ops = change.operations
        if ops.isLeave(by: author) { return before.isMember(author) ? nil : "\(author) is not a member" }
        guard authority.contains(author) else { return "\(author) is not an admin" }
        let seniority = before.seniority(of: author)!  // in authority, hence an admin of `before`
        // "itself or junior": at or after the author in the seniority order.
        func juniorOrSelf(_ uid: String) -> Bool { (before.seniority(of: uid) ?? -1) >= seniority }
        for uid in ops.add ?? [] where before.isMember(uid) { return "\(uid) is a member already" }
        for uid in ops.remove ?? [] {
            guard before.isMember(uid) else { return "\(uid) is not a member" }
            if before.isAdmin(uid), !juniorOrSelf(uid) { return "\(uid) is senior to \(author)" }
        }
        for uid in ops.demote ?? [] {
            guard before.isAdmin(uid) else { return "\(uid) is not an admin" }
            guard juniorOrSelf(uid) else { return "\(uid) is senior to \(author)" }
        }
        let added = Set(ops.add ?? [])
        for uid in ops.promote ?? [] {
            guard !before.isAdmin(uid) else { return "\(uid) is an admin already" }
            guard before.isMember(uid) || added.contains(uid) else { return "\(uid) is not a member" }
        }
        return nil
    }

    /// The merge of the changes accepted at `version` onto `before` (spec/groups.md §3.2):
    /// members = (members ∪ adds) − removes; admins = the admins of `before` not removed or
    /// demoted, in order, then the uids promoted in the order of `accepted` (within one change
    /// ascending), each once, if members and neither demoted nor removed; the name of the first
    /// accepted change that has one. When the result is over ``GroupLimits`` and `capped`, the
    /// adds (and promotions of uids that were not members) are dropped; uncapped, nil.
    static func merge(_ before: GroupState, accepted: [GroupChange], version: UInt64, capped: Bool) -> GroupState? {
        var adds = Set<String>(), removes = Set<String>(), demotes = Set<String>()
        var promotions: [String] = []
        for change in accepted {
            adds.formUnion(change.operations.add ?? [])
            removes.formUnion(change.operations.remove ?? [])
            demotes.formUnion(change.operations.demote ?? [])
            promotions.append(contentsOf: change.operations.promote ?? [])
        }
        let name = accepted.lazy.compactMap(\.operations.name).first ?? before.name
        func state(adding adds: Set<String>, promoting promotions: [String], name: String) -> GroupState? {
            let members = Set(before.members).union(adds).subtracting(removes)
            let lost = removes.union(demotes)
            var admins = before.admins.filter { !lost.contains($0) }
            var listed = Set(admins)
            for uid in promotions where members.contains(uid) && !lost.contains(uid) && listed.insert(uid).inserted {
                admins.append(uid)
            }
            return try? GroupState(id: before.id, version: version, previous: before.hash, name: name,
                                   members: members.sorted(by: utf8Less), admins: admins)
        }
        if let merged = state(adding: adds, promoting: promotions, name: name) { return merged }
        guard capped else { return nil }
        // Over the limits: first without the adds (and so without promotions of non-members).
        if let merged = state(adding: [], promoting: promotions, name: name) { return merged }
        // Still over (promotions or a longer name on a state at the limit): only the removals
        // and demotions apply — a subset of `before` — so a removal always holds.
        if let merged = state(adding: [], promoting: [], name: before.name) { return merged }
        // Only a longer version number (9 → 10) can push a subset of `before` over, by a digit:
        // the fold still moves, as every member's does, rather than stop a removal.
        let lost = removes.union(demotes)
        return GroupState(unchecked: before.id, version: version, previous: before.hash, name: before.name,
                          members: before.members.filter { !removes.contains($0) }, admins: before.admins.filter { !lost.contains($0) })
    }
}
