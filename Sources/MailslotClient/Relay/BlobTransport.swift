import AsyncHTTPClient
import Foundation
import MailslotWire
import NIOCore
import NIOHTTP1

/// The HTTP client that carries blob parts both ways (`PUT /v1/blobs/{id}/parts/{n}`, ranged
/// `GET /v1/blobs/{id}/content`): AsyncHTTPClient, as URLSession on Linux sends 8 MiB bodies at
/// well under what the relay takes (docs/performance.md, "Files"). Every other call stays on
/// URLSession (RelayAPI.swift).
///
/// One client for the process, never shut down, like AsyncHTTPClient's own `HTTPClient.shared`
/// (which is not used for its browser-like settings: it follows redirects and decompresses):
/// a `MailslotClient` has no end of life to shut it down at, and a client that is never released
/// never needs it.
enum BlobTransport {
    /// The shared client: no redirects followed (a blob route never redirects, and the session
    /// token must go to the relay only), no decompression (ciphertext does not compress, and a
    /// relay must not make the client inflate anything), idle timeouts as URLSession's 15 s.
    static let client: HTTPClient = {
        var configuration = HTTPClient.Configuration(redirectConfiguration: .disallow,
                                                     timeout: .init(connect: .seconds(15), read: .seconds(15), write: .seconds(15)))
        configuration.decompression = .disabled
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }()

    /// The longest a whole part request may take (a part is 8 MiB by default: at 30 KB/s).
    static let requestTimeout: TimeAmount = .seconds(300)

    /// Sends `request` and returns the answer's status, head and body (at most `limit` bytes;
    /// more is refused as not the protocol). No answer: ``ClientError/unreachable(_:)``; an
    /// answer other than 2xx: ``ClientError/relay(_:)`` with its problem.
    static func exchange(_ request: HTTPClientRequest, host: String, limit: Int) async throws -> (status: Int, headers: HTTPHeaders, body: ByteBuffer) {
        let response: HTTPClientResponse, body: ByteBuffer
        do {
            response = try await client.execute(request, timeout: requestTimeout)
            body = try await response.body.collect(upTo: limit)
        } catch is NIOTooManyBytesError {
            throw ClientError.invalidResponse(detail: "the relay answered more than \(limit) bytes")
        } catch {
            throw ClientError.unreachable(reason: "\(host): \(error)")
        }
        let status = Int(response.status.code)
        guard (200..<300).contains(status) else {
            if let problem = try? RelayAnswers.decode(Problem.self, from: Data(body.readableBytesView)) { throw ClientError.relay(problem: problem) }
            throw ClientError.invalidResponse(detail: "HTTP \(status) without a problem body")
        }
        return (status, response.headers, body)
    }
}
