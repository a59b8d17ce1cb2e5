import Foundation
import MailslotWire

/// Resource exhaustion: huge bodies, deep JSON, huge headers, huge WebSocket frames, half-open
/// connections and a flood of creates each meet a limit, and the relay keeps serving.
enum LimitChecks {
    @Sendable static func run(_ context: AuditContext) async {
        let bob = context.bob!, alice = context.alice!
        let http = context.http
        await BatchChecks.limits(context)

        await context.check("limit.huge-body") {
            let body = Data(#"{"envelope":""#.utf8) + Data(repeating: 0x41, count: 4 << 20) + Data(#""}"#.utf8)
            let answer = try await http.call("PUT", "/v1/users/\(bob.uid)/messages/\(MessageID.generate())", session: alice.session, body: body)
            context.expect("limit.huge-body", answer, 413, "body_too_large")
        }
        await context.check("limit.deep-json") {
            let deep = String(repeating: "[", count: 2000) + String(repeating: "]", count: 2000)
            let answer = try await http.call("PUT", "/v1/users/\(bob.uid)", session: bob.session, body: deep)
            context.expect("limit.deep-json", answer, 400, "invalid_json")
        }
        await context.check("limit.non-json-content-type") {
            let answer = try await http.call("PUT", "/v1/users/\(bob.uid)", session: bob.session, body: #"{"a":1}"#,
                                             headers: ["Content-Type": "text/plain"])
            context.expect("limit.non-json-content-type", answer, 415)
        }
        await context.check("limit.huge-header") {
            guard let connection = try context.rawConnection() else { return context.skip("limit.huge-header", "needs plain HTTP") }
            connection.send("GET /healthz HTTP/1.1\r\nHost: relay\r\nX-Big: \(String(repeating: "a", count: 64 * 1024))\r\n\r\n")
            let status = await connection.status(attempts: 20)
            let stillServing = try await http.call("GET", "/healthz").status == 200
            // Closed without an answer (0) or refused with 4xx; never served, never left hanging.
            context.record("limit.huge-header", (status == 0 || (status ?? 0) >= 400) && stillServing,
                           "oversized header answered \(status.map(String.init) ?? "nothing (connection left open)"); relay serving: \(stillServing)")
        }
        await context.check("limit.half-open-connections") {
            guard context.target.relay.scheme == "http" else { return context.skip("limit.half-open-connections", "needs plain HTTP") }
            // Connections that start a request and never finish it must not stop others being served.
            var held: [RawConnection] = []
            for _ in 0..<64 {
                guard let connection = try context.rawConnection() else { break }
                connection.send("GET /healthz HTTP/1.1\r\nHost: relay\r\nX-Slow: ")
                held.append(connection)
            }
            let started = ContinuousClock.now
            let answer = try await http.call("GET", "/healthz")
            let waited = ContinuousClock.now - started
            context.record("limit.half-open-connections", answer.status == 200 && waited < .seconds(5),
                           "with \(held.count) half-open connections /healthz answered \(answer.status) after \(waited)")
            held.removeAll()
        }
        await context.check("limit.huge-websocket-frame") {
            let socket = RelaySocket.subscribe(base: context.target.relay, uid: bob.uid, session: bob.session)
            guard try await socket.next(timeout: .seconds(10))?.type == "ready" else {
                return context.record("limit.huge-websocket-frame", false, "the owner's subscription did not open")
            }
            try? await socket.send(text: String(repeating: "x", count: 2 << 20))
            let code = await socket.closeCode(timeout: .seconds(10))
            let stillServing = try await http.call("GET", "/healthz").status == 200
            context.record("limit.huge-websocket-frame", code != nil && stillServing,
                           "a 2 MiB frame left the socket \(code == nil ? "open" : "closed"); relay serving: \(stillServing)")
        }
        await context.check("limit.garbage-frames-close-the-socket") {
            let socket = RelaySocket.subscribe(base: context.target.relay, uid: bob.uid, session: bob.session)
            guard try await socket.next(timeout: .seconds(10))?.type == "ready" else {
                return context.record("limit.garbage-frames-close-the-socket", false, "the owner's subscription did not open")
            }
            for _ in 0..<12 { try? await socket.send(text: "{not json") }
            let code = await socket.closeCode(timeout: .seconds(10))
            context.record("limit.garbage-frames-close-the-socket", code == CloseCode.protocolViolation,
                           "after 12 malformed frames: close \(code.map(String.init) ?? "none (still open)")")
        }
        await webSocketMessageChecks(context)
        await context.check("limit.silent-and-slow-connections-are-closed") {
            guard let silent = try context.rawConnection(), let slow = try context.rawConnection() else {
                return context.skip("limit.silent-and-slow-connections-are-closed", "needs plain HTTP")
            }
            // One socket says nothing; the other sends a request head a byte a second (never idle,
            // never done). A relay must close both, or enough of them lock everyone out.
            async let silentClosed = silent.receive(attempts: 60) == ""
            async let slowClosed: Bool = {
                slow.send("GET /healthz HTTP/1.1\r\nHost: relay\r\nX-Slow: ")
                for _ in 0..<30 {
                    guard await slow.send(bytes: [0x61]) else { return true }
                    if await slow.receive(attempts: 2) == "" { return true }
                }
                return false
            }()
            let (quiet, trickle) = await (silentClosed, slowClosed)
            context.record("limit.silent-and-slow-connections-are-closed", quiet && trickle,
                           "after 30 s: a silent socket \(quiet ? "closed" : "still open"), a trickled head \(trickle ? "closed" : "still open")")
        }
        await context.check("limit.page-bounded-in-bytes") {
            // About 4.9 MB of envelopes in the reader's own mailbox: one page must not hold them all,
            // however large a `limit` it asks for (a page stops at about 4 MiB and gives `next`).
            let reader = try await context.signIn("reader")
            let first = try await context.send(reader, to: reader.uid, envelope: randomBytes(64 * 1024))
            guard first.status == 201 else {
                return context.skip("limit.page-bounded-in-bytes", "64 KiB envelopes are refused here (\(first.summary))")
            }
            for _ in 1..<56 {
                let answer = try await context.send(reader, to: reader.uid, envelope: randomBytes(64 * 1024))
                guard answer.status == 201 else {
                    return context.skip("limit.page-bounded-in-bytes", "could not fill a mailbox (\(answer.summary))")
                }
            }
            let page = try await http.call("GET", "/v1/users/\(reader.uid)/messages?limit=500", session: reader.session)
            let count = (page.json["messages"] as? [Any])?.count ?? 0
            let next = page.json["next"] as? String
            context.record("limit.page-bounded-in-bytes", page.status == 200 && count < 56 && next != nil && page.body.count < 5 << 20,
                           "a page of a mailbox of 56 × 64 KiB envelopes held \(count) in \(page.body.count) bytes, next \(next ?? "null")")
        }
        await context.check("limit.sign-in-flood-evicts-the-oldest") {
            // Every sign-in stores rows; a uid's live sign-ins are capped, the oldest revoked.
            let first = try await context.signIn("signer")
            var revoked = false
            var signIns = 1
            // Up to 1,000 sign-ins: a relay configured for more live sign-ins per uid fails this check.
            while !revoked, signIns < 1_000 {
                for _ in 0..<16 {
                    _ = try await http.call("POST", "/v1/sessions", body: ["token": try context.token(first.uid)])
                    signIns += 1
                }
                revoked = try await http.call("GET", "/v1/users/\(first.uid)", session: first.session).status == 401
            }
            context.record("limit.sign-in-flood-evicts-the-oldest", revoked, "the first of \(signIns) sign-ins of one uid is still live")
        }
        guard context.target.flood else { return context.skip("limit.flood-of-creates", "disabled (--no-flood)") }
        await context.check("limit.flood-of-creates") {
            // Into the flooder's own mailbox, so nobody else is disturbed; cleaned up afterwards.
            let flooder = try await context.signIn("flooder")
            var limited: AuditHTTP.Answer?
            var sent = 0
            let deadline = ContinuousClock.now + .seconds(60)
            while limited == nil, sent < 3000, ContinuousClock.now < deadline {
                let answers = try await withThrowingTaskGroup(of: AuditHTTP.Answer.self) { group in
                    for _ in 0..<16 { group.addTask { try await context.send(flooder, to: flooder.uid) } }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                sent += answers.count
                limited = answers.first { $0.status == 429 }
            }
            let retryAfter = limited?.headers["retry-after"].flatMap(Int.init) ?? 0
            context.record("limit.flood-of-creates", limited?.code == "rate_limited" && retryAfter >= 1,
                           limited.map { "429 without a usable Retry-After (\($0.summary))" } ?? "no 429 after \(sent) creates")
        }
    }

    /// Fragmented WebSocket messages: bounded in fragments and bytes, never an empty fragment.
    private static func webSocketMessageChecks(_ context: AuditContext) async {
        let bob = context.bob!
        let text: UInt8 = 1, continuation: UInt8 = 0
        func subscription(_ name: String) async throws -> RawConnection? {
            guard let connection = try context.rawConnection() else {
                context.skip(name, "needs plain HTTP")
                return nil
            }
            guard await connection.upgrade(path: "/v1/users/\(bob.uid)/subscribe", session: bob.session) else {
                context.record(name, false, "the owner's subscription did not open")
                return nil
            }
            return connection
        }
        func closeName(_ code: UInt16?) -> String { code.map { $0 == 0 ? "closed without a close frame" : "close \($0)" } ?? "none (still open)" }

        await context.check("limit.empty-continuation-frames") {
            guard let socket = try await subscription("limit.empty-continuation-frames") else { return }
            // Each empty fragment costs the sender 6 bytes; a relay that keeps them grows without bound.
            var frames = RawConnection.webSocketFrame(opcode: text, fin: false, payload: Array(#"{"type":"#.utf8))
            let empty = RawConnection.webSocketFrame(opcode: continuation, fin: false, payload: [])
            for _ in 0..<10_000 { frames += empty }
            // Read while sending: a close frame left unread when the relay drops the connection is lost.
            async let closed = socket.webSocketClose(attempts: 20)
            await socket.send(bytes: frames)
            let code = await closed
            let stillServing = try await context.http.call("GET", "/healthz").status == 200
            context.record("limit.empty-continuation-frames", code == 1008 && stillServing,
                           "after 10,000 empty continuation frames: \(closeName(code)) (expected 1008); relay serving: \(stillServing)")
        }
        await context.check("limit.fragment-flood") {
            guard let socket = try await subscription("limit.fragment-flood") else { return }
            var frames = RawConnection.webSocketFrame(opcode: text, fin: false, payload: Array("{".utf8))
            let one = RawConnection.webSocketFrame(opcode: continuation, fin: false, payload: Array(" ".utf8))
            for _ in 0..<2_000 { frames += one }
            async let closed = socket.webSocketClose(attempts: 20)
            await socket.send(bytes: frames + RawConnection.webSocketFrame(opcode: continuation, fin: true, payload: Array("}".utf8)))
            let code = await closed
            context.record("limit.fragment-flood", code == 1009, "a message in 2,002 one-byte fragments: \(closeName(code)) (expected 1009)")
        }
        await context.check("limit.fragmented-message-over-the-size-limit") {
            guard let socket = try await subscription("limit.fragmented-message-over-the-size-limit") else { return }
            // 40 fragments of 48 KiB: each within any frame limit, together over any message limit
            // a relay with envelopes up to 1 MiB has.
            let chunk = [UInt8](repeating: 0x20, count: 48 * 1024)
            async let closed = socket.webSocketClose(attempts: 20)
            var sentAll = await socket.send(bytes: RawConnection.webSocketFrame(opcode: text, fin: false, payload: chunk))
            for n in 1..<40 where sentAll {
                sentAll = await socket.send(bytes: RawConnection.webSocketFrame(opcode: continuation, fin: n == 39, payload: chunk))
            }
            let code = await closed
            context.record("limit.fragmented-message-over-the-size-limit", code == 1009,
                           "a 1.9 MiB message in 40 fragments: \(closeName(code)) (expected 1009)")
        }
    }
}
