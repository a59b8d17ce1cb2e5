import Foundation

/// The operations of a change (spec/groups.md §2.1): uids to add, remove, promote and demote, and
/// a new name. Each list is strictly ascending in UTF-8 byte order and, when present, not empty
/// (an empty list and an absent one would sign the same bytes); at least one operation.
public struct GroupOperations: Sendable, Equatable, Hashable {
    /// New members.
    public var add: [String]?
    /// Members to remove (a member removing only itself is a leave).
    public var remove: [String]?
    /// Members to make admins, appended to the seniority order.
    public var promote: [String]?
    /// Admins to make plain members again.
    public var demote: [String]?
    /// A new name.
    public var name: String?

    /// Operations with these parts; unsorted lists are sorted (the builder's convenience), and
    /// empty ones dropped. ``check()`` says whether the result is a valid set of operations.
    public init(add: [String]? = nil, remove: [String]? = nil, promote: [String]? = nil, demote: [String]? = nil, name: String? = nil) {
        func canonical(_ list: [String]?) -> [String]? {
            guard let list, !list.isEmpty else { return nil }
            return Array(Set(list)).sorted(by: utf8Less)
        }
        self.add = canonical(add)
        self.remove = canonical(remove)
        self.promote = canonical(promote)
        self.demote = canonical(demote)
        self.name = name
    }

    /// A member leaving: `{"remove": [uid]}`.
    public static func leave(_ uid: String) -> GroupOperations { GroupOperations(remove: [uid]) }

    /// True when these operations are exactly a leave by `author` (`{"remove": [author]}`).
    public func isLeave(by author: String) -> Bool {
        remove == [author] && add == nil && promote == nil && demote == nil && name == nil
    }

    /// Throws `group_malformed` unless these operations satisfy spec/groups.md §2.1.
    public func check() throws(GroupError) {
        guard add != nil || remove != nil || promote != nil || demote != nil || name != nil else {
            throw .malformed("a change needs at least one operation")
        }
        var count = 0
        for (list, what) in [(add, "add"), (remove, "remove"), (promote, "promote"), (demote, "demote")] {
            guard let list else { continue }
            guard !list.isEmpty else { throw .malformed("ops.\(what) is empty (leave it out instead)") }
            try GroupState.checkAscending(list, "ops.\(what)")
            count += list.count
        }
        guard count <= GroupLimits.maxOperationUIDs else { throw .malformed("more than \(GroupLimits.maxOperationUIDs) uids in ops") }
        if let name { try GroupState.checkName(name) }
        // A uid in at most one list, except add + promote (a new member made admin at once).
        let add = Set(self.add ?? []), remove = Set(remove ?? []), promote = Set(promote ?? []), demote = Set(demote ?? [])
        guard add.isDisjoint(with: remove), add.isDisjoint(with: demote), remove.isDisjoint(with: promote),
              remove.isDisjoint(with: demote), promote.isDisjoint(with: demote) else {
            throw .malformed("a uid is in two of ops' lists (only add and promote may share one)")
        }
    }

    /// `ops_bytes` (spec/groups.md §2.2): `PAE(opt(name), PAE(add…), PAE(remove…), PAE(promote…),
    /// PAE(demote…))`, where `opt` is `0x00` when absent and `0x01 ‖ UTF-8` when present.
    public var canonicalBytes: [UInt8] {
        func list(_ uids: [String]?) -> [UInt8] { preAuthenticationEncoding((uids ?? []).map { Array($0.utf8) }) }
        return preAuthenticationEncoding([name.map { [0x01] + Array($0.utf8) } ?? [0x00], list(add), list(remove), list(promote), list(demote)])
    }
}

extension GroupOperations: Codable {
    private enum Keys: String, CodingKey, CaseIterable { case add, remove, promote, demote, name }

    /// Decodes operations as written, refusing unknown members (an operation this version does
    /// not know would not be signed) and `null`s; ``check()`` then judges the values.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: AnyCodingKey.self)
        let known = Set(Keys.allCases.map(\.rawValue))
        for key in container.allKeys where !known.contains(key.stringValue) {
            throw GroupError.malformed("ops has an unknown member")
        }
        func list(_ key: Keys) throws -> [String]? {
            try container.decodeIfPresent([String].self, forKey: AnyCodingKey(key.rawValue))
        }
        add = try list(.add)
        remove = try list(.remove)
        promote = try list(.promote)
        demote = try list(.demote)
        name = try container.decodeIfPresent(String.self, forKey: AnyCodingKey(Keys.name.rawValue))
        for key in container.allKeys where try container.decodeNil(forKey: key) {
            throw GroupError.malformed("ops.\(key.stringValue) is null")
        }
    }

    /// Encodes the operations present.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Keys.self)
        try container.encodeIfPresent(add, forKey: .add)
        try container.encodeIfPresent(demote, forKey: .demote)
        try container.encodeIfPresent(name, forKey: .name)
        try container.encodeIfPresent(promote, forKey: .promote)
        try container.encodeIfPresent(remove, forKey: .remove)
    }
}

/// A signed change to a group (spec/groups.md §2): what an admin (or a leaving member) signs with
/// its Ed25519 identity key, carried in a chat message of type `group_change`.
///
/// The group id is not a member of the change: it is the chat message's `group.id`, and it is
/// signed, so every function that needs the signed bytes takes it. A value of this type always
/// has the shape of §2.1 (check 1 of §2.3); ``verify(group:authorKey:)`` makes the rest.
public struct GroupChange: Sendable, Equatable, Hashable {
    /// The version this change makes: its author's state's version + 1.
    public let version: UInt64
    /// The hash of the state the author built on (its state at `version` − 1; 32 zero bytes for a genesis).
    public let previous: [UInt8]
    /// The author's uid.
    public let author: String
    /// What the change does.
    public let operations: GroupOperations
    /// The hash of the state the author computed after this change; informative to others.
    public let stateHash: [UInt8]
    /// The Ed25519 signature of ``signedBytes(group:)`` by the author's identity key (64 bytes).
    public let signature: [UInt8]
    /// The full state at `version` − 1, in the copies to members the change adds and in sync
    /// answers; not signed (its hash is: `previous`).
    public let base: GroupState?
    /// Why the `base` a reader found is not a state (§1.2), reported by check 4 of §2.3 in its
    /// turn (after the signature), as `group_bad_base`.
    let baseProblem: String?

    /// A change with these fields, checked for the shape of spec/groups.md §2.1 (check 1);
    /// `group_malformed` otherwise. The signature is not checked here.
    public init(version: UInt64, previous: [UInt8], author: String, operations: GroupOperations, stateHash: [UInt8],
                signature: [UInt8], base: GroupState? = nil) throws(GroupError) {
        try self.init(version: version, previous: previous, author: author, operations: operations, stateHash: stateHash,
                      signature: signature, base: base, baseProblem: nil)
    }

    private init(version: UInt64, previous: [UInt8], author: String, operations: GroupOperations, stateHash: [UInt8],
                 signature: [UInt8], base: GroupState?, baseProblem: String?) throws(GroupError) {
        guard (1...GroupLimits.maxVersion).contains(version) else { throw .malformed("version must be 1 … 2^53 − 1") }
        guard previous.count == 32 else { throw .malformed("previous must be 32 bytes") }
        guard stateHash.count == 32 else { throw .malformed("state_hash must be 32 bytes") }
        guard signature.count == 64 else { throw .malformed("signature must be 64 bytes") }
        guard Identifier.isValidUID(author) else { throw .malformed("author is not a valid uid") }
        try operations.check()
        if version == 1 {
            guard previous == GroupState.noPrevious else { throw .malformed("a version 1 change (a genesis) has 32 zero bytes as previous") }
            guard base == nil, baseProblem == nil else { throw .malformed("a genesis carries no base") }
        }
        self.version = version
        self.previous = previous
        self.author = author
        self.operations = operations
        self.stateHash = stateHash
        self.signature = signature
        self.base = base
        self.baseProblem = baseProblem
    }

    /// The domain label of a change's signed bytes.
    public static let label = "mailslot-group-change-v1"

    /// `change_bytes` (spec/groups.md §2.2): `PAE("mailslot-group-change-v1", id, u64be(version),
    /// previous, author, ops_bytes, state_hash)` — what the signature covers.
    public func signedBytes(group: GroupID) -> [UInt8] {
        Self.signedBytes(group: group, version: version, previous: previous, author: author, operations: operations, stateHash: stateHash)
    }

    static func signedBytes(group: GroupID, version: UInt64, previous: [UInt8], author: String, operations: GroupOperations,
                            stateHash: [UInt8]) -> [UInt8] {
        preAuthenticationEncoding([Array(label.utf8), group.bytes, bigEndian64(version), previous, Array(author.utf8),
                                   operations.canonicalBytes, stateHash])
    }

    /// `change_id`: BLAKE2b-256 of ``signedBytes(group:)``. It leaves the signature out, so a
    /// change has one id however it is signed; the fold orders by it (§3).
    public func id(group: GroupID) -> [UInt8] { blake2b(signedBytes(group: group), length: 32) }

    /// True when this is a genesis: version 1.
    public var isGenesis: Bool { version == 1 }

    /// This change carrying `base` (for the copies to members it adds), or without one (nil).
    /// The base is not signed: ``verify(group:authorKey:)`` checks it against `previous`.
    public func with(base: GroupState?) -> GroupChange {
        // The fields were checked when `self` was made; only the base differs, and a genesis
        // takes none (a version 0 state cannot exist), so this cannot fail for a non-genesis.
        (try? GroupChange(version: version, previous: previous, author: author, operations: operations, stateHash: stateHash,
                          signature: signature, base: isGenesis ? nil : base)) ?? self
    }

    /// Checks the genesis form (spec/groups.md §2.3 check 5): version 1, `add` holds the author,
    /// `promote` is exactly the author, `name` present, no other list; `group_malformed` otherwise.
    public func checkGenesis() throws(GroupError) {
        guard version == 1 else { throw .malformed("a genesis is version 1") }
        guard let add = operations.add, add.contains(author) else { throw .malformed("a genesis adds its author") }
        guard operations.promote == [author] else { throw .malformed("a genesis promotes exactly its author") }
        guard operations.name != nil else { throw .malformed("a genesis names the group") }
        guard operations.remove == nil, operations.demote == nil else { throw .malformed("a genesis only adds, promotes its author and names") }
        guard add.count <= GroupLimits.maxMembers else { throw .malformed("a genesis adds more than \(GroupLimits.maxMembers) members") }
    }

    /// Verifies the change for group `group` under its author's identity key, in the order of
    /// spec/groups.md §2.3: (1, done when the value was made) the shape; (2) `authorKey` is the
    /// caller's lookup of the author's pinned key — nil is `group_unknown_author`, and a changed
    /// key the caller refuses itself (`key_changed`); (3) the signature; (4) `base`, when present;
    /// (5) a genesis's form. Check 6 (one genesis per group) needs the caller's store.
    ///
    /// Verification says nothing about authority: that is decided by the fold, against the state
    /// the change lands on (``GroupFold``).
    public func verify(group: GroupID, authorKey: IdentityPublicKey?) throws(GroupError) {
        guard let authorKey else { throw .unknownAuthor }
        guard authorKey.verify(signature: signature, of: signedBytes(group: group)) else { throw .badSignature }
        if let baseProblem { throw .badBase(baseProblem) }
        if let base {
            guard base.id == group else { throw .badBase("base.id is not the group's id") }
            guard base.version == version - 1 else { throw .badBase("base.version is not version − 1") }
            guard base.hash == previous else { throw .badBase("the hash of base is not previous") }
        }
        if isGenesis { try checkGenesis() }
    }

    // MARK: Building

    /// Signs a change of `operations` by `author` for `group`, as it stands: no rule but the
    /// shape is checked (tests and vectors build refused changes with it; apps use
    /// ``build(on:author:operations:key:)``).
    public static func sign(group: GroupID, version: UInt64, previous: [UInt8], author: String, operations: GroupOperations,
                            stateHash: [UInt8], key: IdentityKeyPair) throws(GroupError) -> GroupChange {
        let bytes = signedBytes(group: group, version: version, previous: previous, author: author, operations: operations, stateHash: stateHash)
        return try GroupChange(version: version, previous: previous, author: author, operations: operations, stateHash: stateHash,
                               signature: key.sign(bytes))
    }

    /// The genesis of a new group (spec/groups.md §1.3): `creator` adds `members` (itself among
    /// them, added if missing), promotes itself and names the group. Returns the change and the
    /// state it makes. `group_malformed` for an invalid name or uid, `group_too_large` over the limits.
    public static func genesis(group: GroupID = .random(), name: String, creator: String, members: [String],
                               key: IdentityKeyPair) throws(GroupError) -> (change: GroupChange, state: GroupState) {
        let operations = GroupOperations(add: members + [creator], promote: [creator], name: name)
        try operations.check()
        guard operations.add!.count <= GroupLimits.maxMembers else { throw .tooLarge }
        // The name and uids were checked above: a state refused now is one over the size limit.
        guard let state = try? GroupState(id: group, version: 1, previous: GroupState.noPrevious, name: name,
                                          members: operations.add!, admins: [creator]) else { throw .tooLarge }
        let change = try sign(group: group, version: 1, previous: GroupState.noPrevious, author: creator, operations: operations,
                              stateHash: state.hash, key: key)
        return (change, state)
    }

    /// Builds and signs the change `author` makes on `state` (its folded tip), refusing what the
    /// fold would not accept (spec/groups.md §3.2: not an admin, a senior named, adding a member,
    /// removing a non-member), what would leave members without an admin (a last admin leaving
    /// names a successor: `GroupOperations(remove: [me], promote: [successor])`), and what would
    /// exceed the limits. Returns the change (without `base`; see ``with(base:)``) and the state
    /// it makes.
    public static func build(on state: GroupState, author: String, operations: GroupOperations,
                             key: IdentityKeyPair) throws(GroupError) -> (change: GroupChange, state: GroupState) {
        try operations.check()
        guard state.version < GroupLimits.maxVersion else { throw .tooLarge }
        let version = state.version + 1
        // The state hash is that of the state the change leads to; the fold computes it from a
        // change whose other fields are final, so fold an unsigned draft first.
        let draft = try GroupChange(version: version, previous: state.hash, author: author, operations: operations,
                                    stateHash: GroupState.noPrevious, signature: [UInt8](repeating: 0, count: 64))
        guard GroupFold.authorised(draft, before: state, authority: state.admins) else {
            throw .notAllowed(GroupFold.refusal(of: draft, before: state))
        }
        guard let next = GroupFold.merge(state, accepted: [draft], version: version, capped: false) else { throw .tooLarge }
        if next.admins.isEmpty, !next.members.isEmpty {
            throw .notAllowed("the change would leave members without an admin: name a successor")
        }
        let change = try sign(group: state.id, version: version, previous: state.hash, author: author, operations: operations,
                              stateHash: next.hash, key: key)
        return (change, next)
    }

    // MARK: JSON

    /// The change's JSON (spec/groups.md §2.1), compact with sorted keys.
    public func encoded() -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Only strings, arrays and integers: encoding cannot fail.
        return Array((try? encoder.encode(self)) ?? Data())
    }

    /// Reads a change's JSON: strict JSON, then the shape of §2.1; `group_malformed` otherwise.
    /// Unknown members of the change object are ignored; of `ops`, refused.
    public static func decode(_ json: [UInt8]) throws(GroupError) -> GroupChange {
        do { try StrictJSON.validate(json, maxDepth: 8) } catch {
            throw .malformed("the change is not strict JSON")
        }
        do {
            return try JSONDecoder().decode(GroupChange.self, from: Data(json))
        } catch let error as GroupError {
            throw error
        } catch {
            throw .malformed("the change is not a group change object")
        }
    }
}

extension GroupChange: Codable {
    private enum Keys: String, CodingKey { case version, previous, author, ops, stateHash = "state_hash", signature, base }

    /// Decodes a change and checks its shape (§2.1); `base` must be a valid state (§1.2).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Keys.self)
        func bytes(_ key: Keys, _ count: Int) throws -> [UInt8] {
            let text = try container.decode(String.self, forKey: key)
            guard let bytes = Base64URL.decode(text), bytes.count == count else {
                throw GroupError.malformed("\(key.stringValue) must be strict base64url of \(count) bytes")
            }
            return bytes
        }
        // A base that is not a valid state is refused by check 4, after the signature (§2.3).
        var base: GroupState?, baseProblem: String?
        if container.contains(.base) {
            do { base = try container.decode(GroupState.self, forKey: .base) } catch let error as GroupError {
                baseProblem = "base is not a valid state (\(error))"
            } catch {
                baseProblem = "base is not a group state object"
            }
        }
        try self.init(version: try container.decode(UInt64.self, forKey: .version), previous: try bytes(.previous, 32),
                      author: try container.decode(String.self, forKey: .author),
                      operations: try container.decode(GroupOperations.self, forKey: .ops),
                      stateHash: try bytes(.stateHash, 32), signature: try bytes(.signature, 64), base: base, baseProblem: baseProblem)
    }

    /// Encodes the change (with `base` when it carries one).
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Keys.self)
        try container.encode(author, forKey: .author)
        try container.encodeIfPresent(base, forKey: .base)
        try container.encode(operations, forKey: .ops)
        try container.encode(Base64URL.encode(previous), forKey: .previous)
        try container.encode(Base64URL.encode(signature), forKey: .signature)
        try container.encode(Base64URL.encode(stateHash), forKey: .stateHash)
        try container.encode(version, forKey: .version)
    }
}
