import Foundation

/// Why a request body or WebSocket frame was refused before the relay looked at its meaning.
public enum WireDecodingError: Error, Equatable, Sendable {
    /// Nested deeper than the limit.
    case tooDeep(limit: Int)
    /// An object repeats a member name.
    case duplicateMember
    /// Not JSON (RFC 8259, strictly).
    case syntax
    /// JSON, but not the expected object.
    case shape
}

/// The one way the relay turns bytes from the network into a request or frame: strict JSON
/// (``StrictJSON``) within a depth limit first — a parser's recursion is what deep nesting
/// attacks — then the type. The fuzz target for request and frame decoding runs exactly this.
public enum WireDecoding {
    /// Refuses anything but strict JSON nested at most `maxDepth` deep.
    public static func validate(_ data: Data, maxDepth: Int) throws(WireDecodingError) {
        do { try StrictJSON.validate(data, maxDepth: maxDepth) } catch {
            switch error {
            case .tooDeep: throw .tooDeep(limit: maxDepth)
            case .duplicateMember: throw .duplicateMember
            case .syntax: throw .syntax
            }
        }
    }

    /// Validates `data`, then decodes it as `T`.
    public static func decode<T: Decodable>(_ type: T.Type, from data: Data, maxDepth: Int) throws(WireDecodingError) -> T {
        try validate(data, maxDepth: maxDepth)
        do { return try JSONDecoder().decode(type, from: data) } catch { throw .shape }
    }
}
