import Foundation
import HTTPTypes
import Hummingbird
import MailslotWire

extension Problem: ResponseGenerator, HTTPResponseError {
    /// The HTTP status of the problem's code.
    public var status: HTTPResponse.Status { .init(code: code.status) }

    /// The `application/problem+json` answer, with `Retry-After` when rate-limited.
    public func response(from request: Request, context: some RequestContext) throws -> Response {
        var headers: HTTPFields = [.contentType: "application/problem+json"]
        if let retryAfter { headers[.retryAfter] = String(retryAfter) }
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: JSONBody.encode(self))))
    }
}

extension Problem {
    /// A write refused, or failed, for lack of disk space.
    static let storageFull = Problem(.storageFull, "the relay is short of disk space; try later", retryAfter: 60)

    /// A request the relay could not serve because its database is unreachable.
    static let unavailable = Problem(.unavailable, "the relay cannot reach its database; try again shortly", retryAfter: 2)

    /// A request that found every database connection busy for the lease timeout, while the
    /// database answered others (spec/protocol.md §7.3): this one request is refused, the relay
    /// is not in outage mode.
    static let busy = Problem(.unavailable, "the relay is busy; try again shortly", retryAfter: 1)

    /// What a client is told of an error: a problem as it is, a full disk as `storage_full`, an
    /// unreachable or busy database as `unavailable`, anything else as `internal` (whose cause
    /// stays in the relay's log, by type only).
    static func answering(_ error: any Error) -> Problem {
        switch error {
        case let problem as Problem: problem
        case StoreFailure.storageFull: .storageFull
        case StoreFailure.unavailable: .unavailable
        case StoreFailure.busy: .busy
        default: Problem(.internalError)
        }
    }
}

/// Turns every error into a problem: Hummingbird's own (unknown route, body too large) into the
/// matching code, anything unexpected into `internal` — logged by type only, never with content.
struct ProblemMiddleware: RouterMiddleware {
    typealias Context = RelayContext

    func handle(_ request: Request, context: RelayContext,
                next: (Request, RelayContext) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let problem as Problem {
            throw problem
        } catch let failure as StoreFailure {
            throw Problem.answering(failure)
        } catch let error as HTTPError {
            switch error.status {
            case .notFound: throw Problem(.notFound, "no such route")
            case .contentTooLarge: throw Problem(.bodyTooLarge, "the request body is too large")
            case .unsupportedMediaType: throw Problem(.unsupportedMediaType, "send application/json")
            case .badRequest: throw Problem(.badRequest)
            default:
                context.logger.error("request failed", metadata: ["status": "\(error.status.code)"])
                throw Problem(.internalError)
            }
        } catch {
            context.logger.error("request failed", metadata: ["error.type": "\(type(of: error))"])
            throw Problem(.internalError)
        }
    }
}
