import Foundation
import MailslotAudit
import MailslotWire

/// The tests' HTTP client: requests as a client sends them (through the audit's bounded client),
/// answers with their status, headers, problem code and decoded body.
extension TestRelay {
    /// An answer of the relay.
    public typealias Answer = AuditHTTP.Answer

    /// One request to `path`; `body` is sent as is when it is `Data` or a `String`, as JSON otherwise.
    public func call(_ method: String, _ path: String, session: String? = nil, body: Any? = nil,
                     headers: [String: String] = [:]) async throws -> Answer {
        try await http.call(method, path, session: session, body: body, headers: headers)
    }

    /// One request whose body is `value` encoded as JSON.
    public func call<Body: Encodable>(_ method: String, _ path: String, session: String? = nil, json value: Body,
                                      headers: [String: String] = [:]) async throws -> Answer {
        try await http.call(method, path, session: session, body: try JSONEncoder().encode(value), headers: headers)
    }

    /// A custom token for `uid` from this relay's issuer, for this relay's audience.
    public func token(_ uid: String, lifetime: Int64 = 300) throws -> String {
        try TokenIssuer(key: issuer, audience: audience).mint(uid: uid, lifetime: lifetime)
    }

    /// Signs `uid` in; throws unless the relay grants a session.
    public func signIn(_ uid: String) async throws -> (session: String, refresh: String) {
        let answer = try await call("POST", "/v1/sessions", json: SignInRequest(token: try token(uid)))
        guard answer.status == 201 else { throw TestRelayError("sign-in of \(uid): \(answer.summary) \(answer.text)") }
        let grant = try answer.decoded(SessionGrant.self)
        return (grant.session, grant.refresh)
    }

    /// Puts an envelope (by default 512 random bytes) into `recipient`'s mailbox as `id`.
    @discardableResult
    public func send(_ session: String, to recipient: String, id: String, envelope: [UInt8]? = nil,
                     ttl: Int64? = nil) async throws -> Answer {
        var body: [String: Any] = ["envelope": Base64URL.encode(envelope ?? randomBytes(512))]
        if let ttl { body["ttl_seconds"] = ttl }
        return try await call("PUT", "/v1/users/\(recipient)/messages/\(id)", session: session, body: body)
    }
}

extension AuditHTTP.Answer {
    /// The problem code of an error answer, typed; nil for a success or a code this build does not know.
    public var problem: ProblemCode? { code.flatMap(ProblemCode.init(rawValue:)) }

    /// The body decoded as `type`.
    public func decoded<T: Decodable>(_ type: T.Type) throws -> T {
        try JSONDecoder().decode(type, from: body)
    }
}
