import Foundation
import MailslotWire

/// Information leaks: existence oracles through 403/404, error texts that echo input or
/// secrets, and what a sender learns about a mailbox.
enum LeakChecks {
    @Sendable static func run(_ context: AuditContext) async {
        let bob = context.bob!, alice = context.alice!, mallory = context.mallory!
        let http = context.http
        let existing = MessageID.generate(), missing = MessageID.generate()
        _ = try? await context.send(alice, to: bob.uid, id: existing)

        for method in ["GET", "DELETE", "PATCH"] {
            let name = "leak.no-existence-oracle-\(method.lowercased())"
            await context.check(name) {
                let body: Any? = method == "PATCH" ? ["lease_seconds": 10] : nil
                let a = try await http.call(method, "/v1/users/\(bob.uid)/messages/\(existing)", session: mallory.session, body: body)
                let b = try await http.call(method, "/v1/users/\(bob.uid)/messages/\(missing)", session: mallory.session, body: body)
                context.record(name, a.status == 403 && b.status == 403 && a.body == b.body,
                               "an outsider's \(method) of an existing message answered \(a.summary), of a missing one \(b.summary)")
            }
        }
        await context.check("leak.author-unsend-of-missing-is-403") {
            let answer = try await http.call("DELETE", "/v1/users/\(bob.uid)/messages/\(missing)", session: alice.session)
            context.expect("leak.author-unsend-of-missing-is-403", answer, 403, "forbidden")
        }
        await context.check("leak.sender-learns-nothing-of-the-mailbox") {
            let answer = try await context.send(alice, to: bob.uid)
            let keys = Set(answer.json.keys)
            context.record("leak.sender-learns-nothing-of-the-mailbox",
                           answer.status == 201 && keys.isDisjoint(with: ["envelope", "seq", "lease_until", "lease_holder"]),
                           "the sender's answer carried \(keys.sorted())")
        }
        await context.check("leak.error-does-not-echo-the-token") {
            let marker = "AUDITMARKER" + Base64URL.encode(randomBytes(9))
            let token = try context.token(alice.uid).dropLast(4) + marker
            let answer = try await http.call("POST", "/v1/sessions", body: ["token": String(token)])
            context.record("leak.error-does-not-echo-the-token", answer.status == 401 && !answer.text.contains(marker),
                           "answered \(answer.summary) \(answer.text.contains(marker) ? "echoing the token" : "")")
        }
        await context.check("leak.error-does-not-echo-the-refresh-token") {
            let user = try await context.signIn("echo")
            _ = try await http.call("POST", "/v1/sessions/refresh", body: ["refresh": user.refresh])
            let reuse = try await http.call("POST", "/v1/sessions/refresh", body: ["refresh": user.refresh])
            context.record("leak.error-does-not-echo-the-refresh-token", reuse.status == 401 && !reuse.text.contains(user.refresh),
                           "answered \(reuse.summary)")
        }
        await context.check("leak.error-does-not-echo-the-body") {
            let marker = "AUDITMARKER" + Base64URL.encode(randomBytes(9))
            let answer = try await http.call("PUT", "/v1/users/\(bob.uid)/messages/\(MessageID.generate())", session: alice.session,
                                             body: #"{"envelope":"\#(marker)!","x":"#)
            context.record("leak.error-does-not-echo-the-body", answer.status == 400 && !answer.text.contains(marker),
                           "answered \(answer.summary)")
        }
        await context.check("leak.error-does-not-echo-the-session") {
            let bogus = "mss_" + Base64URL.encode(randomBytes(32))
            let answer = try await http.call("GET", "/v1/users/\(bob.uid)/messages", session: bogus)
            context.record("leak.error-does-not-echo-the-session", answer.status == 401 && !answer.text.contains(bogus),
                           "answered \(answer.summary)")
        }
        await context.check("leak.errors-are-problem-json") {
            let answer = try await http.call("GET", "/v1/users/\(bob.uid)/messages", session: mallory.session)
            context.record("leak.errors-are-problem-json",
                           answer.headers["content-type"]?.hasPrefix("application/problem+json") == true && answer.code == "forbidden",
                           "content type \(answer.headers["content-type"] ?? "none"), code \(answer.code ?? "none")")
        }
        await context.check("leak.no-version-banner") {
            let answer = try await http.call("GET", "/healthz")
            let server = answer.headers["server"] ?? ""
            context.record("leak.no-version-banner", !server.contains(where: \.isNumber), "Server header: \(server)")
        }
    }
}
