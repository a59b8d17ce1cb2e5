import Foundation
import Hummingbird
import NIOCore
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

    /// A JSON response written in chunks as the client takes them, holding `permit` (a read of
    /// a mailbox) until all of it has been taken by the socket, or the connection is gone.
    static func response<T: Sendable & Encodable>(_ read: MailboxService.Read<T>, on channel: any Channel) -> Response {
        let bytes = encode(read.value)
        let permit = read.permit
        return Response(status: .ok, headers: [.contentType: "application/json"],
                        body: .init(contentLength: bytes.count) { writer in
                            var offset = 0
                            while offset < bytes.count {
                                let end = min(offset + chunkBytes, bytes.count)
                                try await writer.write(ByteBuffer(bytes: bytes[offset..<end]))
                                offset = end
                                try await untilWritable(channel)
                            }
                            try await writer.finish(nil)
                            try await untilWritable(channel)
                            withExtendedLifetime(permit) {}
                        })
    }

    /// Waits until the writes made so far are the channel's, then while `channel` has more queued
    /// than its high watermark. An async writer learns of NIO's back-pressure only once the event
    /// loop has run its writes: a fast producer would queue a whole page in memory first, and a
    /// client that never reads would hold it there.
    ///
    /// A write through Hummingbird's writer returns once it is queued for the event loop, not once
    /// the channel has it, and the channel's writability counts it only from then on. So first a
    /// task on the channel's loop, which runs after the writes queued before it; then writability.
    /// Without that turn, a producer that ran while the loop was busy (two cores, many relays)
    /// queued a whole page, saw the channel still writable, and ended its read with nothing sent:
    /// a client that never reads then held a page without a read, and another read started.
    /// Writability is an atomic flag of the channel, so a short poll, only while it is full,
    /// costs nothing in the common case.
    static func untilWritable(_ channel: any Channel) async throws {
        try await channel.eventLoop.submit {}.get()
        while !channel.isWritable {
            guard channel.isActive else { throw ChannelError.ioOnClosedChannel }
            try await Task.sleep(for: .milliseconds(2))
        }
    }

    /// The size of the chunks a streamed answer is written in.
    static let chunkBytes = 64 * 1024

    /// Raw JSON bytes (stored documents and bundles go back exactly as they were put).
    static func response(raw: Data) -> Response {
        Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: raw)))
    }

    /// The request body, at most `limit` bytes, checked to be strict JSON within `maxDepth`.
    static func bytes(of request: Request, limit: Int, maxDepth: Int) async throws -> Data {
        let data = try await raw(request, limit: limit)
        do { try WireDecoding.validate(data, maxDepth: maxDepth) } catch { throw problem(error) }
        return data
    }

    /// Decodes the body as `T` (``WireDecoding``, the path the fuzzer runs).
    static func decode<T: Decodable>(_ type: T.Type, from request: Request, limit: Int, maxDepth: Int) async throws -> T {
        let data = try await raw(request, limit: limit)
        do { return try WireDecoding.decode(type, from: data, maxDepth: maxDepth) } catch { throw problem(error) }
    }

    /// Decodes the body as `T` like ``decode(_:from:limit:maxDepth:)``, or nil when it is empty
    /// (for requests whose body is optional).
    static func decodeIfPresent<T: Decodable>(_ type: T.Type, from request: Request, limit: Int, maxDepth: Int) async throws -> T? {
        let data = try await raw(request, limit: limit)
        guard !data.isEmpty else { return nil }
        do { return try WireDecoding.decode(type, from: data, maxDepth: maxDepth) } catch { throw problem(error) }
    }

    /// The body, if it is declared JSON (or undeclared) and at most `limit` bytes.
    private static func raw(_ request: Request, limit: Int) async throws -> Data {
        if let type = request.headers[.contentType],
           type.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased() != "application/json" {
            throw Problem(.unsupportedMediaType, "send Content-Type: application/json")
        }
        if let length = request.headers[.contentLength].flatMap(Int.init), length > limit {
            throw Problem(.bodyTooLarge, "the request body is at most \(limit) bytes")
        }
        var request = request
        do { return Data(try await request.collectBody(upTo: limit).readableBytesView) } catch {
            throw Problem(.bodyTooLarge, "the request body is at most \(limit) bytes")
        }
    }

    private static func problem(_ error: WireDecodingError) -> Problem {
        switch error {
        case .tooDeep(let limit): Problem(.invalidJSON, "JSON is nested deeper than \(limit) levels")
        case .duplicateMember: Problem(.invalidJSON, "an object repeats a member name")
        case .syntax: Problem(.invalidJSON, "the body is not JSON (RFC 8259)")
        case .shape: Problem(.invalidJSON, "the body is not the expected JSON object")
        }
    }
}
