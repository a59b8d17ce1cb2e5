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
    /// A send to many (`POST /v1/messages`, `send_many`) with no entries, more than the relay
    /// takes in one (`--max-batch-entries`), or a (`to`, `id`) pair twice: nothing was stored.
    case invalidEntries = "invalid_entries"
    /// A prekey upload with an entry that is not a usable X25519 key under an id 1…4294967295,
    /// ids repeated, or no entries or too many.
    case invalidPrekey = "invalid_prekey"
    /// A blob id outside its grammar (16–64 of `A-Z a-z 0-9 _ -`).
    case invalidBlobID = "invalid_blob_id"
    /// A blob `size` that no file ciphertext has (spec/attachments.md §1).
    case invalidBlobSize = "invalid_blob_size"
    /// A blob's recipient list that is empty, too long, repeats a uid or names an invalid one.
    case invalidRecipients = "invalid_recipients"
    /// A part number outside 1 … the blob's parts (a part beyond the declared size).
    case invalidPart = "invalid_part"
    /// A part whose `Content-Length` is not that part's length.
    case invalidPartLength = "invalid_part_length"
    /// A `Mailslot-Digest` header missing or not 32 bytes of unpadded base64url.
    case invalidDigest = "invalid_digest"
    /// The part's bytes do not hash to its `Mailslot-Digest`: nothing was recorded.
    case partDigestMismatch = "part_digest_mismatch"
    /// A `Range` header the relay does not serve: several ranges, or none within the blob.
    case invalidRange = "invalid_range"
    /// A push registration id outside its grammar (16–64 of `A-Z a-z 0-9 _ -`).
    case invalidRegistrationID = "invalid_registration_id"
    /// A push registration body without its provider's members, or with one outside its grammar;
    /// `detail` names the member (spec/push.md §2).
    case invalidPushRegistration = "invalid_push_registration"
    /// A Web Push endpoint the relay will not call: not https, with userinfo, a refused port, or a
    /// host that is a loopback, private or special address or name (spec/push.md §4.1).
    case pushEndpointRefused = "push_endpoint_refused"
    /// The operator did not configure the provider the registration names; `detail` names it.
    case pushProviderDisabled = "push_provider_disabled"
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
    /// The uid holds the most push registrations allowed; a new id is refused (a count, not a rate).
    case tooManyRegistrations = "too_many_registrations"
    /// The part is stored already with another digest.
    case partConflict = "part_conflict"
    /// The blob is complete: its parts no longer change.
    case blobComplete = "blob_complete"
    /// The blob is still uploading: it cannot be downloaded yet.
    case blobIncomplete = "blob_incomplete"
    // 410: an upload that is gone.
    /// The unfinished upload passed its expiry: start over with a new blob.
    case uploadExpired = "upload_expired"
    /// The object store lost the unfinished upload: the blob is erased, start over.
    case uploadLost = "upload_lost"
    // 411.
    /// A part upload without `Content-Length` (chunked bodies are refused).
    case lengthRequired = "length_required"
    // 413, 415, 429: limits. (Oversized headers close the connection; connections over the
    // limit wait to be accepted: neither has a request to answer.)
    case bodyTooLarge = "body_too_large"
    case envelopeTooLarge = "envelope_too_large"
    /// A blob larger than the relay's largest file allows.
    case blobTooLarge = "blob_too_large"
    case unsupportedMediaType = "unsupported_media_type"
    case rateLimited = "rate_limited"
    case mailboxFull = "mailbox_full"
    /// The author's messages waiting in all mailboxes together hold the most bytes allowed.
    case authorQuota = "author_quota"
    /// The mailbox already has the most page or message reads in progress.
    case tooManyReads = "too_many_reads"
    /// Prekey claims come too fast: from this claimer, or for this owner (the answer does not say which).
    case prekeyClaimsLimited = "prekey_claims_limited"
    /// The author's blobs, finished and unfinished, would hold more bytes than allowed.
    case blobQuota = "blob_quota"
    /// The author has the most unfinished uploads allowed.
    case tooManyUploads = "too_many_uploads"
    /// The most part uploads and downloads for this uid are running on this relay.
    case tooManyTransfers = "too_many_transfers"
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
             .invalidCursor, .invalidKeyBundle, .invalidDocument, .invalidLease, .invalidKeyID, .invalidEntries, .invalidPrekey,
             .invalidBlobID, .invalidBlobSize, .invalidRecipients, .invalidPart, .invalidPartLength, .invalidDigest,
             .partDigestMismatch, .invalidRegistrationID, .invalidPushRegistration, .pushEndpointRefused, .pushProviderDisabled: 400
        case .unauthenticated, .sessionExpired, .invalidToken, .refreshInvalid, .refreshReused: 401
        case .forbidden, .blocked: 403
        case .notFound: 404
        case .conflict, .blockListFull, .staleKeys, .prekeyConflict, .tooManyPrekeys, .tooManyRegistrations, .partConflict, .blobComplete, .blobIncomplete: 409
        case .uploadExpired, .uploadLost: 410
        case .lengthRequired: 411
        case .bodyTooLarge, .envelopeTooLarge, .blobTooLarge: 413
        case .unsupportedMediaType: 415
        case .invalidRange: 416
        case .rateLimited, .mailboxFull, .authorQuota, .tooManyReads, .prekeyClaimsLimited, .blobQuota, .tooManyUploads, .tooManyTransfers: 429
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
