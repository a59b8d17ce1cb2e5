import Foundation
import MailslotWire

/// What the checks share: the target, an HTTP client, the audit's throwaway users, and the
/// outcomes so far.
final class AuditContext: @unchecked Sendable {
    // @unchecked: the checks run one after another; `outcomes` and `users` are only touched from
    // that single sequence of awaits, guarded by the lock all the same.
    let target: Audit.Target
    let http: AuditHTTP
    private let report: @Sendable (Audit.Outcome) -> Void
    private let lock = NSLock()
    private var recorded: [Audit.Outcome] = []
    private var signedIn: [AuditUser] = []
    /// A prefix that makes this run's uids unique on a shared relay.
    let prefix = "audit-" + Base64URL.encode(randomBytes(6)).replacingOccurrences(of: "-", with: "x").replacingOccurrences(of: "_", with: "y")

    /// The cast: the mailbox owner, a sender, and an outsider.
    private(set) var bob: AuditUser!
    private(set) var alice: AuditUser!
    private(set) var mallory: AuditUser!

    init(target: Audit.Target, report: @escaping @Sendable (Audit.Outcome) -> Void) {
        self.target = target
        self.report = report
        http = AuditHTTP(base: target.relay)
    }

    var outcomes: [Audit.Outcome] { lock.withLock { recorded } }

    /// Records and reports one check.
    func record(_ name: String, _ passed: Bool, _ detail: @autoclosure () -> String = "") {
        let outcome = Audit.Outcome(name: name, passed: passed, detail: passed ? "" : detail())
        lock.withLock { recorded.append(outcome) }
        report(outcome)
    }

    /// Records a check that cannot run against this target.
    func skip(_ name: String, _ why: String) {
        var outcome = Audit.Outcome(name: name, passed: true, detail: why)
        outcome.skipped = true
        lock.withLock { recorded.append(outcome) }
        report(outcome)
    }

    /// A raw TCP connection to the relay, for probes HTTP clients will not send; nil through TLS.
    func rawConnection() throws -> RawConnection? {
        guard target.relay.scheme == "http", let host = target.relay.host else { return nil }
        return try RawConnection(host: host, port: target.relay.port ?? 80)
    }

    /// Records that `answer` has `status` (and `code`, when given).
    func expect(_ name: String, _ answer: AuditHTTP.Answer, _ status: Int, _ code: String? = nil) {
        let passed = answer.status == status && (code == nil || answer.code == code)
        record(name, passed, "expected \(status)\(code.map { " \($0)" } ?? ""), got \(answer.summary)")
    }

    /// A custom token for `uid`, or a raw one with any claims (for forgeries).
    func token(_ uid: String, lifetime: Int64 = 300) throws -> String {
        try TokenIssuer(key: target.issuer, audience: target.audience).mint(uid: uid, lifetime: lifetime)
    }

    /// A uid unique to this run.
    func uid(_ name: String) -> String { "\(prefix)-\(name)" }

    /// Signs a new throwaway user in; it is cleaned up at the end.
    func signIn(_ name: String) async throws -> AuditUser {
        let uid = uid(name)
        let answer = try await http.call("POST", "/v1/sessions", body: ["token": try token(uid)])
        guard answer.status == 201, let session = answer.json["session"] as? String, let refresh = answer.json["refresh"] as? String else {
            throw AuditError("sign-in of a throwaway user failed: \(answer.summary)")
        }
        let user = AuditUser(uid: uid, session: session, refresh: refresh)
        lock.withLock { signedIn.append(user) }
        return user
    }

    func prepare() async throws {
        let health = try await http.call("GET", "/healthz")
        guard health.status == 200 else { throw AuditError("GET /healthz answered \(health.summary)") }
        bob = try await signIn("bob")
        alice = try await signIn("alice")
        mallory = try await signIn("mallory")
    }

    /// Erases what the audit left on the relay: every message in its users' mailboxes, the
    /// messages they sent elsewhere (unsend), documents, bundles, prekeys, blobs, block entries; then signs out.
    func cleanUp() async {
        let users = lock.withLock { signedIn }
        for user in users {
            // A session may have been revoked by a check: sign in again to clean up.
            guard let owner = try? await signIn(again: user) else { continue }
            for _ in 0..<50 {
                guard let page = try? await http.call("GET", "/v1/users/\(owner.uid)/messages?limit=500", session: owner.session),
                      let messages = page.json["messages"] as? [[String: Any]], !messages.isEmpty else { break }
                for message in messages {
                    if let id = message["id"] as? String {
                        _ = try? await http.call("DELETE", "/v1/users/\(owner.uid)/messages/\(id)", session: owner.session)
                    }
                }
            }
            for (recipient, id) in user.sent {
                _ = try? await http.call("DELETE", "/v1/users/\(recipient)/messages/\(id)", session: owner.session)
            }
            _ = try? await http.call("DELETE", "/v1/users/\(owner.uid)", session: owner.session)
            _ = try? await http.call("DELETE", "/v1/users/\(owner.uid)/keys", session: owner.session)
            _ = try? await http.call("DELETE", "/v1/users/\(owner.uid)/prekeys", session: owner.session)
            // Blobs it wrote, page by page (a relay without blobs answers 404: nothing to do).
            for _ in 0..<20 {
                guard let page = try? await http.call("GET", "/v1/users/\(owner.uid)/blobs?role=author&limit=500", session: owner.session),
                      let blobs = page.json["blobs"] as? [[String: Any]], !blobs.isEmpty else { break }
                for blob in blobs {
                    if let id = blob["id"] as? String { _ = try? await http.call("DELETE", "/v1/blobs/\(id)", session: owner.session) }
                }
            }
            if let list = try? await http.call("GET", "/v1/users/\(owner.uid)/blocked", session: owner.session),
               let blocked = list.json["blocked"] as? [String] {
                for author in blocked { _ = try? await http.call("DELETE", "/v1/users/\(owner.uid)/blocked/\(author)", session: owner.session) }
            }
            _ = try? await http.call("DELETE", "/v1/sessions/current", session: owner.session)
            _ = try? await http.call("DELETE", "/v1/sessions/current", session: user.session)
        }
    }

    private func signIn(again user: AuditUser) async throws -> AuditUser {
        let answer = try await http.call("POST", "/v1/sessions", body: ["token": try token(user.uid)])
        guard let session = answer.json["session"] as? String else { throw AuditError("sign-in failed") }
        return AuditUser(uid: user.uid, session: session, refresh: "", sent: user.sent)
    }

    /// Sends an envelope from `user` to `recipient`, remembering it for the clean-up.
    @discardableResult
    func send(_ user: AuditUser, to recipient: String, id: String = MessageID.generate(), envelope: [UInt8]? = nil,
              extra: [String: Any] = [:]) async throws -> AuditHTTP.Answer {
        var body: [String: Any] = ["envelope": Base64URL.encode(envelope ?? randomBytes(512))]
        body.merge(extra) { new, _ in new }
        let answer = try await http.call("PUT", "/v1/users/\(recipient)/messages/\(id)", session: user.session, body: body)
        if (200..<300).contains(answer.status) { user.remember(recipient: recipient, id: id) }
        return answer
    }

    /// Runs one check's body; a thrown error fails the check with the error.
    func check(_ name: String, _ body: () async throws -> Void) async {
        do { try await body() } catch { record(name, false, "error: \(error)") }
    }
}

/// A throwaway user of the audit.
final class AuditUser: @unchecked Sendable {
    let uid: String
    let session: String
    let refresh: String
    private let lock = NSLock()
    private var sentMessages: [(String, String)]

    init(uid: String, session: String, refresh: String, sent: [(String, String)] = []) {
        self.uid = uid
        self.session = session
        self.refresh = refresh
        sentMessages = sent
    }

    var sent: [(String, String)] { lock.withLock { sentMessages } }
    func remember(recipient: String, id: String) { lock.withLock { sentMessages.append((recipient, id)) } }
}

/// Why the audit could not run a step.
struct AuditError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
