import Foundation
import MailslotCrypto

// The client's one way to read what a relay sends it — the answers of the HTTP API and the
// subscription's frames: strict JSON within a depth limit, then the type, whose decoder checks
// every number and identifier against the range spec/protocol.md gives it. A relay is trusted
// with nothing it could turn into a crash, a spin or a path of the client's own: a count of
// −2⁶³ is refused here, not subtracted from later. The `relay-answer` fuzz target runs exactly
// this (tools/fuzz).

/// A member of an answer or frame from the relay outside the range spec/protocol.md gives it (a
/// count below zero, an id that is not an id): the answer is refused, like one that is not JSON.
public struct OutOfRange: Error, Equatable, Sendable, CustomStringConvertible {
    /// The member, as on the wire (`count`, `prekeys`, `seq`, …).
    public let member: String
    /// What the relay sent, as text (cut to 64 characters).
    public let value: String
    /// The range the member must be in, for people.
    public let range: String

    /// A refusal of `value` for `member`.
    public init(_ member: String, _ value: String, _ range: String) {
        self.member = member
        self.value = String(value.prefix(64))
        self.range = range
    }

    /// "`member` `value` is not `range`", for a log or an error message.
    public var description: String { "\(member) \(value) is not \(range)" }
}

/// Why an answer or frame from the relay was refused.
public enum RelayAnswerError: Error, Equatable, Sendable, CustomStringConvertible {
    /// Not strict JSON, or nested too deep.
    case notJSON(WireDecodingError)
    /// JSON, but not the expected type (a member missing or of another type).
    case shape(type: String)
    /// A member outside its range.
    case outOfRange(OutOfRange)

    /// What was wrong, for people.
    public var description: String {
        switch self {
        case .notJSON(let error): "not the relay's JSON (\(error))"
        case .shape(let type): "not a \(type)"
        case .outOfRange(let error): error.description
        }
    }
}

/// The ranges of the numbers a relay sends, and the decoding of its answers and frames.
public enum RelayAnswers {
    /// The deepest nesting an answer has (a page: object, array, record) with room to spare; the
    /// relay's own limit for what it reads.
    public static let maxDepth = 16
    /// The most one-time prekeys a relay can hold for one owner: one per id (1 … 2³²−1).
    public static let maxPrekeyCount = Int(UInt32.max)
    /// The longest `retry_after` taken, in seconds (2³¹−1): anything longer is not a pause.
    public static let maxRetryAfter = Int(Int32.max)

    /// Decodes `data`, an answer of the relay, as `T`: strict JSON at most ``maxDepth`` deep,
    /// then `T`'s decoder with its range checks.
    public static func decode<T: Decodable>(_ type: T.Type, from data: Data) throws(RelayAnswerError) -> T {
        do { try WireDecoding.validate(data, maxDepth: maxDepth) } catch { throw .notJSON(error) }
        do { return try JSONDecoder().decode(type, from: data) } catch let error as OutOfRange {
            throw .outOfRange(error)
        } catch {
            throw .shape(type: "\(T.self)")
        }
    }

    /// A frame of the subscription socket from its text.
    public static func frame(_ text: String) throws(RelayAnswerError) -> RelayFrame {
        try decode(RelayFrame.self, from: Data(text.utf8))
    }

    /// Whether `text` is a list cursor (spec/protocol.md §4.9): decimal, no sign, no leading
    /// zero, within int64.
    public static func isValidCursor(_ text: String) -> Bool {
        let digits = text.utf8
        guard let first = digits.first, digits.count <= 19, digits.allSatisfy({ (48...57).contains($0) }) else { return false }
        return (first != 48 || digits.count == 1) && Int64(text) != nil
    }

    /// Whether `text` is a session (`mss_`) or refresh (`msr_`) token of the relay's shape: the
    /// prefix and 43 characters of base64url. Anything else — a line break to smuggle a header —
    /// never goes into a request.
    public static func isValidSecret(_ text: String, prefix: String) -> Bool {
        text.hasPrefix(prefix) && text.utf8.count == prefix.utf8.count + 43
            && Base64URL.decode(text.dropFirst(prefix.count))?.count == 32
    }
}

extension KeyedDecodingContainer {
    /// An integer member that must lie in `range`.
    func decode<I: FixedWidthInteger & Decodable>(_ type: I.Type, forKey key: Key, in range: ClosedRange<I>) throws -> I {
        let value = try decode(type, forKey: key)
        guard range.contains(value) else { throw OutOfRange(key.stringValue, "\(value)", "\(range.lowerBound) … \(range.upperBound)") }
        return value
    }

    /// An optional integer member that, when present, must lie in `range`.
    func decodeIfPresent<I: FixedWidthInteger & Decodable>(_ type: I.Type, forKey key: Key, in range: ClosedRange<I>) throws -> I? {
        guard let value = try decodeIfPresent(type, forKey: key) else { return nil }
        guard range.contains(value) else { throw OutOfRange(key.stringValue, "\(value)", "\(range.lowerBound) … \(range.upperBound)") }
        return value
    }

    /// A string member that must pass `isValid` (`what` names the grammar).
    func decode(_ type: String.Type, forKey key: Key, _ what: String, _ isValid: (String) -> Bool) throws -> String {
        let value = try decode(type, forKey: key)
        guard isValid(value) else { throw OutOfRange(key.stringValue, value, what) }
        return value
    }

    /// An optional string member that, when present, must pass `isValid`.
    func decodeIfPresent(_ type: String.Type, forKey key: Key, _ what: String, _ isValid: (String) -> Bool) throws -> String? {
        guard let value = try decodeIfPresent(type, forKey: key) else { return nil }
        guard isValid(value) else { throw OutOfRange(key.stringValue, value, what) }
        return value
    }
}

/// The grammars the range checks name.
enum Grammar {
    static let uid = "a uid"
    static let messageID = "a message id"
    static let blobID = "a blob id"
    static let time = "an RFC 3339 time"
    static let cursor = "a cursor (decimal, within int64)"
    static func isTime(_ text: String) -> Bool { Timestamp.parse(text) != nil }
}
