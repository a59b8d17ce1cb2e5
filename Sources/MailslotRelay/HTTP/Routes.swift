import Foundation
import Hummingbird
import MailslotWire

/// Every HTTP route of spec/protocol.md. Each handler authenticates, then calls ``MailboxService``,
/// which asks the rules; none decides access itself. spec/openapi.yaml lists the same routes,
/// and a test keeps the two in step.
struct Routes: Sendable {
    let sessions: SessionService
    let mailboxes: MailboxService
    let configuration: RelayConfiguration

    func add(to router: Router<RelayContext>) {
        router.post("/v1/sessions") { request, _ in
            let body = try await JSONBody.decode(SignInRequest.self, from: request, limit: 16 * 1024, maxDepth: configuration.maxJSONDepth)
            return JSONBody.response(try await sessions.signIn(token: body.token, now: configuration.clock.now()), status: .created)
        }
        router.post("/v1/sessions/refresh") { request, _ in
            let body = try await JSONBody.decode(RefreshRequest.self, from: request, limit: 4096, maxDepth: configuration.maxJSONDepth)
            return JSONBody.response(try await sessions.refresh(body.refresh, now: configuration.clock.now()), status: .created)
        }
        router.delete("/v1/sessions/current") { request, _ in
            try await sessions.signOut(try await principal(request))
            return Response(status: .noContent)
        }

        router.get("/v1/users/:uid") { request, context in
            JSONBody.response(raw: try await mailboxes.document(try await principal(request), owner: try context.uid()))
        }
        router.put("/v1/users/:uid") { request, context in
            let principal = try await principal(request)
            let body = try await JSONBody.bytes(of: request, limit: configuration.maxDocumentBytes, maxDepth: configuration.maxJSONDepth)
            try await mailboxes.putDocument(principal, owner: try context.uid(), body: body, now: configuration.clock.now())
            return Response(status: .noContent)
        }

        router.delete("/v1/users/:uid") { request, context in
            try await mailboxes.deleteDocument(try await principal(request), owner: try context.uid())
            return Response(status: .noContent)
        }

        router.get("/v1/users/:uid/keys") { request, context in
            JSONBody.response(raw: try await mailboxes.keyBundle(try await principal(request), owner: try context.uid()))
        }
        router.put("/v1/users/:uid/keys") { request, context in
            let principal = try await principal(request)
            let body = try await JSONBody.bytes(of: request, limit: 4096, maxDepth: configuration.maxJSONDepth)
            try await mailboxes.putKeyBundle(principal, owner: try context.uid(), body: body, now: configuration.clock.now())
            return Response(status: .noContent)
        }

        router.delete("/v1/users/:uid/keys") { request, context in
            try await mailboxes.deleteKeyBundle(try await principal(request), owner: try context.uid())
            return Response(status: .noContent)
        }

        router.post("/v1/users/:uid/prekeys") { request, context in
            let principal = try await principal(request)
            let body = try await JSONBody.decode(PrekeyUpload.self, from: request, limit: Self.prekeyUploadBytes,
                                                 maxDepth: configuration.maxJSONDepth)
            return JSONBody.response(try await mailboxes.uploadPrekeys(principal, owner: try context.uid(), body, now: configuration.clock.now()))
        }
        router.get("/v1/users/:uid/prekeys") { request, context in
            JSONBody.response(try await mailboxes.prekeyCount(try await principal(request), owner: try context.uid()))
        }
        router.delete("/v1/users/:uid/prekeys") { request, context in
            try await mailboxes.deletePrekeys(try await principal(request), owner: try context.uid())
            return Response(status: .noContent)
        }
        router.post("/v1/users/:uid/prekeys/claim") { request, context in
            let principal = try await principal(request)
            // No body, or an empty object: nothing to say yet, but room to say it later.
            _ = try await JSONBody.decodeIfPresent(PrekeyClaimRequest.self, from: request, limit: 4096, maxDepth: configuration.maxJSONDepth)
            return JSONBody.response(try await mailboxes.claimPrekey(principal, owner: try context.uid(), now: configuration.clock.now()))
        }

        router.put("/v1/users/:uid/messages/:id") { request, context in
            let principal = try await principal(request)
            let body = try await JSONBody.decode(SendRequest.self, from: request, limit: configuration.maxBodyBytes,
                                                 maxDepth: configuration.maxJSONDepth)
            let (record, created) = try await mailboxes.send(principal, to: try context.uid(), id: try context.messageID(),
                                                             envelope: body.envelope, ttlSeconds: body.ttlSeconds, keyID: body.keyID,
                                                             wake: body.wake ?? true, now: configuration.clock.now()).value
            return JSONBody.response(record, status: created ? .created : .ok)
        }
        // A send to many (spec/protocol.md §4.25): its body may be far larger than any other JSON
        // body, so the relay-wide budget of such bodies is reserved before it is read.
        router.post("/v1/messages") { request, _ in
            let principal = try await principal(request)
            let limit = configuration.maxBatchBytes
            let declared = request.headers[.contentLength].flatMap(Int.init)
            let reservation = try await mailboxes.batchBudget.reserve(min(declared ?? limit, limit))
            defer { reservation.release() }
            let body = try await JSONBody.decode(BatchCreateRequest.self, from: request, limit: limit, maxDepth: configuration.maxJSONDepth)
            let results = try await mailboxes.sendMany(principal, body, now: configuration.clock.now()).value
            return JSONBody.response(BatchResponse(results: results))
        }
        router.get("/v1/users/:uid/messages") { request, context in
            let principal = try await principal(request)
            let after = request.uri.queryParameters.get("after")
            return JSONBody.response(try await mailboxes.list(principal, owner: try context.uid(), after: after, limit: try limit(request),
                                                              now: configuration.clock.now()), on: context.channel)
        }
        router.get("/v1/users/:uid/messages/:id") { request, context in
            JSONBody.response(try await mailboxes.message(try await principal(request), owner: try context.uid(),
                                                          id: try context.messageID(), now: configuration.clock.now()), on: context.channel)
        }
        router.patch("/v1/users/:uid/messages/:id") { request, context in
            let principal = try await principal(request)
            let patch = try await JSONBody.decode(MessagePatch.self, from: request, limit: 4096, maxDepth: configuration.maxJSONDepth)
            return JSONBody.response(try await mailboxes.patch(principal, owner: try context.uid(), id: try context.messageID(),
                                                               patch, now: configuration.clock.now()))
        }
        router.delete("/v1/users/:uid/messages/:id") { request, context in
            try await mailboxes.delete(try await principal(request), owner: try context.uid(), id: try context.messageID(), now: configuration.clock.now()).value
            return Response(status: .noContent)
        }

        router.get("/v1/users/:uid/blocked") { request, context in
            let principal = try await principal(request)
            return JSONBody.response(try await mailboxes.blockList(principal, owner: try context.uid(), after: request.uri.queryParameters.get("after"),
                                                            limit: try limit(request)))
        }
        router.put("/v1/users/:uid/blocked/:author") { request, context in
            try await mailboxes.block(try await principal(request), owner: try context.uid(), author: try context.parameter("author"),
                                      now: configuration.clock.now())
            return Response(status: .noContent)
        }
        router.delete("/v1/users/:uid/blocked/:author") { request, context in
            try await mailboxes.unblock(try await principal(request), owner: try context.uid(), author: try context.parameter("author"))
            return Response(status: .noContent)
        }

        // Reached when the WebSocket upgrade was not accepted: say why, as for any request.
        router.get("/v1/users/:uid/subscribe") { request, context -> Response in
            try mailboxes.authorizeSubscription(try await principal(request), owner: try context.uid())
            throw Problem(.badRequest, "this is a WebSocket endpoint: send an Upgrade: websocket request")
        }
    }

    /// The largest prekey upload body: ``PrekeyUpload/maximumBatch`` entries of about 70 bytes,
    /// with room for whitespace.
    static let prekeyUploadBytes = 16 * 1024

    /// The `limit` query parameter, if given.
    private func limit(_ request: Request) throws -> Int? {
        try request.uri.queryParameters.get("limit").map { text -> Int in
            guard let value = Int(text) else { throw Problem(.badRequest, "limit must be a number") }
            return value
        }
    }

    private func principal(_ request: Request) async throws -> SessionService.Principal {
        try await sessions.authenticate(authorization: request.headers[.authorization], now: configuration.clock.now())
    }
}

extension RelayContext {
    /// A path parameter, percent-decoded by the router. Its grammar is checked by the service.
    func parameter(_ name: String) throws -> String {
        guard let value = parameters.get(name) else { throw Problem(.badRequest, "missing \(name)") }
        return value
    }

    func uid() throws -> String { try parameter("uid") }
    func messageID() throws -> String { try parameter("id") }
}
