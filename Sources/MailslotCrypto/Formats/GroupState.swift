import Foundation

/// The fixed limits of the group format (spec/groups.md §1.1). Constants of the format, not
/// settings: the relay knows nothing of groups, and every member must refuse the same things.
public enum GroupLimits {
    /// The most members a group state may have (Signal allows 1,001, WhatsApp 1,024; it is also the
    /// relay's default `--max-blob-recipients`, so one blob serves a whole group).
    public static let maxMembers = 1_000
    /// The longest a state's JSON (``GroupState/encoded()``) may be, in bytes: 48 KiB, so that
    /// the `base` of a change fits a 64 KiB envelope with room to spare.
    public static let maxStateBytes = 49_152
    /// The longest a state the fold itself produced may be (spec/groups.md §3.2, `merge`'s last
    /// resort): a state at ``maxStateBytes`` whose next version gains a digit is one byte
    /// over, and a version has at most 16 digits. A device stores and reads its own folded
    /// states under this bound (``GroupState/decode(folded:)``), so that what its fold reached
    /// is what it reads back; everything received is held to ``maxStateBytes``.
    public static let maxFoldedStateBytes = maxStateBytes + 16
    /// The longest a group name may be, in UTF-8 bytes.
    public static let maxNameBytes = 128
    /// The most uids a change's operations may name, all lists together: one more than
    /// ``maxMembers``, because the genesis of a full group names its 1,000 members in `add` and its
    /// creator once more in `promote`.
    public static let maxOperationUIDs = maxMembers + 1
    /// The highest version: 2^53 − 1, so that a version is always a JSON-safe integer.
    public static let maxVersion: UInt64 = (1 << 53) - 1
    /// The most changes one `group_history` answer carries.
    public static let maxHistoryChanges = 64
}

/// Why a group state or change is refused (spec/groups.md §2.3). Each case has a stable code.
public enum GroupError: Error, Equatable, Sendable, CustomStringConvertible {
    /// Not the shape of spec/groups.md §1–§2 (the text says what): `group_malformed`.
    case malformed(String)
    /// The author's identity key is not known to this device (§2.3 check 2, the caller's
    /// lookup): `group_unknown_author`.
    case unknownAuthor
    /// The author's identity key changed and the new one is not trusted yet (§2.3 check 2, the
    /// caller's lookup): `key_changed`.
    case keyChanged
    /// The signature does not verify under the author's identity key: `group_bad_signature`.
    case badSignature
    /// The `base` carried by a change is not the state the change builds on: `group_bad_base`.
    case badBase(String)
    /// A second genesis for a group this device already holds (§2.3 check 6, the caller's
    /// store): `group_duplicate_genesis`.
    case duplicateGenesis
    /// Building a change only: the author may not make it on this state (not an admin, a senior
    /// named, a member added twice, members left without an admin): `group_not_allowed`.
    case notAllowed(String)
    /// Building a change only: the state it leads to would exceed ``GroupLimits``: `group_too_large`.
    case tooLarge

    /// The stable, documented code of this failure (spec/groups.md §2.3).
    public var code: String {
        switch self {
        case .malformed: "group_malformed"
        case .unknownAuthor: "group_unknown_author"
        case .keyChanged: "key_changed"
        case .badSignature: "group_bad_signature"
        case .badBase: "group_bad_base"
        case .duplicateGenesis: "group_duplicate_genesis"
        case .notAllowed: "group_not_allowed"
        case .tooLarge: "group_too_large"
        }
    }

    /// The code, and what was wrong where the case says.
    public var description: String {
        switch self {
        case .malformed(let what), .badBase(let what), .notAllowed(let what): "\(code): \(what)"
        default: code
        }
    }
}

/// A group's id: 16 random bytes, written as 22 characters of strict unpadded base64url
/// (spec/groups.md §1.1, the key-id form of spec/envelope.md §4.1).
public struct GroupID: RawRepresentable, Hashable, Comparable, Sendable, Codable, CustomStringConvertible {
    /// The 22 characters.
    public let rawValue: String
    /// The 16 bytes, as the canonical forms (spec/groups.md §1.2, §2.2) carry them.
    public let bytes: [UInt8]

    /// The id written as `rawValue`, or nil unless it is exactly 22 characters of strict
    /// base64url decoding to 16 bytes.
    public init?(rawValue: String) {
        guard rawValue.utf8.count == 22, let bytes = Base64URL.decode(rawValue), bytes.count == 16 else { return nil }
        self.rawValue = rawValue
        self.bytes = bytes
    }

    /// The id of these 16 bytes, or nil for any other length.
    public init?(bytes: [UInt8]) {
        guard bytes.count == 16 else { return nil }
        self.bytes = bytes
        rawValue = Base64URL.encode(bytes)
    }

    /// A fresh id from libsodium's `randombytes_buf`.
    public static func random() -> GroupID { GroupID(bytes: randomBytes(16))! }

    /// Ordered by the written form, for stable listings.
    public static func < (lhs: GroupID, rhs: GroupID) -> Bool { lhs.rawValue < rhs.rawValue }

    /// Decodes the id from a JSON string, refusing anything but the strict form.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        guard let id = GroupID(rawValue: try container.decode(String.self)) else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a group id (22 characters of base64url, 16 bytes)")
        }
        self = id
    }

    /// Encodes the id as a JSON string.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }

    /// The 22 characters.
    public var description: String { rawValue }
}

/// The state of a group as every member folds it (spec/groups.md §1.2): id, version, the hash of
/// the state before, name, members (ascending in UTF-8 byte order) and admins (in seniority
/// order: the creator first, then each in the order promoted).
///
/// A value of this type always satisfies §1.2: the initialisers refuse anything else. Its hash
/// commits to the whole history that led to it, through `previous`.
public struct GroupState: Sendable, Equatable, Hashable {
    /// The group's id.
    public let id: GroupID
    /// The version this state is at: 1 … ``GroupLimits/maxVersion``.
    public let version: UInt64
    /// The hash of the state at the version before (32 bytes; 32 zero bytes at version 1).
    public let previous: [UInt8]
    /// The group's name: 1–128 bytes of UTF-8 without C0 controls or DEL, not normalised.
    public let name: String
    /// The members' uids, strictly ascending in UTF-8 byte order (0 … ``GroupLimits/maxMembers``;
    /// empty only once everyone left).
    public let members: [String]
    /// The admins' uids in seniority order: a subset of `members`, distinct.
    public let admins: [String]

    /// The 32 zero bytes a version 1 state names as `previous`.
    public static let noPrevious = [UInt8](repeating: 0, count: 32)

    /// A state with these fields, checked against spec/groups.md §1.2; `group_malformed` otherwise.
    public init(id: GroupID, version: UInt64, previous: [UInt8], name: String, members: [String], admins: [String]) throws(GroupError) {
        try self.init(id: id, version: version, previous: previous, name: name, members: members, admins: admins,
                      maxBytes: GroupLimits.maxStateBytes)
    }

    /// A state checked as above, its JSON at most `maxBytes` long.
    init(id: GroupID, version: UInt64, previous: [UInt8], name: String, members: [String], admins: [String],
         maxBytes: Int) throws(GroupError) {
        guard (1...GroupLimits.maxVersion).contains(version) else { throw .malformed("version must be 1 … 2^53 − 1") }
        guard previous.count == 32 else { throw .malformed("previous must be 32 bytes") }
        guard version > 1 || previous == Self.noPrevious else { throw .malformed("a version 1 state has 32 zero bytes as previous") }
        try Self.checkName(name)
        guard members.count <= GroupLimits.maxMembers else { throw .malformed("more than \(GroupLimits.maxMembers) members") }
        try Self.checkAscending(members, "members")
        let memberSet = Set(members)
        var seen = Set<String>()
        for admin in admins {
            guard memberSet.contains(admin) else { throw .malformed("admin \(admin) is not a member") }
            guard seen.insert(admin).inserted else { throw .malformed("admin \(admin) is listed twice") }
        }
        self.id = id
        self.version = version
        self.previous = previous
        self.name = name
        self.members = members
        self.admins = admins
        guard encodedCount <= maxBytes else {
            throw .malformed("the state's JSON is over \(maxBytes) bytes")
        }
    }

    /// A state from fields the fold derived from a valid state, without the size check (see
    /// ``GroupFold``'s last resort: a subset of a valid state whose version gained a digit).
    init(unchecked id: GroupID, version: UInt64, previous: [UInt8], name: String, members: [String], admins: [String]) {
        self.id = id
        self.version = version
        self.previous = previous
        self.name = name
        self.members = members
        self.admins = admins
    }

    /// The state a genesis change makes (spec/groups.md §2.3, check 5): version 1, no previous, the
    /// genesis's name and members, its author the only admin. The change must be a genesis
    /// (``GroupChange/checkGenesis()``); `group_malformed` otherwise.
    public init(genesis change: GroupChange, group: GroupID) throws(GroupError) {
        try change.checkGenesis()
        try self.init(id: group, version: 1, previous: Self.noPrevious, name: change.operations.name!,
                      members: change.operations.add!, admins: [change.author])
    }

    // MARK: Reading members

    /// True when `uid` is a member.
    public func isMember(_ uid: String) -> Bool { Self.binarySearch(members, uid) }

    /// True when `uid` is an admin.
    public func isAdmin(_ uid: String) -> Bool { admins.contains(uid) }

    /// The position of `uid` in the seniority order (0 for the most senior), or nil if not an admin.
    public func seniority(of uid: String) -> Int? { admins.firstIndex(of: uid) }

    // MARK: Canonical bytes and hash

    /// The canonical bytes (spec/groups.md §1.2): `PAE("mailslot-group-state-v1", id, u64be(version),
    /// previous, name, PAE(members…), PAE(admins…))`.
    public var canonicalBytes: [UInt8] {
        preAuthenticationEncoding([
            Array(Self.label.utf8), id.bytes, bigEndian64(version), previous, Array(name.utf8),
            preAuthenticationEncoding(members.map { Array($0.utf8) }),
            preAuthenticationEncoding(admins.map { Array($0.utf8) }),
        ])
    }

    /// The state's hash: BLAKE2b-256 of ``canonicalBytes`` (`crypto_generichash`, no key).
    public var hash: [UInt8] { blake2b(canonicalBytes, length: 32) }

    /// The domain label of the state's canonical bytes.
    public static let label = "mailslot-group-state-v1"

    // MARK: JSON

    /// The state's JSON (spec/groups.md §1.2): members sorted by name, no whitespace, strings
    /// escaping only `"` and `\` (uids and base64url need none; a name has no controls),
    /// non-ASCII as UTF-8. One state has one form, which is what ``GroupLimits/maxStateBytes``
    /// measures.
    public func encoded() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(encodedCount)
        func string(_ text: String) {
            out.append(UInt8(ascii: "\""))
            for byte in text.utf8 {
                if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { out.append(UInt8(ascii: "\\")) }
                out.append(byte)
            }
            out.append(UInt8(ascii: "\""))
        }
        func list(_ uids: [String]) {
            out.append(UInt8(ascii: "["))
            for (index, uid) in uids.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                string(uid)
            }
            out.append(UInt8(ascii: "]"))
        }
        out.append(contentsOf: Array("{\"admins\":".utf8)); list(admins)
        out.append(contentsOf: Array(",\"id\":".utf8)); string(id.rawValue)
        out.append(contentsOf: Array(",\"members\":".utf8)); list(members)
        out.append(contentsOf: Array(",\"name\":".utf8)); string(name)
        out.append(contentsOf: Array(",\"previous\":".utf8)); string(Base64URL.encode(previous))
        out.append(contentsOf: Array(",\"version\":\(version)}".utf8))
        return out
    }

    /// The length of ``encoded()`` without writing it.
    public var encodedCount: Int {
        func string(_ text: String) -> Int {
            2 + text.utf8.count + text.utf8.reduce(0) { $0 + ($1 == UInt8(ascii: "\"") || $1 == UInt8(ascii: "\\") ? 1 : 0) }
        }
        func list(_ uids: [String]) -> Int { 2 + max(0, uids.count - 1) + uids.reduce(0) { $0 + 2 + $1.utf8.count } }
        // {"admins":…,"id":…,"members":…,"name":…,"previous":…,"version":…}
        return 10 + list(admins) + 6 + 24 + 11 + list(members) + 8 + string(name) + 12 + 45 + 11 + String(version).utf8.count + 1
    }

    /// Reads a state's JSON: strict JSON, then §1.2. Unknown members are ignored (and not kept:
    /// the hash covers the known fields only). `group_malformed` for anything else.
    public static func decode(_ json: [UInt8]) throws(GroupError) -> GroupState {
        try decode(json, maxBytes: GroupLimits.maxStateBytes)
    }

    /// Reads a state this device's own fold produced and stored: the checks of ``decode(_:)``,
    /// the size up to ``GroupLimits/maxFoldedStateBytes`` (the fold's last resort may go a few
    /// bytes over §1.1, spec/groups.md §3.2; such a state must read back as it was stored).
    public static func decode(folded json: [UInt8]) throws(GroupError) -> GroupState {
        try decode(json, maxBytes: GroupLimits.maxFoldedStateBytes)
    }

    private static func decode(_ json: [UInt8], maxBytes: Int) throws(GroupError) -> GroupState {
        do { try StrictJSON.validate(json, maxDepth: 4) } catch {
            throw .malformed("the state is not strict JSON")
        }
        do {
            let decoder = JSONDecoder()
            decoder.userInfo[maxBytesKey] = maxBytes
            return try decoder.decode(GroupState.self, from: Data(json))
        } catch let error as GroupError {
            throw error
        } catch {
            throw .malformed("the state is not a group state object")
        }
    }

    // MARK: Checks shared with changes

    static func checkName(_ name: String) throws(GroupError) {
        let bytes = name.utf8
        guard (1...GroupLimits.maxNameBytes).contains(bytes.count) else { throw .malformed("a name must be 1 to \(GroupLimits.maxNameBytes) bytes") }
        guard bytes.allSatisfy({ $0 >= 0x20 && $0 != 0x7F }) else { throw .malformed("a name may not hold U+0000–U+001F or U+007F") }
    }

    /// `uids` are valid uids, strictly ascending in UTF-8 byte order (hence distinct).
    static func checkAscending(_ uids: [String], _ what: String) throws(GroupError) {
        var last: String?
        for uid in uids {
            guard Identifier.isValidUID(uid) else { throw .malformed("\(what) holds an invalid uid") }
            if let last, !utf8Less(last, uid) { throw .malformed("\(what) must be strictly ascending in UTF-8 byte order") }
            last = uid
        }
    }

    private static func binarySearch(_ sorted: [String], _ uid: String) -> Bool {
        var low = 0, high = sorted.count
        while low < high {
            let middle = (low + high) / 2
            if sorted[middle] == uid { return true }
            if utf8Less(sorted[middle], uid) { low = middle + 1 } else { high = middle }
        }
        return false
    }
}

extension GroupState: Codable {
    private enum Keys: String, CodingKey { case id, version, previous, name, members, admins }

    /// Decodes a state and checks it (§1.2); unknown members are ignored.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Keys.self)
        let previous = try container.decode(String.self, forKey: .previous)
        guard previous.utf8.count == 43, let previousBytes = Base64URL.decode(previous), previousBytes.count == 32 else {
            throw GroupError.malformed("previous must be 43 characters of base64url (32 bytes)")
        }
        try self.init(id: try container.decode(GroupID.self, forKey: .id), version: try container.decode(UInt64.self, forKey: .version),
                      previous: previousBytes, name: try container.decode(String.self, forKey: .name),
                      members: try container.decode([String].self, forKey: .members),
                      admins: try container.decode([String].self, forKey: .admins),
                      maxBytes: decoder.userInfo[Self.maxBytesKey] as? Int ?? GroupLimits.maxStateBytes)
    }

    /// The size bound a ``decode(folded:)`` passes to ``init(from:)``.
    static let maxBytesKey = CodingUserInfoKey(rawValue: "mailslot.groupState.maxBytes")!

    /// Encodes the state's known fields.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Keys.self)
        try container.encode(admins, forKey: .admins)
        try container.encode(id, forKey: .id)
        try container.encode(members, forKey: .members)
        try container.encode(name, forKey: .name)
        try container.encode(Base64URL.encode(previous), forKey: .previous)
        try container.encode(version, forKey: .version)
    }
}

/// `a` sorts before `b` in UTF-8 byte order (spec/groups.md §1.2: `Zoe` < `alice` < `alice.b` < `alice_b`).
func utf8Less(_ a: String, _ b: String) -> Bool { a.utf8.lexicographicallyPrecedes(b.utf8) }

/// `value` as 8 bytes, big-endian (`u64be` of spec/groups.md).
func bigEndian64(_ value: UInt64) -> [UInt8] { (0..<8).map { UInt8(truncatingIfNeeded: value >> (56 - 8 * UInt64($0))) } }
