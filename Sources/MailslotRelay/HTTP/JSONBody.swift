import Foundation
import Hummingbird
import MailslotWire

/// Reading and writing JSON bodies with the relay's limits: size first (before reading it all),
/// then nesting depth (before parsing), then the type.
enum JSONBody {
    static func encode(_ value: some Encodable) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Array((try? encoder.encode(value)) ?? Data(#"{"code":"internal"}"#.utf8))
    }

    /// A JSON response with `status`.
    static func response(_ value: some Encodable, status: HTTPResponse.Status = .ok) -> Response {
        Response(status: status, headers: [.contentType: "application/json"],
                 body: .init(byteBuffer: ByteBuffer(bytes: encode(value))))
    }

    /// Raw JSON bytes (stored documents and bundles go back exactly as they were put).
    static func response(raw: Data) -> Response {
        Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: raw)))
    }

    /// The request body, at most `limit` bytes, checked for nesting depth.
    static func bytes(of request: Request, limit: Int, maxDepth: Int) async throws -> Data {
        if let type = request.headers[.contentType],
           type.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased() != "application/json" {
            throw Problem(.unsupportedMediaType, "send Content-Type: application/json")
        }
        if let length = request.headers[.contentLength].flatMap(Int.init), length > limit {
            throw Problem(.bodyTooLarge, "the request body is at most \(limit) bytes")
        }
        var request = request
        let buffer: ByteBuffer
        do { buffer = try await request.collectBody(upTo: limit) } catch {
            throw Problem(.bodyTooLarge, "the request body is at most \(limit) bytes")
        }
        let data = Data(buffer.readableBytesView)
        try checkStrict(data, maxDepth: maxDepth)
        return data
    }

    /// Decodes the body as `T`.
    static func decode<T: Decodable>(_ type: T.Type, from request: Request, limit: Int, maxDepth: Int) async throws -> T {
        try decode(type, from: try await bytes(of: request, limit: limit, maxDepth: maxDepth))
    }

    static func decode<T: Decodable>(_ type: T.Type, from data: Data) throws -> T {
        do { return try JSONDecoder().decode(type, from: data) } catch {
            throw Problem(.invalidJSON, "the body is not the expected JSON object")
        }
    }

    /// Refuses anything but strict JSON (see ``StrictJSON``) nested at most `max` deep, before
    /// a parser sees it: a parser's recursion is what deep nesting attacks.
    static func checkStrict(_ data: Data, maxDepth max: Int) throws {
        do { try StrictJSON.validate(data, maxDepth: max) } catch {
            switch error {
            case .tooDeep: throw Problem(.invalidJSON, "JSON is nested deeper than \(max) levels")
            case .duplicateMember: throw Problem(.invalidJSON, "an object repeats a member name")
            case .syntax: throw Problem(.invalidJSON, "the body is not JSON (RFC 8259)")
            }
        }
    }
}
