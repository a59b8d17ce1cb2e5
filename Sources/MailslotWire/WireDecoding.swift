import Foundation
import MailslotCrypto

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
        // The subscription's frames come by the thousand a second and are flat objects of
        // strings: read those directly. Anything else (a ttl, nesting, a missing type) takes
        // JSONDecoder, so the result is always the one it would give (the wire-decode fuzz target
        // checks that).
        if type == ClientFrame.self, let members = StrictJSON.flatStringObject(Array(data)),
           let frame = ClientFrame(flatMembers: members) as? T {
            return frame
        }
        do { return try JSONDecoder().decode(type, from: data) } catch { throw .shape }
    }
}
