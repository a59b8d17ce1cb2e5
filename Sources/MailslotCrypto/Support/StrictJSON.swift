/// A strict RFC 8259 check, run before any JSON Mailslot reads is handed to a parser.
///
/// Platform JSON parsers are lenient in different ways (trailing commas, a byte-order mark,
/// duplicate member names where "the last one wins"); two implementations that disagree on what a
/// signed claim or body says are a security problem. So every JSON text Mailslot reads — token
/// claims and footers, envelope bodies, key bundles, relay requests — must first pass this check.
public enum StrictJSON {
    /// Why a text is not strict JSON.
    public enum Failure: Error, Equatable, Sendable {
        /// Not RFC 8259 JSON (the text says what was found where).
        case syntax(String)
        /// Nested deeper than allowed.
        case tooDeep
        /// An object repeats a member name.
        case duplicateMember(String)
    }

    /// The longest number literal accepted, in characters.
    public static let maxNumberLength = 64

    /// Checks that `bytes` are one RFC 8259 JSON value (UTF-8, no BOM, surrounding whitespace
    /// allowed), nested at most `maxDepth` deep, with unique member names in every object and no
    /// unpaired surrogate escapes, and no number literal longer than ``maxNumberLength``.
    public static func validate(_ bytes: some Collection<UInt8>, maxDepth: Int = 64) throws(Failure) {
        try withContiguousBytes(bytes) { bytes throws(Failure) in
            var parser = Parser(bytes: bytes, maxDepth: maxDepth)
            parser.skipWhitespace()
            try parser.value(depth: 0)
            parser.skipWhitespace()
            guard parser.index == parser.bytes.count else { throw parser.failure("data after the JSON value") }
            guard String(validating: parser.bytes, as: UTF8.self) != nil else { throw .syntax("not UTF-8") }
        }
    }

    /// The number literal of member `name` of `bytes`, a JSON object, as its text (`4e9`, `1.0`,
    /// `42`): what a decoder's number type no longer tells, for a rule on the form of a number.
    /// Nil when `bytes` is not a strict JSON object (``validate(_:maxDepth:)`` with `maxDepth`),
    /// or has no such member, or its value is not a number. Members are compared as unescaped bytes.
    public static func numberText(ofMember name: String, in bytes: some Collection<UInt8>, maxDepth: Int = 64) -> String? {
        let wanted = Array(name.utf8)
        return try? withContiguousBytes(bytes) { bytes throws(Failure) -> String? in
            var parser = Parser(bytes: bytes, maxDepth: maxDepth)
            parser.skipWhitespace()
            guard parser.current == UInt8(ascii: "{") else { return nil }
            var found: String?
            try parser.object(depth: 1) { member, start, end in
                if member == wanted { found = String(decoding: bytes[start..<end], as: UTF8.self) }
            }
            parser.skipWhitespace()
            guard parser.index == parser.bytes.count, String(validating: parser.bytes, as: UTF8.self) != nil else { return nil }
            return found
        }
    }

    /// Calls `body` with the collection's bytes in contiguous memory, copying only when they are not.
    private static func withContiguousBytes<R>(_ bytes: some Collection<UInt8>,
                                               _ body: (UnsafeBufferPointer<UInt8>) throws(Failure) -> R) throws(Failure) -> R {
        let result = bytes.withContiguousStorageIfAvailable { buffer in Result { () throws(Failure) in try body(buffer) } }
            ?? Array(bytes).withUnsafeBufferPointer { buffer in Result { () throws(Failure) in try body(buffer) } }
        return try result.get()
    }

    /// The members of `bytes` when they are one JSON object whose every member value is a string
    /// or null, in order, names and values unescaped; nil for any other text. The check is the
    /// one ``validate(_:maxDepth:)`` makes (any `maxDepth` of 1 or more), done in the same pass:
    /// non-nil means the text is strict JSON. It lets the hottest frames skip both a second pass
    /// and a general decoder; anything it would have to interpret (numbers, nesting), and every
    /// refusal, is left to ``validate(_:maxDepth:)`` and the general decoder.
    public static func flatStringObject(_ bytes: UnsafeBufferPointer<UInt8>) -> [(name: String, value: String?)]? {
        var parser = Parser(bytes: bytes, maxDepth: 1)
        var members: [(name: String, value: String?)] = []
        // Compared as unescaped bytes, as `validate` does (String equality would also equate
        // canonically equivalent names, which JSON does not).
        var names: [[UInt8]] = []
        do {
            parser.skipWhitespace()
            guard parser.current == UInt8(ascii: "{") else { return nil }
            parser.index += 1
            parser.skipWhitespace()
            if parser.current == UInt8(ascii: "}") {
                parser.index += 1
            } else {
                while true {
                    parser.skipWhitespace()
                    guard parser.current == UInt8(ascii: "\"") else { return nil }
                    let name = try parser.string(decoding: true)
                    guard !names.contains(name) else { return nil }
                    names.append(name)
                    parser.skipWhitespace()
                    guard parser.current == UInt8(ascii: ":") else { return nil }
                    parser.index += 1
                    parser.skipWhitespace()
                    let value: String?
                    switch parser.current {
                    case UInt8(ascii: "\""): value = try parser.text()
                    case UInt8(ascii: "n"): try parser.expect("null"); value = nil
                    default: return nil
                    }
                    members.append((String(decoding: name, as: UTF8.self), value))
                    parser.skipWhitespace()
                    if parser.current == UInt8(ascii: ",") { parser.index += 1; continue }
                    guard parser.current == UInt8(ascii: "}") else { return nil }
                    parser.index += 1
                    break
                }
            }
            parser.skipWhitespace()
        } catch {
            return nil
        }
        guard parser.index == bytes.count, String(validating: bytes, as: UTF8.self) != nil else { return nil }
        return members
    }

    private struct Parser {
        let bytes: UnsafeBufferPointer<UInt8>
        let maxDepth: Int
        var index = 0

        init(bytes: UnsafeBufferPointer<UInt8>, maxDepth: Int) {
            self.bytes = bytes
            self.maxDepth = maxDepth
        }

        func failure(_ what: String) -> Failure { .syntax("\(what) at byte \(index)") }

        var current: UInt8? { index < bytes.count ? bytes[index] : nil }

        mutating func skipWhitespace() {
            while let byte = current, byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D { index += 1 }
        }

        mutating func expect(_ literal: String) throws(Failure) {
            for byte in literal.utf8 {
                guard current == byte else { throw failure("invalid literal") }
                index += 1
            }
        }

        mutating func value(depth: Int) throws(Failure) {
            guard let byte = current else { throw failure("expected a value") }
            switch byte {
            case UInt8(ascii: "{"): try object(depth: depth + 1)
            case UInt8(ascii: "["): try array(depth: depth + 1)
            case UInt8(ascii: "\""): _ = try string()
            case UInt8(ascii: "t"): try expect("true")
            case UInt8(ascii: "f"): try expect("false")
            case UInt8(ascii: "n"): try expect("null")
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): try number()
            default: throw failure("expected a value")
            }
        }

        /// An object; `numberMember` is told each of its own members whose value is a number
        /// literal: the member's unescaped name and where the literal starts and ends.
        mutating func object(depth: Int, numberMember: ((_ name: [UInt8], _ start: Int, _ end: Int) -> Void)? = nil) throws(Failure) {
            guard depth <= maxDepth else { throw .tooDeep }
            index += 1
            skipWhitespace()
            if current == UInt8(ascii: "}") { index += 1; return }
            var names: Set<[UInt8]> = []
            while true {
                skipWhitespace()
                guard current == UInt8(ascii: "\"") else { throw failure("expected a member name") }
                let name = try string(decoding: true)
                guard names.insert(name).inserted else {
                    throw .duplicateMember(String(decoding: name.prefix(64), as: UTF8.self))
                }
                skipWhitespace()
                guard current == UInt8(ascii: ":") else { throw failure("expected ':'") }
                index += 1
                skipWhitespace()
                let start = index
                try value(depth: depth)
                if let numberMember, bytes[start] == UInt8(ascii: "-") || Self.isDigit(bytes[start]) { numberMember(name, start, index) }
                skipWhitespace()
                if current == UInt8(ascii: ",") { index += 1; continue }
                guard current == UInt8(ascii: "}") else { throw failure("expected ',' or '}'") }
                index += 1
                return
            }
        }

        mutating func array(depth: Int) throws(Failure) {
            guard depth <= maxDepth else { throw .tooDeep }
            index += 1
            skipWhitespace()
            if current == UInt8(ascii: "]") { index += 1; return }
            while true {
                skipWhitespace()
                try value(depth: depth)
                skipWhitespace()
                if current == UInt8(ascii: ",") { index += 1; continue }
                guard current == UInt8(ascii: "]") else { throw failure("expected ',' or ']'") }
                index += 1
                return
            }
        }

        /// A string value as text: taken from the bytes as they are when it has no escapes.
        mutating func text() throws(Failure) -> String {
            let start = index + 1
            var end = start
            while end < bytes.count, bytes[end] >= 0x20, bytes[end] != UInt8(ascii: "\""), bytes[end] != UInt8(ascii: "\\") { end += 1 }
            if end < bytes.count, bytes[end] == UInt8(ascii: "\"") {
                index = end + 1
                return String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<end]), as: UTF8.self)
            }
            return String(decoding: try string(decoding: true), as: UTF8.self)
        }

        /// A string; returns its decoded bytes when `decoding` (member names, so that names that
        /// differ only in how they are escaped — `"a"` and `"\u0061"` — count as duplicates);
        /// values are only checked.
        mutating func string(decoding: Bool = false) throws(Failure) -> [UInt8] {
            index += 1
            var decoded: [UInt8] = []
            while true {
                // The common case: a run of plain bytes, taken (or skipped) at once.
                let run = index
                while index < bytes.count, bytes[index] >= 0x20, bytes[index] != UInt8(ascii: "\""), bytes[index] != UInt8(ascii: "\\") {
                    index += 1
                }
                if decoding, index > run { decoded.append(contentsOf: bytes[run..<index]) }
                guard let byte = current else { throw failure("unterminated string") }
                index += 1
                switch byte {
                case UInt8(ascii: "\""):
                    return decoded
                case UInt8(ascii: "\\"):
                    guard let escape = current else { throw failure("unterminated escape") }
                    index += 1
                    switch escape {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): decoded.append(escape)
                    case UInt8(ascii: "b"): decoded.append(0x08)
                    case UInt8(ascii: "f"): decoded.append(0x0C)
                    case UInt8(ascii: "n"): decoded.append(0x0A)
                    case UInt8(ascii: "r"): decoded.append(0x0D)
                    case UInt8(ascii: "t"): decoded.append(0x09)
                    case UInt8(ascii: "u"):
                        var scalar = try hex4()
                        if (0xD800...0xDBFF).contains(scalar) {
                            guard current == UInt8(ascii: "\\") else { throw failure("unpaired surrogate") }
                            index += 1
                            guard current == UInt8(ascii: "u") else { throw failure("unpaired surrogate") }
                            index += 1
                            let low = try hex4()
                            guard (0xDC00...0xDFFF).contains(low) else { throw failure("unpaired surrogate") }
                            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                        } else if (0xDC00...0xDFFF).contains(scalar) {
                            throw failure("unpaired surrogate")
                        }
                        decoded.append(contentsOf: Array(String(Character(Unicode.Scalar(scalar)!)).utf8))
                    default:
                        throw failure("invalid escape")
                    }
                default:
                    throw failure("control character in a string")
                }
            }
        }

        mutating func hex4() throws(Failure) -> UInt32 {
            var value: UInt32 = 0
            for _ in 0..<4 {
                guard let byte = current, let digit = Self.hexValue(byte) else { throw failure("invalid \\u escape") }
                value = value << 4 | digit
                index += 1
            }
            return value
        }

        static func hexValue(_ byte: UInt8) -> UInt32? {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): UInt32(byte - UInt8(ascii: "A") + 10)
            default: nil
            }
        }

        mutating func number() throws(Failure) {
            let start = index
            try numberLiteral()
            // Foundation's JSONDecoder traps on some very long number literals (seen with 171+
            // characters and an exponent, decoding an integer). No real number needs more than 64.
            guard index - start <= StrictJSON.maxNumberLength else { throw failure("number literal longer than \(StrictJSON.maxNumberLength) characters") }
        }

        mutating func numberLiteral() throws(Failure) {
            if current == UInt8(ascii: "-") { index += 1 }
            guard let first = current, Self.isDigit(first) else { throw failure("invalid number") }
            index += 1
            if first != UInt8(ascii: "0") { while let byte = current, Self.isDigit(byte) { index += 1 } }
            if current == UInt8(ascii: ".") {
                index += 1
                guard let byte = current, Self.isDigit(byte) else { throw failure("invalid fraction") }
                while let byte = current, Self.isDigit(byte) { index += 1 }
            }
            if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
                index += 1
                if current == UInt8(ascii: "+") || current == UInt8(ascii: "-") { index += 1 }
                guard let byte = current, Self.isDigit(byte) else { throw failure("invalid exponent") }
                while let byte = current, Self.isDigit(byte) { index += 1 }
            }
        }

        static func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }
    }
}
