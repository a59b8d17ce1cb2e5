import Foundation
import Hummingbird
import MailslotWire

/// The push registration routes of spec/protocol.md §4.22–§4.24 (spec/push.md §2). Each handler
/// authenticates, then calls ``PushService``, which runs every check and asks the rules.
struct PushRoutes: Sendable {
    let sessions: SessionService
    let push: PushService
    let configuration: RelayConfiguration

    func add(to router: Router<RelayContext>) {
        router.put("/v1/users/:uid/push/:id") { request, context in
            let principal = try await principal(request)
            // Media type, size and strict JSON first (spec §9); the shape is the service's, after the rule.
            let body = try await JSONBody.bytes(of: request, limit: PushGrammar.maximumBodyBytes, maxDepth: configuration.maxJSONDepth)
            let (registration, created) = try await push.put(principal, owner: try context.uid(), id: try context.parameter("id"), body: body,
                                                             now: configuration.clock.now())
            return JSONBody.response(registration, status: created ? .created : .ok)
        }
        router.get("/v1/users/:uid/push") { request, context in
            JSONBody.response(try await push.list(try await principal(request), owner: try context.uid()))
        }
        router.get("/v1/users/:uid/push/:id") { request, context in
            JSONBody.response(try await push.registration(try await principal(request), owner: try context.uid(), id: try context.parameter("id")))
        }
        router.delete("/v1/users/:uid/push/:id") { request, context in
            try await push.delete(try await principal(request), owner: try context.uid(), id: try context.parameter("id"))
            return Response(status: .noContent)
        }
        router.get("/v1/push") { request, _ in
            JSONBody.response(try push.info(try await principal(request)))
        }
    }

    private func principal(_ request: Request) async throws -> SessionService.Principal {
        try await sessions.authenticate(authorization: request.headers[.authorization], now: configuration.clock.now())
    }
}
