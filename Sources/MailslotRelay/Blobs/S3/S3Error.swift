/// Why an object-store call failed, as the blob store must act on it: retry later, start the upload
/// over, treat the object as gone, or tell the operator. Read from the HTTP status and S3's
/// `<Error><Code>` (docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html). The
/// descriptions hold no secret and no message text from the store beyond its error code.
package enum S3Error: Error, Sendable, Equatable, CustomStringConvertible {
    /// The object does not exist (`NoSuchKey`, or 404 to a `HEAD`).
    case notFound
    /// The multipart upload does not exist any more (`NoSuchUpload`: aborted, completed, expired,
    /// or lost when the store restarted — rclone keeps uploads in memory). The upload must start over.
    case uploadLost
    /// The store refused the signature or the key (`SignatureDoesNotMatch`, `InvalidAccessKeyId`,
    /// `ExpiredToken`, `RequestTimeTooSkewed`, …): wrong credentials or a clock far off.
    case signatureRejected(code: String)
    /// The credentials are valid but may not do this (`AccessDenied`, other 403s).
    case accessDenied(code: String)
    /// A part other than the last is under the store's minimum (`EntityTooSmall`, 5 MiB on AWS):
    /// a configuration error (the part size).
    case entityTooSmall
    /// `CompleteMultipartUpload` named a part the store does not have or with another ETag
    /// (`InvalidPart`, `InvalidPartOrder`).
    case invalidPart(code: String)
    /// The range asked for is outside the object (416 `InvalidRange`).
    case invalidRange
    /// The store asks to slow down or is failing for now (429, 500, 502, 503, 504; `SlowDown`,
    /// `InternalError`, `ServiceUnavailable`). Retryable.
    case throttled(status: Int, code: String)
    /// The store could not be reached, or the connection failed or timed out. Retryable; the call
    /// may or may not have taken effect (every call the blob store makes is safe to repeat).
    case unavailable(Transport)
    /// The store answered something this client cannot use (no `UploadId`, no `ETag`, an XML
    /// answer over the size bound, the wrong range of bytes).
    case badResponse(String)
    /// The part's body could not be read to the end (its spool file gone or shorter than said,
    /// or the buffer sequence failed): the relay's side, not the store's.
    case bodyUnreadable
    /// Any other refusal, with its status and S3 error code (empty when the body had none).
    case other(status: Int, code: String)

    /// What went wrong on the way to the store.
    package enum Transport: Sendable, Equatable {
        /// The call's deadline or the connection's read timeout passed.
        case timedOut
        /// No connection could be made, or it broke during the call.
        case connectionFailed
    }

    /// Whether the same call may succeed if made again later.
    package var isRetryable: Bool {
        switch self {
        case .throttled, .unavailable: true
        default: false
        }
    }

    /// A sentence for the log (no secret; the store's code, not its message).
    package var description: String {
        switch self {
        case .notFound: "object store: no such object"
        case .uploadLost: "object store: the multipart upload is gone (NoSuchUpload)"
        case .signatureRejected(let code): "object store: the request's signature or key was refused (\(code)); check the credentials and the clock"
        case .accessDenied(let code): "object store: access denied (\(code))"
        case .entityTooSmall: "object store: a part other than the last is below the store's minimum part size (EntityTooSmall)"
        case .invalidPart(let code): "object store: the completion named a part the store does not have (\(code))"
        case .invalidRange: "object store: the range is outside the object"
        case .throttled(let status, let code): "object store: busy or failing (HTTP \(status)\(code.isEmpty ? "" : ", \(code)")); retry"
        case .unavailable(.timedOut): "object store: timed out"
        case .unavailable(.connectionFailed): "object store: unreachable or the connection failed"
        case .badResponse(let what): "object store: unusable answer (\(what))"
        case .bodyUnreadable: "object store: the part's body could not be read to its declared length"
        case .other(let status, let code): "object store: refused (HTTP \(status)\(code.isEmpty ? "" : ", \(code)"))"
        }
    }

    /// The error for a refusal with `status` and, when the body had one, S3 error `code`.
    static func from(status: Int, code: String?) -> S3Error {
        let code = code ?? ""
        switch code {
        case "NoSuchKey": return .notFound
        case "NoSuchUpload": return .uploadLost
        case "SignatureDoesNotMatch", "InvalidAccessKeyId", "ExpiredToken", "InvalidToken", "TokenRefreshRequired",
             "RequestTimeTooSkewed", "AuthorizationHeaderMalformed", "InvalidSecurity", "MissingSecurityHeader":
            return .signatureRejected(code: code)
        case "AccessDenied", "AllAccessDisabled", "AccountProblem": return .accessDenied(code: code)
        case "EntityTooSmall": return .entityTooSmall
        case "InvalidPart", "InvalidPartOrder": return .invalidPart(code: code)
        case "InvalidRange": return .invalidRange
        case "SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout", "OperationAborted": return .throttled(status: status, code: code)
        default: break
        }
        switch status {
        case 404 where code.isEmpty: return .notFound
        case 403: return .accessDenied(code: code)
        case 416: return .invalidRange
        case 429, 500, 502, 503, 504: return .throttled(status: status, code: code)
        default: return .other(status: status, code: code)
        }
    }
}
