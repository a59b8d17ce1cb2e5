/// The grammar of Mailslot's identifiers. Both formats (tokens and envelopes) bind identifiers,
/// so the rules live here, at the bottom of the dependency graph, and every layer above uses them.
public enum Identifier {
    /// A user id: 1 to 128 characters from `A-Z a-z 0-9 . _ -`.
    public static func isValidUID(_ uid: String) -> Bool {
        let bytes = uid.utf8
        return (1...128).contains(bytes.count) && bytes.allSatisfy { isAlphanumeric($0) || $0 == dot || $0 == underscore || $0 == hyphen }
            && uid != "." && uid != ".."  // never a path segment with a meaning of its own
    }

    /// A message id: 16 to 64 characters from `A-Z a-z 0-9 _ -` (a ULID fits).
    public static func isValidMessageID(_ id: String) -> Bool {
        let bytes = id.utf8
        return (16...64).contains(bytes.count) && bytes.allSatisfy { isAlphanumeric($0) || $0 == underscore || $0 == hyphen }
    }

    /// A blob id (a file on the relay, spec/attachments.md §3): 16 to 64 characters from
    /// `A-Z a-z 0-9 _ -`, the message id's grammar; writers use 22 (16 random bytes in base64url).
    public static func isValidBlobID(_ id: String) -> Bool { isValidMessageID(id) }

    private static let dot = UInt8(ascii: "."), underscore = UInt8(ascii: "_"), hyphen = UInt8(ascii: "-")

    private static func isAlphanumeric(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
            || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
    }
}
