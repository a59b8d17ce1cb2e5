import _CryptoExtras
import Foundation
import NIOHTTP1

// FCM's credentials: the service account JSON Google gives, its RS256-signed assertion, and the
// OAuth 2.0 access token it is exchanged for (cached until five minutes before it expires, one
// exchange at a time). spec/push.md §5.3, docs/design/wakeups.md §4.3.

/// A Google service account, checked at start.
struct GoogleServiceAccount: Sendable {
    let projectID: String
    let clientEmail: String
    let privateKeyID: String
    let tokenURI: String
    let key: _RSA.Signing.PrivateKey

    /// The scope FCM's HTTP v1 API needs.
    static let scope = "https://www.googleapis.com/auth/firebase.messaging"

    private struct File: Decodable {
        let project_id: String?
        let client_email: String?
        let private_key_id: String?
        let private_key: String?
        let token_uri: String?
    }

    /// Reads the JSON: every member present, the key RSA of at least 2048 bits.
    init(json text: String) throws(PushKeyFileError) {
        guard let file = try? JSONDecoder().decode(File.self, from: Data(text.utf8)) else {
            throw PushKeyFileError(description: "fcm-service-account: not a service account JSON file")
        }
        guard let projectID = file.project_id, !projectID.isEmpty, let email = file.client_email, !email.isEmpty,
              let keyID = file.private_key_id, !keyID.isEmpty, let pem = file.private_key, let tokenURI = file.token_uri, !tokenURI.isEmpty
        else { throw PushKeyFileError(description: "fcm-service-account: needs project_id, client_email, private_key_id, private_key and token_uri") }
        guard projectID.utf8.allSatisfy({ $0 == 45 || (48...57).contains($0) || (97...122).contains($0) }) else {
            throw PushKeyFileError(description: "fcm-service-account: project_id is not a Google project id")
        }
        let key: _RSA.Signing.PrivateKey
        do {
            let block = try PushKeyFiles.privateKeyBlock(pem, setting: "fcm-service-account")
            key = try _RSA.Signing.PrivateKey(pemRepresentation: block.text)
        } catch {
            throw PushKeyFileError(description: "fcm-service-account: private_key is not an RSA private key of at least 2048 bits")
        }
        self.projectID = projectID
        clientEmail = email
        privateKeyID = keyID
        self.tokenURI = tokenURI
        self.key = key
    }

    /// The RS256 assertion for `audience` (the token URL) at `now` (s), valid an hour.
    func assertion(audience: String, now: Int64) throws -> String {
        try CompactJWS.rs256(
            header: ["alg": .string("RS256"), "kid": .string(privateKeyID), "typ": .string("JWT")],
            claims: ["aud": .string(audience), "exp": .integer(now + 3600), "iat": .integer(now),
                     "iss": .string(clientEmail), "scope": .string(Self.scope)],
            key: key)
    }

    /// The token request's form body.
    static func tokenRequestBody(assertion: String) -> String {
        "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=" + assertion
    }
}

/// The cached OAuth access token for FCM.
actor GoogleAccessToken {
    /// Why no token could be had.
    enum Failure: Error, Equatable {
        /// The token endpoint refused (the account or its key is wrong): the operator's.
        case refused
        /// No answer: try later.
        case unavailable(OutboundHTTP.Failure)
    }

    private let account: GoogleServiceAccount
    private let tokenURL: String
    private let http: OutboundHTTP
    private let clock: RelayClock
    private var cached: (token: String, validUntil: Int64)?
    private var exchange: Task<Result<String, Failure>, Never>?

    /// A token is replaced this long before it expires (s).
    static let margin: Int64 = 300

    init(account: GoogleServiceAccount, tokenURL: String?, http: OutboundHTTP, clock: RelayClock) {
        self.account = account
        self.tokenURL = tokenURL ?? account.tokenURI
        self.http = http
        self.clock = clock
    }

    /// The current token, exchanging a new assertion when there is none (one exchange at a time).
    func token() async -> Result<String, Failure> {
        let now = clock.now() / 1000
        if let cached, cached.validUntil > now { return .success(cached.token) }
        if let exchange { return await exchange.value }
        let task = Task { await self.exchangeAssertion(now: now) }
        exchange = task
        let result = await task.value
        exchange = nil
        return result
    }

    /// Forgets `token` (FCM answered 401 UNAUTHENTICATED for it).
    func invalidate(_ token: String) {
        if cached?.token == token { cached = nil }
    }

    private struct Answer: Decodable {
        let access_token: String
        let expires_in: Int64
        let token_type: String?
    }

    private func exchangeAssertion(now: Int64) async -> Result<String, Failure> {
        guard let assertion = try? account.assertion(audience: tokenURL, now: now) else { return .failure(.refused) }
        let body = Array(GoogleServiceAccount.tokenRequestBody(assertion: assertion).utf8)
        switch await http.post(tokenURL, headers: HTTPHeaders([("content-type", "application/x-www-form-urlencoded")]), body: body) {
        case .failure(let failure): return .failure(.unavailable(failure))
        case .success(let answer):
            guard answer.status == 200, let decoded = try? JSONDecoder().decode(Answer.self, from: Data(answer.body)),
                  !decoded.access_token.isEmpty, decoded.expires_in > 0
            else { return answer.status >= 500 ? .failure(.unavailable(.connect)) : .failure(.refused) }
            cached = (decoded.access_token, now + decoded.expires_in - Self.margin)
            return .success(decoded.access_token)
        }
    }
}
