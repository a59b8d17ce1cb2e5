import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import MailslotWire

// The blob endpoints (spec/protocol.md §4.15–§4.21; docs/design/attachments.md §2.2). One part per
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
        let (data, _) = try await exchange("PUT", "/v1/blobs/\(id)/parts/\(number)", session: session, body: bytes,
                                           headers: ["Content-Type": "application/octet-stream", BlobLayout.digestHeader: digest])
        return try decode(BlobRecord.self, data)
    }

    /// `GET /v1/blobs/{id}/content` with `Range: bytes=range`: those ciphertext bytes. An answer
    /// that is not exactly the range asked for (another range, a whole body, another total) is
    /// refused as not the protocol.
    func blobContent(_ id: String, range: Range<Int64>, size: Int64, session: String) async throws -> Data {
        let (data, response) = try await exchange("GET", "/v1/blobs/\(id)/content", session: session,
                                                  headers: ["Range": "bytes=\(range.lowerBound)-\(range.upperBound - 1)"])
        let expected = "bytes \(range.lowerBound)-\(range.upperBound - 1)/\(size)"
        let whole = range.lowerBound == 0 && range.upperBound == size && response.statusCode == 200
        guard whole || (response.statusCode == 206 && response.value(forHTTPHeaderField: "Content-Range") == expected),
              Int64(data.count) == range.count else {
            throw ClientError.invalidResponse("the relay answered \(data.count) bytes (HTTP \(response.statusCode)) for \(expected)")
        }
        return data
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
