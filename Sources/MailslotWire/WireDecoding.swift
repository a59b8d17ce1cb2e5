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
        if type == ClientFrame.self, let frame = data.withUnsafeBytes({ flatFrame($0.bindMemory(to: UInt8.self), maxDepth: maxDepth) }) {
            return frame as! T
        }
        try validate(data, maxDepth: maxDepth)
        do { return try JSONDecoder().decode(type, from: data) } catch { throw .shape }
    }

    /// A subscription frame from its text: ``decode(_:from:maxDepth:)`` without copying the text.
    public static func clientFrame(_ text: String, maxDepth: Int) throws(WireDecodingError) -> ClientFrame {
        var text = text
        if let frame = text.withUTF8({ flatFrame($0, maxDepth: maxDepth) }) { return frame }
        return try decode(ClientFrame.self, from: Data(text.utf8), maxDepth: maxDepth)
    }

    /// The subscription's frames come by the thousand a second and are flat objects of strings:
    /// those are checked and read in one pass. Anything else (a ttl, nesting, a missing type, any
    /// refusal) is nil here and takes `validate` and JSONDecoder, so the result is always the one
    /// they give (the wire-decode fuzz target checks that).
    private static func flatFrame(_ bytes: UnsafeBufferPointer<UInt8>, maxDepth: Int) -> ClientFrame? {
        guard maxDepth >= 1, let members = StrictJSON.flatStringObject(bytes) else { return nil }
        return ClientFrame(flatMembers: members)
    }
}
