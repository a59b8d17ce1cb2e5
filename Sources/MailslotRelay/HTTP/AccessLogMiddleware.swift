import Hummingbird
import Logging

/// One log line per request: method, route template, status, duration. The route template
/// (`/v1/users/{uid}/messages/{id}`), not the path, so no uid or message id is logged; and never
/// a header or a body, so no token, session secret or envelope is. The same line feeds the
/// request metrics, with the same labels.
struct AccessLogMiddleware: RouterMiddleware {
    typealias Context = RelayContext
    let metrics: RelayMetrics

    func handle(_ request: Request, context: RelayContext,
                next: (Request, RelayContext) async throws -> Response) async throws -> Response {
        let start = ContinuousClock.now
        var status = 500
        defer {
            let elapsed = ContinuousClock.now - start
            let route = context.endpointPath ?? "unmatched"
            metrics.request(method: request.method.rawValue, route: route, status: status, duration: elapsed)
            context.logger.info("request", metadata: [
                "method": "\(request.method)",
                "route": "\(route)",
                "status": "\(status)",
                "ms": "\(elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000)",
            ])
        }
        do {
            let response = try await next(request, context)
            status = response.status.code
            return response
        } catch let error as any HTTPResponseError {
            status = error.status.code
            throw error
        }
    }
}
