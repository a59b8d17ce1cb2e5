import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import AsyncHTTPClient
import MailslotWire
import NIOCore

// The blob endpoints (spec/protocol.md §4.15–§4.21; docs/design/attachments.md §2.2). Parts go
// both ways over AsyncHTTPClient (BlobTransport.swift), the rest over URLSession. One part per
// request both ways, so what a transfer holds in memory is one part (8 MiB by default), whatever
// the file's size.
extension RelayAPI {
    /// `POST /v1/blobs`: creates blob `request.id`; a repeat of the same request answers the
    /// stored record (a create whose answer was lost).
    func createBlob(_ request: BlobCreateRequest, session: String) async throws -> BlobRecord {
        try decode(BlobRecord.self, try await call("POST", "/v1/blobs", session: session, body: JSONEncoder().encode(request)))
    }

    /// `GET /v1/blobs/{id}`: where the blob stands (for its author: the parts received).
    func blob(_ id: String, session: String) async throws -> BlobRecord {
        try decode(BlobRecord.self, try await call("GET", "/v1/blobs/\(id)", session: session))
    }

    /// `PUT /v1/blobs/{id}/parts/{n}`: uploads part `number` with its BLAKE2b-256 digest, which the
    /// relay checks before storing it (`digest`, computed here if the caller has none). Repeating a
    /// stored part with the same bytes is answered 200.
    func putPart(_ id: String, number: Int, bytes: Data, digest known: [UInt8]? = nil, session: String) async throws -> BlobRecord {
        let digest = Base64URL.encode(known ?? bytes.withUnsafeBytes { buffer in
            let hasher = BLAKE2bHasher()
            hasher.update(buffer)
            return hasher.finalize()
        })
        var request = HTTPClientRequest(url: try blobURL("/v1/blobs/\(id)/parts/\(number)"))
        request.method = .PUT
        request.headers.add(name: "Authorization", value: "Bearer \(session)")
        request.headers.add(name: "Content-Type", value: "application/octet-stream")
        request.headers.add(name: BlobLayout.digestHeader, value: digest)
        request.body = .bytes(ByteBuffer(bytes: bytes))
        let answer = try await BlobTransport.exchange(request, host: base.host ?? "relay", limit: 1 << 20)
        return try decode(BlobRecord.self, Data(answer.body.readableBytesView))
    }

    /// `GET /v1/blobs/{id}/content` with `Range: bytes=range`: those ciphertext bytes. An answer
    /// that is not exactly the range asked for (another range, a whole body, another total) is
    /// refused as not the protocol.
    func blobContent(_ id: String, range: Range<Int64>, size: Int64, session: String) async throws -> Data {
        var request = HTTPClientRequest(url: try blobURL("/v1/blobs/\(id)/content"))
        request.headers.add(name: "Authorization", value: "Bearer \(session)")
        request.headers.add(name: "Range", value: "bytes=\(range.lowerBound)-\(range.upperBound - 1)")
        let answer = try await BlobTransport.exchange(request, host: base.host ?? "relay", limit: Int(range.count))
        let expected = "bytes \(range.lowerBound)-\(range.upperBound - 1)/\(size)"
        let whole = range.lowerBound == 0 && range.upperBound == size && answer.status == 200
        guard whole || (answer.status == 206 && answer.headers.first(name: "Content-Range") == expected),
              Int64(answer.body.readableBytes) == range.count else {
            throw ClientError.invalidResponse(detail: "the relay answered \(answer.body.readableBytes) bytes (HTTP \(answer.status)) for \(expected)")
        }
        return Data(answer.body.readableBytesView)
    }

    /// The URL of a blob route, as ``exchange(_:_:session:body:headers:)`` forms it (every id in
    /// `path` was checked against the identifier grammar: no escaping needed).
    private func blobURL(_ path: String) throws -> String {
        guard let url = URL(string: base.absoluteString.trimmingTrailingSlash + path) else {
            throw ClientError.invalidResponse(detail: "cannot form a URL for \(path)")
        }
        return url.absoluteString
    }

    /// `POST /v1/blobs/{id}/ack`: this recipient has the whole file; the relay erases the blob
    /// once every recipient has said so.
    func acknowledgeBlob(_ id: String, session: String) async throws {
        _ = try await call("POST", "/v1/blobs/\(id)/ack", session: session)
    }

    /// `DELETE /v1/blobs/{id}`: the author erases the blob for everyone.
    func deleteBlob(_ id: String, session: String) async throws {
        _ = try await call("DELETE", "/v1/blobs/\(id)", session: session)
    }
}
