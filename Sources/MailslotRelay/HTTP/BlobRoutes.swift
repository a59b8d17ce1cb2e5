import Foundation
import HTTPTypes
import Hummingbird
import MailslotWire
import NIOCore

/// The blob routes of spec/protocol.md §4.15–§4.21. Each handler authenticates, then calls
/// ``BlobService``, which runs every check and asks the rules; none decides anything itself.
/// Part bodies stream from the socket into the storage, and downloads from the storage to the
/// socket at the socket's pace: no handler collects a blob body.
struct BlobRoutes: Sendable {
    let sessions: SessionService
    let blobs: BlobService
    let configuration: RelayConfiguration

    /// The header carrying a part's digest.
    static let digestField = HTTPField.Name(BlobLayout.digestHeader)!

    func add(to router: Router<RelayContext>) {
        router.post("/v1/blobs") { request, _ in
            let principal = try await principal(request)
            let body = try await JSONBody.decode(BlobCreateRequest.self, from: request, limit: blobs.createBodyBytes,
                                                 maxDepth: configuration.maxJSONDepth)
            let (record, created) = try await blobs.create(principal, body)
            return JSONBody.response(record, status: created ? .created : .ok)
        }
        router.get("/v1/blobs/:id") { request, context in
            JSONBody.response(try await blobs.record(try await principal(request), id: try context.parameter("id")))
        }
        router.put("/v1/blobs/:id/parts/:n") { request, context in
            let principal = try await principal(request)
            let headers = BlobService.PartHeaders(contentType: request.headers[.contentType], contentLength: request.headers[.contentLength],
                                                  chunked: request.headers[.transferEncoding] != nil,
                                                  digest: request.headers[Self.digestField])
            let upload = try await blobs.startUpload(principal, id: try context.parameter("id"), part: try context.parameter("n"),
                                                     headers: headers)
            return JSONBody.response(try await blobs.upload(upload, body: request.body))
        }
        router.get("/v1/blobs/:id/content") { request, context in
            let principal = try await principal(request)
            let download: BlobService.Download
            do {
                download = try await blobs.startDownload(principal, id: try context.parameter("id"), range: request.headers[.range])
            } catch let refusal as BlobService.UnsatisfiableRange {
                var response = try Problem(.invalidRange, "send one Range within bytes 0-\(refusal.size - 1)").response(from: request, context: context)
                response.headers[.contentRange] = "bytes */\(refusal.size)"
                return response
            }
            let range = download.range
            var headers: HTTPFields = [.contentType: "application/octet-stream", .acceptRanges: "bytes", .cacheControl: "no-store"]
            if download.partial { headers[.contentRange] = "bytes \(range.lowerBound)-\(range.upperBound - 1)/\(download.blob.size)" }
            let channel = context.channel
            return Response(status: download.partial ? .partialContent : .ok, headers: headers,
                            body: .init(contentLength: range.count) { [blobs] writer in
                                try await blobs.read(download) { buffer in
                                    try await writer.write(buffer)
                                    // At the socket's pace: a reader that does not read holds one chunk.
                                    try await JSONBody.untilWritable(channel)
                                }
                                try await writer.finish(nil)
                            })
        }
        router.post("/v1/blobs/:id/ack") { request, context in
            try await blobs.acknowledge(try await principal(request), id: try context.parameter("id"))
            return Response(status: .noContent)
        }
        router.delete("/v1/blobs/:id") { request, context in
            try await blobs.delete(try await principal(request), id: try context.parameter("id"))
            return Response(status: .noContent)
        }
        router.get("/v1/users/:uid/blobs") { request, context in
            let principal = try await principal(request)
            let query = request.uri.queryParameters
            let limit = try query.get("limit").map { text -> Int in
                guard let value = Int(text) else { throw Problem(.badRequest, "limit must be a number") }
                return value
            }
            return JSONBody.response(try await blobs.list(principal, owner: try context.uid(), role: query.get("role"),
                                                          after: query.get("after"), limit: limit))
        }
    }

    private func principal(_ request: Request) async throws -> SessionService.Principal {
        try await sessions.authenticate(authorization: request.headers[.authorization], now: configuration.clock.now())
    }
}
