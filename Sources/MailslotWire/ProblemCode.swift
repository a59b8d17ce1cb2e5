/// Every error the relay answers with: a stable `code` (documented in spec/protocol.md) and its
/// HTTP status. Clients branch on the code, never on the human-readable text.
public enum ProblemCode: String, Sendable, Codable, CaseIterable {
    // 400: the request itself is wrong.
    case badRequest = "bad_request"
    case invalidJSON = "invalid_json"
    case invalidUID = "invalid_uid"
    case invalidMessageID = "invalid_message_id"
    case invalidEnvelope = "invalid_envelope"
    case invalidTTL = "invalid_ttl"
    case invalidCursor = "invalid_cursor"
    case invalidKeyBundle = "invalid_key_bundle"
    case invalidDocument = "invalid_document"
    case invalidLease = "invalid_lease"
    /// A `key_id` that is not 22 characters of unpadded base64url.
    case invalidKeyID = "invalid_key_id"
    /// A prekey upload with an entry that is not a usable X25519 key under an id 1…4294967295,
    /// ids repeated, or no entries or too many.
    case invalidPrekey = "invalid_prekey"
    // 401: who is asking is unknown.
    case unauthenticated = "unauthenticated"
    case sessionExpired = "session_expired"
    case invalidToken = "invalid_token"
    case refreshInvalid = "refresh_invalid"
    case refreshReused = "refresh_reused"
    // 403, 404, 409.
    case forbidden = "forbidden"
    case blocked = "blocked"
    case notFound = "not_found"
    case conflict = "conflict"
    /// The owner's block list holds the most entries allowed.
    case blockListFull = "block_list_full"
    /// The envelope was sealed to keys the recipient no longer publishes (its `key_id` is not
    /// the current bundle's): fetch the recipient's keys again, then re-seal and resend.
    case staleKeys = "stale_keys"
    /// A prekey upload names an id the relay already holds with another key.
    case prekeyConflict = "prekey_conflict"
    /// A prekey upload would leave more prekeys stored than the relay keeps for one owner.
    case tooManyPrekeys = "too_many_prekeys"
    // 413, 415, 429: limits. (Oversized headers close the connection; connections over the
    // limit wait to be accepted: neither has a request to answer.)
    case bodyTooLarge = "body_too_large"
    case envelopeTooLarge = "envelope_too_large"
    case unsupportedMediaType = "unsupported_media_type"
    case rateLimited = "rate_limited"
    case mailboxFull = "mailbox_full"
    /// The author's messages waiting in all mailboxes together hold the most bytes allowed.
    case authorQuota = "author_quota"
    /// The mailbox already has the most page or message reads in progress.
    case tooManyReads = "too_many_reads"
    /// Prekey claims come too fast: from this claimer, or for this owner (the answer does not say which).
    case prekeyClaimsLimited = "prekey_claims_limited"
    // 5xx.
    case internalError = "internal"
    /// The relay's disk is (nearly) full: it takes no new messages until space is freed.
    case storageFull = "storage_full"
    /// The relay cannot reach its database for now (it is restarting or failing over): retry
    /// after `Retry-After` seconds. A write answered so may or may not have been stored;
    /// repeating it is safe.
    case unavailable = "unavailable"

    /// The HTTP status that goes with the code.
    public var status: Int {
        switch self {
        case .badRequest, .invalidJSON, .invalidUID, .invalidMessageID, .invalidEnvelope, .invalidTTL,
             .invalidCursor, .invalidKeyBundle, .invalidDocument, .invalidLease, .invalidKeyID, .invalidPrekey: 400
        case .unauthenticated, .sessionExpired, .invalidToken, .refreshInvalid, .refreshReused: 401
        case .forbidden, .blocked: 403
        case .notFound: 404
        case .conflict, .blockListFull, .staleKeys, .prekeyConflict, .tooManyPrekeys: 409
        case .bodyTooLarge, .envelopeTooLarge: 413
        case .unsupportedMediaType: 415
        case .rateLimited, .mailboxFull, .authorQuota, .tooManyReads, .prekeyClaimsLimited: 429
        case .internalError: 500
        case .storageFull: 507
        case .unavailable: 503
        }
    }
}

/// An `application/problem+json` body (RFC 9457) with Mailslot's stable `code`.
public struct Problem: Sendable, Equatable, Codable, Error {
    /// The stable error code.
    public let code: ProblemCode
    /// The HTTP status, repeated in the body as RFC 9457 asks.
    public let status: Int
    /// A short summary of the code (the same for every occurrence of it).
    public let title: String
    /// What went wrong this time, for people. Never echoes secrets, tokens or envelopes.
    public let detail: String?
    /// Seconds after which a refused request may be retried (429, 503, 507).
    public let retryAfter: Int?

    /// A problem with `code`, and optionally what went wrong this time.
    public init(_ code: ProblemCode, _ detail: String? = nil, retryAfter: Int? = nil) {
        self.code = code
        self.status = code.status
        self.title = code.rawValue.replacingOccurrences(of: "_", with: " ")
        self.detail = detail
        self.retryAfter = retryAfter
    }

    enum CodingKeys: String, CodingKey {
        case code, status, title, detail
        case retryAfter = "retry_after"
    }

    /// Decodes a problem, refusing (``OutOfRange``) a `status` that is not an HTTP status or a
    /// `retry_after` below 0 or above ``RelayAnswers/maxRetryAfter``.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        code = try container.decode(ProblemCode.self, forKey: .code)
        status = try container.decode(Int.self, forKey: .status, in: 100...599)
        title = try container.decode(String.self, forKey: .title)
        detail = try container.decodeIfPresent(String.self, forKey: .detail)
        retryAfter = try container.decodeIfPresent(Int.self, forKey: .retryAfter, in: 0...RelayAnswers.maxRetryAfter)
    }
}
