import AsyncHTTPClient
import Foundation
import MailslotWire
import NIOCore
import NIOHTTP1

/// The relay's blob routes (spec/protocol.md §4.15–§4.21) over AsyncHTTPClient, for the measured
/// traffic of `mailslot-bench transfer`: part bodies go out as slices of one buffer (no copy) and
/// downloads are consumed as they stream in, so the bench's own memory stays at a part or so.
final class BlobHTTP: Sendable {
    /// `http://host:port`, without a trailing slash.
    let base: String
    private let client: HTTPClient

    init(base: String, connections: Int) {
        self.base = base.hasSuffix("/") ? String(base.dropLast()) : base
        var configuration = HTTPClient.Configuration(timeout: .init(connect: .seconds(10), read: .seconds(120)))
        configuration.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: max(8, connections))
        configuration.decompression = .disabled
        client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    /// Must be called once the bench is done with it (AsyncHTTPClient checks).
    func shutdown() async {
        try? await client.shutdown()
    }

    /// `POST /v1/blobs`: 201 (or 200 for a repeat).
    func create(id: String, size: Int64, recipients: [String], session: String) async throws -> BlobRecord {
        let body = try JSONEncoder().encode(BlobCreateRequest(id: id, size: size, recipients: recipients))
        let (status, answer) = try await call(.POST, "/v1/blobs", session: session, json: ByteBuffer(bytes: body))
        guard status == 201 || status == 200 else { throw refusal("creating blob \(id)", status, answer) }
        return try JSONDecoder().decode(BlobRecord.self, from: Data(buffer: answer))
    }

    /// `PUT /v1/blobs/{id}/parts/{n}` with `body` (exactly the part's bytes) and its digest.
    func putPart(id: String, number: Int, body: ByteBuffer, digest: [UInt8], session: String) async throws {
        var request = HTTPClientRequest(url: base + "/v1/blobs/\(id)/parts/\(number)")
        request.method = .PUT
        request.headers.add(name: "Authorization", value: "Bearer \(session)")
        request.headers.add(name: "Content-Type", value: "application/octet-stream")
        request.headers.add(name: BlobLayout.digestHeader, value: Base64URL.encode(digest))
        request.body = .bytes(body)
        let response = try await execute(request, "uploading part \(number) of \(id)")
        let answer = try await response.body.collect(upTo: 1 << 20)
        guard response.status.code == 200 else { throw refusal("uploading part \(number) of \(id)", Int(response.status.code), answer) }
    }

    /// `GET /v1/blobs/{id}/content` (whole, or `range`), handing each received buffer to `consume`
    /// as it arrives; the number of bytes received.
    func download(id: String, range: Range<Int64>? = nil, session: String,
                  consume: (ByteBuffer) throws -> Void) async throws -> Int64 {
        var request = HTTPClientRequest(url: base + "/v1/blobs/\(id)/content")
        request.headers.add(name: "Authorization", value: "Bearer \(session)")
        if let range { request.headers.add(name: "Range", value: "bytes=\(range.lowerBound)-\(range.upperBound - 1)") }
        let response = try await execute(request, "downloading \(id)")
        guard response.status.code == (range == nil ? 200 : 206) else {
            throw refusal("downloading \(id)", Int(response.status.code), try await response.body.collect(upTo: 1 << 20))
        }
        var received: Int64 = 0
        for try await buffer in response.body {
            received += Int64(buffer.readableBytes)
            try consume(buffer)
        }
        return received
    }

    /// `POST /v1/blobs/{id}/ack`: 204.
    func acknowledge(id: String, session: String) async throws {
        let (status, answer) = try await call(.POST, "/v1/blobs/\(id)/ack", session: session, json: nil)
        guard status == 204 else { throw refusal("acknowledging \(id)", status, answer) }
    }

    /// `GET /v1/blobs/{id}`: the status only (404 once erased).
    func status(id: String, session: String) async throws -> Int {
        try await call(.GET, "/v1/blobs/\(id)", session: session, json: nil).status
    }

    private func call(_ method: HTTPMethod, _ path: String, session: String, json: ByteBuffer?) async throws -> (status: Int, body: ByteBuffer) {
        var request = HTTPClientRequest(url: base + path)
        request.method = method
        request.headers.add(name: "Authorization", value: "Bearer \(session)")
        if let json {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(json)
        }
        let response = try await execute(request, "\(method) \(path)")
        return (Int(response.status.code), try await response.body.collect(upTo: 1 << 20))
    }

    private func execute(_ request: HTTPClientRequest, _ what: String) async throws -> HTTPClientResponse {
        do { return try await client.execute(request, timeout: .seconds(300)) } catch {
            throw BenchFailure.unreachable("\(what): no answer from the relay at \(base) (\(error))")
        }
    }

    private func refusal(_ what: String, _ status: Int, _ body: ByteBuffer) -> BenchFailure {
        let code = (try? JSONDecoder().decode(Problem.self, from: Data(buffer: body))).map { " \($0.code.rawValue)" } ?? ""
        return .failed("\(what) was refused: HTTP \(status)\(code)")
    }
}
