/// `POST /v1/sessions`: exchange a custom token for a session.
public struct SignInRequest: Sendable, Equatable, Codable {
    /// The custom token (PASETO v4.public) the app's backend minted.
    public let token: String
    /// Wraps a custom token.
    public init(token: String) { self.token = token }
}

/// `POST /v1/sessions/refresh`: exchange a refresh token for a new pair.
public struct RefreshRequest: Sendable, Equatable, Codable {
    /// The refresh token from the last sign-in or refresh. It is spent by this request.
    public let refresh: String
    /// Wraps a refresh token.
    public init(refresh: String) { self.refresh = refresh }
}

/// A session: a short-lived bearer secret for `Authorization`, and a refresh token to renew it.
public struct SessionGrant: Sendable, Equatable, Codable {
    /// Whom the session signs in.
    public let uid: String
    /// The bearer secret: `Authorization: Bearer <session>`.
    public let session: String
    /// The single-use refresh token.
    public let refresh: String
    /// When `session` stops working (RFC 3339).
    public let expiresAt: String
    /// When `refresh` stops working (RFC 3339).
    public let refreshExpiresAt: String

    /// A grant with all its fields.
    public init(uid: String, session: String, refresh: String, expiresAt: String, refreshExpiresAt: String) {
        self.uid = uid
        self.session = session
        self.refresh = refresh
        self.expiresAt = expiresAt
        self.refreshExpiresAt = refreshExpiresAt
    }

    enum CodingKeys: String, CodingKey {
        case uid, session, refresh
        case expiresAt = "expires_at", refreshExpiresAt = "refresh_expires_at"
    }

    /// Decodes a grant, refusing (``OutOfRange``) a uid outside its grammar, a session or refresh
    /// token not of the relay's shape (it goes into a header), or a time that is not RFC 3339.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        uid = try container.decode(String.self, forKey: .uid, Grammar.uid, Identifier.isValidUID)
        session = try container.decode(String.self, forKey: .session)
        refresh = try container.decode(String.self, forKey: .refresh)
        // Not echoed in the refusal: even a malformed secret stays out of logs.
        guard RelayAnswers.isValidSecret(session, prefix: "mss_") else { throw OutOfRange("session", "(not shown)", "mss_ and 43 characters of base64url") }
        guard RelayAnswers.isValidSecret(refresh, prefix: "msr_") else { throw OutOfRange("refresh", "(not shown)", "msr_ and 43 characters of base64url") }
        expiresAt = try container.decode(String.self, forKey: .expiresAt, Grammar.time, Grammar.isTime)
        refreshExpiresAt = try container.decode(String.self, forKey: .refreshExpiresAt, Grammar.time, Grammar.isTime)
    }
}
