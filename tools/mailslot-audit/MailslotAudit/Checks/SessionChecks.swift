import Foundation
import MailslotWire

/// Sessions: garbage and misplaced secrets, sign-out, refresh rotation and reuse.
enum SessionChecks {
    @Sendable static func run(_ context: AuditContext) async {
        let http = context.http
        await context.check("session.garbage-bearer") {
            context.expect("session.garbage-bearer", try await http.call("GET", "/v1/users/\(context.bob.uid)/messages",
                                                                          session: "mss_" + String(repeating: "A", count: 43)), 401)
        }
        await context.check("session.refresh-token-as-bearer") {
            context.expect("session.refresh-token-as-bearer", try await http.call("GET", "/v1/users/\(context.bob.uid)/messages",
                                                                                   session: context.bob.refresh), 401)
        }
        await context.check("session.not-bearer-scheme") {
            context.expect("session.not-bearer-scheme", try await http.call("GET", "/v1/users/\(context.bob.uid)/messages",
                                                                             headers: ["Authorization": "Basic \(context.bob.session)"]), 401)
        }
        await context.check("session.used-after-sign-out") {
            let user = try await context.signIn("signed-out")
            let out = try await http.call("DELETE", "/v1/sessions/current", session: user.session)
            guard out.status == 204 else { return context.record("session.used-after-sign-out", false, "sign-out answered \(out.summary)") }
            context.expect("session.used-after-sign-out", try await http.call("GET", "/v1/users/\(user.uid)/messages", session: user.session), 401)
        }
        await context.check("session.refresh-reuse-revokes-the-family") {
            let user = try await context.signIn("refresher")
            let rotated = try await http.call("POST", "/v1/sessions/refresh", body: ["refresh": user.refresh])
            guard rotated.status == 201, let newSession = rotated.json["session"] as? String else {
                return context.record("session.refresh-reuse-revokes-the-family", false, "refresh answered \(rotated.summary)")
            }
            let reuse = try await http.call("POST", "/v1/sessions/refresh", body: ["refresh": user.refresh])
            let after = try await http.call("GET", "/v1/users/\(user.uid)/messages", session: newSession)
            context.record("session.refresh-reuse-revokes-the-family", reuse.status == 401 && reuse.code == "refresh_reused" && after.status == 401,
                           "reuse answered \(reuse.summary); the rotated session then answered \(after.status)")
        }
    }
}
