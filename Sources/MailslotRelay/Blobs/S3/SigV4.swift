import MailslotCrypto

/// AWS Signature Version 4 for the header form (`Authorization: AWS4-HMAC-SHA256 …`), as S3 and
/// S3-compatible stores (R2, MinIO, Ceph, rclone) require it. Pure: the time, credentials,
/// region, service and the request's parts go in; the headers to add come out. No I/O, no clock.
///
/// Paths are given decoded and each segment is percent-encoded once, S3's rule (other AWS
/// services encode twice and normalise `.`/`..`; S3 does neither, so this signer does neither).
/// Checked against awslabs/aws-c-auth's signing test suite and the S3 documentation's examples
/// (`SigV4Tests`).
package struct SigV4: Sendable {
    /// The key pair (and, for temporary credentials, the session token) requests are signed with.
    /// Its descriptions never show the secret or the token: it may end up in a log by accident.
    package struct Credentials: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
        /// The access key id (`AKIA…`), sent in every `Authorization` header.
        package let accessKeyID: String
        /// The secret access key. Never sent, never shown.
        package let secretAccessKey: String
        /// The session token of temporary credentials (`x-amz-security-token`), or nil.
        package let sessionToken: String?

        /// Credentials from their parts; an empty session token counts as none.
        package init(accessKeyID: String, secretAccessKey: String, sessionToken: String? = nil) {
            self.accessKeyID = accessKeyID
            self.secretAccessKey = secretAccessKey
            self.sessionToken = sessionToken.flatMap { $0.isEmpty ? nil : $0 }
        }

        /// Says what kind of credentials these are, nothing of their values.
        package var description: String {
            "S3 credentials (access key id, secret access key\(sessionToken == nil ? "" : ", session token"): redacted)"
        }

        /// The same as ``description``: `debugPrint` must not show the secret either.
        package var debugDescription: String { description }

        /// No children: `dump` and debuggers' reflection must not list the fields.
        package var customMirror: Mirror { Mirror(self, children: [], displayStyle: .struct) }
    }

    /// One request to sign. Header names may have any case; values are sent as given and signed
    /// trimmed, with runs of white space as one space (the canonical form).
    package struct Request: Sendable {
        /// `GET`, `PUT`, …
        package var method: String
        /// The decoded path, starting with `/` (`/bucket/key`, or `/key` with virtual-hosted buckets).
        package var path: String
        /// Decoded query parameters, in any order (a parameter without a value: empty value).
        package var query: [QueryItem]
        /// The headers to sign and send. Must include `host` (the `Host` header sent, port included
        /// when it is not the scheme's default).
        package var headers: [Header]
        /// The payload's hex SHA-256, or ``SigV4/unsignedPayload``.
        package var payloadHash: String

        /// A request from its parts.
        package init(method: String, path: String, query: [QueryItem] = [], headers: [Header], payloadHash: String) {
            self.method = method
            self.path = path
            self.query = query
            self.headers = headers
            self.payloadHash = payloadHash
        }
    }

    /// A query parameter, decoded.
    package struct QueryItem: Sendable, Equatable {
        /// The parameter's name.
        package var name: String
        /// Its value; empty for a parameter written without `=`.
        package var value: String

        /// A parameter from its name and value.
        package init(_ name: String, _ value: String = "") {
            self.name = name
            self.value = value
        }
    }

    /// An HTTP header field.
    package struct Header: Sendable, Equatable {
        /// The field name, in any case.
        package var name: String
        /// The field value.
        package var value: String

        /// A field from its name and value.
        package init(_ name: String, _ value: String) {
            self.name = name
            self.value = value
        }
    }

    /// The outcome of signing: the headers to add to the request, and the intermediate strings
    /// (for the tests and for diagnosing a `SignatureDoesNotMatch` against the store's own).
    package struct Signed: Sendable {
        /// `x-amz-date`, `x-amz-content-sha256` (when the signer sends it), `x-amz-security-token`
        /// (with temporary credentials) and `Authorization`, to add to the request's headers.
        package let headers: [Header]
        /// The canonical request that was hashed.
        package let canonicalRequest: String
        /// The string that was signed.
        package let stringToSign: String
        /// The signature, 64 lowercase hex digits.
        package let signature: String
        /// The `Authorization` header's value.
        package let authorization: String
    }

    /// The payload hash of a body that is not signed (`UploadPart` bodies: the relay has already
    /// checked them with BLAKE2b, and SHA-256 would double the CPU per byte).
    package static let unsignedPayload = "UNSIGNED-PAYLOAD"
    /// The hex SHA-256 of an empty body (`GET`, `HEAD`, `DELETE`, `CreateMultipartUpload`).
    package static let emptyPayloadHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

    /// The credentials requests are signed with.
    package var credentials: Credentials
    /// The region (`us-east-1`; R2: `auto`).
    package var region: String
    /// The service (`s3`).
    package var service: String
    /// Whether to add and sign `x-amz-content-sha256` with the payload hash. S3 requires it on
    /// every request; the generic suite's services do not use it unless they sign the body.
    package var sendsPayloadHash: Bool
    /// Whether `x-amz-security-token` is among the signed headers (S3: yes). When false it is
    /// added after signing, unsigned (services that sign the token elsewhere).
    package var signsSessionToken: Bool

    /// A signer for `service` in `region` with `credentials`.
    package init(credentials: Credentials, region: String, service: String = "s3", sendsPayloadHash: Bool = true,
                 signsSessionToken: Bool = true) {
        self.credentials = credentials
        self.region = region
        self.service = service
        self.sendsPayloadHash = sendsPayloadHash
        self.signsSessionToken = signsSessionToken
    }

    /// Signs `request` as made at `time` (seconds since 1970 UTC; AWS refuses times more than
    /// 15 minutes off its clock).
    package func sign(_ request: Request, at time: Int64) -> Signed {
        let stamp = Self.timestamp(time)
        let day = String(stamp.prefix(8))
        var headers = request.headers
        var added: [Header] = [Header("x-amz-date", stamp)]
        if sendsPayloadHash { added.append(Header("x-amz-content-sha256", request.payloadHash)) }
        var unsigned: [Header] = []
        if let token = credentials.sessionToken {
            if signsSessionToken { added.append(Header("x-amz-security-token", token)) } else { unsigned.append(Header("x-amz-security-token", token)) }
        }
        headers += added

        let (canonicalHeaders, signedHeaders) = Self.canonicalHeaders(headers)
        let canonicalRequest = [
            request.method,
            Self.canonicalPath(request.path),
            Self.canonicalQuery(request.query),
            canonicalHeaders,
            signedHeaders,
            request.payloadHash,
        ].joined(separator: "\n")
        let scope = "\(day)/\(region)/\(service)/aws4_request"
        let stringToSign = ["AWS4-HMAC-SHA256", stamp, scope, Self.hex(sha256(Array(canonicalRequest.utf8)))].joined(separator: "\n")

        var key = signingKey(day: day)
        defer { wipe(&key) }
        let signature = Self.hex(hmacSHA256(key: key, Array(stringToSign.utf8)))
        let authorization = "AWS4-HMAC-SHA256 Credential=\(credentials.accessKeyID)/\(scope), SignedHeaders=\(signedHeaders), Signature=\(signature)"
        return Signed(headers: added + unsigned + [Header("Authorization", authorization)], canonicalRequest: canonicalRequest,
                      stringToSign: stringToSign, signature: signature, authorization: authorization)
    }

    /// kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, day), region), service), "aws4_request").
    /// Every intermediate key is wiped.
    private func signingKey(day: String) -> [UInt8] {
        var secret = Array(("AWS4" + credentials.secretAccessKey).utf8)
        var key = hmacSHA256(key: secret, Array(day.utf8))
        wipe(&secret)
        for part in [region, service, "aws4_request"] {
            var next = hmacSHA256(key: key, Array(part.utf8))
            swap(&key, &next)
            wipe(&next)
        }
        return key
    }

    // MARK: Canonical form

    /// `/`-separated segments, each percent-encoded once (unreserved characters kept).
    package static func canonicalPath(_ path: String) -> String {
        let encoded = path.split(separator: "/", omittingEmptySubsequences: false).map { uriEncode(String($0)) }.joined(separator: "/")
        return encoded.isEmpty ? "/" : encoded
    }

    /// Names and values percent-encoded (`/` and `=` too), sorted by name then value, `&`-joined.
    package static func canonicalQuery(_ query: [QueryItem]) -> String {
        query.map { (uriEncode($0.name), uriEncode($0.value)) }
            .sorted { $0.0 == $1.0 ? Array($0.1.utf8).lexicographicallyPrecedes(Array($1.1.utf8)) : Array($0.0.utf8).lexicographicallyPrecedes(Array($1.0.utf8)) }
            .map { "\($0.0)=\($0.1)" }
            .joined(separator: "&")
    }

    /// The canonical header block (`name:value\n` per name, lowercase names sorted, repeated
    /// names' values comma-joined in order) and the signed-headers list (`a;b;c`).
    package static func canonicalHeaders(_ headers: [Header]) -> (block: String, signed: String) {
        var values: [String: [String]] = [:]
        var order: [String] = []
        for header in headers {
            let name = header.name.lowercased()
            if values[name] == nil { order.append(name) }
            values[name, default: []].append(trimAll(header.value))
        }
        let names = order.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
        let block = names.map { "\($0):\(values[$0]!.joined(separator: ","))\n" }.joined()
        return (block, names.joined(separator: ";"))
    }

    /// Leading and trailing white space removed, every inner run of it (folded lines included)
    /// as one space.
    static func trimAll(_ value: String) -> String {
        value.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }).joined(separator: " ")
    }

    /// RFC 3986 percent-encoding of every byte of the UTF-8 form but the unreserved
    /// `A-Z a-z 0-9 - . _ ~`, with uppercase hex digits.
    package static func uriEncode(_ text: String) -> String {
        var output = ""
        output.reserveCapacity(text.utf8.count)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                output.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                output += "%"
                output.unicodeScalars.append(Unicode.Scalar(upperHexDigits[Int(byte >> 4)]))
                output.unicodeScalars.append(Unicode.Scalar(upperHexDigits[Int(byte & 0x0F)]))
            }
        }
        return output
    }

    private static let upperHexDigits = Array("0123456789ABCDEF".utf8)
    private static let lowerHexDigits = Array("0123456789abcdef".utf8)

    /// Lowercase hex.
    package static func hex(_ bytes: [UInt8]) -> String {
        var output = [UInt8]()
        output.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            output.append(lowerHexDigits[Int(byte >> 4)])
            output.append(lowerHexDigits[Int(byte & 0x0F)])
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// `YYYYMMDDTHHMMSSZ` for `time` seconds since 1970 UTC: RFC 3339's form
    /// (``Timestamp/format(_:)``, the one calendar the project has) without its separators and
    /// offset, for S3's years 0000–9999.
    package static func timestamp(_ time: Int64) -> String {
        let rfc3339 = Timestamp.format(time)  // YYYY-MM-DDTHH:MM:SS+00:00
        return String(rfc3339.prefix(19).filter { $0 != "-" && $0 != ":" }) + "Z"
    }
}
