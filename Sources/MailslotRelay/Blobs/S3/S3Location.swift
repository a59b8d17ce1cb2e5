import Foundation

/// Where the relay keeps blobs in S3-compatible object storage: the operator's setting
/// `s3://BUCKET[/PREFIX]?endpoint=URL&region=R&path_style=true|false&payload=unsigned|signed`
/// (design: docs/architecture.md, "Blobs/S3"). The setting holds no secret: credentials come only
/// from the environment (``credentials(from:)``), and a URL carrying user information is refused
/// without echoing it.
///
/// - `BUCKET`: an S3 bucket name (3–63 of `a-z 0-9 . -`, starting and ending with a letter or
///   digit, not an IPv4 address).
/// - `PREFIX` (optional): the folder in the bucket every key goes under, segments of S3's safe
///   characters `A-Z a-z 0-9 ! - _ . * ' ( )`, no empty, `.` or `..` segment.
/// - `endpoint` (required): `http://` or `https://` host and optional port, no path, query or
///   user information (`https://s3.eu-west-1.amazonaws.com`, `http://127.0.0.1:9000`).
/// - `region` (default `us-east-1`): the signing region (R2: `auto`).
/// - `path_style` (default `false`): `true` puts the bucket in the path (`endpoint/bucket/key`:
///   MinIO, rclone, Ceph by default); `false` in the host name (`bucket.endpoint/key`: AWS).
/// - `payload` (default `unsigned`): `signed` signs part bodies with their SHA-256 for stores
///   that refuse `UNSIGNED-PAYLOAD`.
package struct S3Location: Sendable, Equatable, CustomStringConvertible {
    /// How part bodies are signed.
    package enum PayloadSigning: String, Sendable {
        /// `x-amz-content-sha256: UNSIGNED-PAYLOAD`: the relay has verified the part already.
        case unsigned
        /// The body's SHA-256, for stores that insist.
        case signed
    }

    /// The bucket.
    package let bucket: String
    /// The key prefix: empty, or segments ending with `/`.
    package let prefix: String
    /// `http` or `https`.
    package let scheme: String
    /// The endpoint's host: a name, an IPv4 address, or an IPv6 address without brackets.
    package let host: String
    /// The endpoint's port, when the setting names one.
    package let port: Int?
    /// The signing region.
    package let region: String
    /// Whether the bucket goes in the path rather than in the host name.
    package let pathStyle: Bool
    /// How part bodies are signed.
    package let payloadSigning: PayloadSigning

    /// Reads the setting; throws a typed error whose description tells the operator what is wrong.
    package init(_ text: String) throws(S3LocationError) {
        guard text.hasPrefix("s3://") else { throw .notS3 }
        let rest = text.dropFirst("s3://".count)
        let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? rest.endIndex
        let authority = rest[..<authorityEnd]
        // Before anything else, and without echoing the text: it may hold a key and a secret.
        guard !authority.contains("@") else { throw .credentialsInURL }
        guard !rest.contains("#") else { throw .fragment }
        let queryStart = rest.firstIndex(of: "?")
        let path = rest[authorityEnd..<(queryStart ?? rest.endIndex)]
        let bucket = String(authority)
        guard !bucket.isEmpty else { throw .missingBucket }
        guard Self.isValidBucket(bucket) else { throw .invalidBucket(bucket) }
        self.bucket = bucket

        let prefix = String(path.drop(while: { $0 == "/" }).dropLast(path.hasSuffix("/") ? 1 : 0))
        guard path.isEmpty || path == "/" || (path.hasPrefix("/") && !path.hasPrefix("//")) else { throw .invalidPrefix(String(path)) }
        if !prefix.isEmpty {
            guard prefix.utf8.count <= 512, prefix.split(separator: "/", omittingEmptySubsequences: false).allSatisfy(Self.isValidPrefixSegment)
            else { throw .invalidPrefix(String(path)) }
            self.prefix = prefix + "/"
        } else {
            self.prefix = ""
        }

        var parameters: [String: String] = [:]
        if let queryStart {
            let query = rest[rest.index(after: queryStart)...]
            for pair in query.split(separator: "&", omittingEmptySubsequences: false) {
                let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                guard parts.count == 2, let name = String(parts[0]).removingPercentEncoding,
                      let value = String(parts[1]).removingPercentEncoding else { throw .malformedParameter(String(pair.prefix(40))) }
                guard ["endpoint", "region", "path_style", "payload"].contains(name) else { throw .unknownParameter(name) }
                guard parameters[name] == nil else { throw .repeatedParameter(name) }
                parameters[name] = value
            }
        }

        guard let endpoint = parameters["endpoint"], !endpoint.isEmpty else { throw .missingEndpoint }
        let endpointParts = try Self.parseEndpoint(endpoint)
        self.scheme = endpointParts.scheme
        self.host = endpointParts.host
        self.port = endpointParts.port

        let region = parameters["region"] ?? "us-east-1"
        guard !region.isEmpty, region.utf8.count <= 64,
              region.utf8.allSatisfy({ ($0 >= UInt8(ascii: "a") && $0 <= UInt8(ascii: "z")) || ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9")) || $0 == UInt8(ascii: "-") })
        else { throw .invalidRegion(region) }
        self.region = region

        switch parameters["path_style"] ?? "false" {
        case "true": pathStyle = true
        case "false": pathStyle = false
        case let other: throw .invalidPathStyle(other)
        }
        guard let signing = PayloadSigning(rawValue: parameters["payload"] ?? "unsigned") else {
            throw .invalidPayload(parameters["payload"] ?? "")
        }
        payloadSigning = signing
        // A dotted bucket in the host name breaks TLS (the certificate's `*.` covers one label).
        if !pathStyle && scheme == "https" && bucket.contains(".") { throw .dottedBucketNeedsPathStyle(bucket) }
    }

    /// The credentials in `environment`: `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`
    /// (required), `AWS_SESSION_TOKEN` (temporary credentials). Nowhere else: never the URL, a flag
    /// or a file, so that no secret sits in a command line, a unit file or a log.
    package static func credentials(from environment: [String: String]) throws(S3LocationError) -> SigV4.Credentials {
        guard let key = environment["AWS_ACCESS_KEY_ID"], !key.isEmpty,
              let secret = environment["AWS_SECRET_ACCESS_KEY"], !secret.isEmpty else { throw .missingCredentials }
        return SigV4.Credentials(accessKeyID: key, secretAccessKey: secret, sessionToken: environment["AWS_SESSION_TOKEN"])
    }

    /// The canonical form of the setting (it holds no secret).
    package var description: String {
        var endpoint = "\(scheme)://\(host.contains(":") ? "[\(host)]" : host)"
        if let port { endpoint += ":\(port)" }
        let path = prefix.isEmpty ? "" : "/" + prefix.dropLast()
        return "s3://\(bucket)\(path)?endpoint=\(endpoint)&region=\(region)&path_style=\(pathStyle)&payload=\(payloadSigning.rawValue)"
    }

    /// Whether requests would cross a network in the clear: `http://` to a host other than the
    /// loopback (`localhost`, `127.x.x.x`, `::1`). The relay's configuration check warns about it.
    package var sendsInTheClear: Bool {
        guard scheme == "http" else { return false }
        return !(host == "localhost" || host == "::1" || host.hasPrefix("127."))
    }

    // MARK: Requests

    /// The `Host` header for requests to the bucket: the endpoint's host (with the bucket in front
    /// unless path style), with the port when it is not the scheme's default.
    package var hostHeader: String {
        let name = host.contains(":") ? "[\(host)]" : host
        let base = pathStyle ? name : "\(bucket).\(name)"
        if let port, port != (scheme == "https" ? 443 : 80) { return "\(base):\(port)" }
        return base
    }

    /// The decoded request path for `key` (a key under the prefix is `prefix + name`): `/bucket/key`
    /// in path style, `/key` otherwise.
    package func path(forKey key: String) -> String {
        pathStyle ? "/\(bucket)/\(key)" : "/\(key)"
    }

    /// The decoded request path of the bucket itself (ListMultipartUploads): `/bucket` in path
    /// style, `/` otherwise.
    package var bucketPath: String {
        pathStyle ? "/\(bucket)" : "/"
    }

    /// The key of `name` under the prefix.
    package func key(_ name: String) -> String { prefix + name }

    /// The URL for a request: scheme, host header, the path percent-encoded as it is signed, and
    /// the query encoded the same way (a parameter without a value as its bare name, `?uploads`;
    /// the signature reads it as `uploads=` either way).
    package func url(path: String, query: [SigV4.QueryItem]) -> String {
        let queryText = query.isEmpty ? "" : "?" + query.map { $0.value.isEmpty ? SigV4.uriEncode($0.name) : "\(SigV4.uriEncode($0.name))=\(SigV4.uriEncode($0.value))" }.joined(separator: "&")
        return "\(scheme)://\(hostHeader)\(SigV4.canonicalPath(path))\(queryText)"
    }

    // MARK: Grammar

    /// `http[s]://HOST[:PORT][/]`, by hand: no user information, path, query or fragment; a
    /// host of letters, digits, `.` and `-` (or an IPv6 address in brackets); a port 1…65535.
    static func parseEndpoint(_ text: String) throws(S3LocationError) -> (scheme: String, host: String, port: Int?) {
        let lowered = text.lowercased()
        let scheme: String
        if lowered.hasPrefix("http://") { scheme = "http" } else if lowered.hasPrefix("https://") { scheme = "https" } else {
            throw .invalidEndpoint(.scheme)
        }
        let rest = text.dropFirst(scheme.count + 3)
        let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? rest.endIndex
        let authority = rest[..<authorityEnd]
        guard !authority.contains("@") else { throw .credentialsInURL }
        guard rest[authorityEnd...].isEmpty || rest[authorityEnd...] == "/" else { throw .invalidEndpoint(.path) }
        var host: Substring
        var portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw .invalidEndpoint(.host) }
            host = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw .invalidEndpoint(.host) }
                portText = after.dropFirst()
            }
            guard !host.isEmpty, host.allSatisfy({ $0.isHexDigit || $0 == ":" || $0 == "." }) else { throw .invalidEndpoint(.host) }
        } else {
            if let colon = authority.lastIndex(of: ":") {
                host = authority[..<colon]
                portText = authority[authority.index(after: colon)...]
            } else {
                host = authority
            }
            guard !host.isEmpty, host.utf8.allSatisfy({ byte in
                (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
                    || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-")
            }) else { throw .invalidEndpoint(.host) }
        }
        var port: Int?
        if let portText {
            guard !portText.isEmpty, portText.count <= 5, portText.allSatisfy(\.isASCII), let number = Int(portText), (1...65_535).contains(number)
            else { throw .invalidEndpoint(.port) }
            port = number
        }
        return (scheme, host.lowercased(), port)
    }

    /// S3's bucket naming rules (general purpose buckets).
    static func isValidBucket(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard (3...63).contains(bytes.count) else { return false }
        func isLowerOrDigit(_ byte: UInt8) -> Bool {
            (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
        }
        guard bytes.allSatisfy({ isLowerOrDigit($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "-") }),
              isLowerOrDigit(bytes.first!), isLowerOrDigit(bytes.last!), !name.contains("..") else { return false }
        let octets = name.split(separator: ".", omittingEmptySubsequences: false)
        if octets.count == 4 && octets.allSatisfy({ UInt8($0) != nil }) { return false }  // looks like an IP address
        return true
    }

    /// A prefix segment: S3's "safe" key characters only, not empty, `.` or `..`.
    static func isValidPrefixSegment(_ segment: Substring) -> Bool {
        guard !segment.isEmpty, segment != ".", segment != ".." else { return false }
        return segment.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "!"), UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "*"),
                 UInt8(ascii: "'"), UInt8(ascii: "("), UInt8(ascii: ")"):
                true
            default:
                false
            }
        }
    }
}

/// What is wrong with an S3 blob-store setting or its credentials. The descriptions are sentences
/// for the operator; none repeats a secret (a URL with user information is not echoed at all).
package enum S3LocationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What is wrong with the `endpoint` parameter.
    package enum EndpointProblem: Sendable, Equatable {
        /// Not `http://` or `https://`.
        case scheme
        /// No host, or one with characters a host name cannot have.
        case host
        /// A path, query or fragment after the host.
        case path
        /// A port outside 1…65535.
        case port
    }

    /// The text does not start with `s3://`.
    case notS3
    /// User information (`KEY:SECRET@`) in the setting or the endpoint.
    case credentialsInURL
    /// A `#fragment`.
    case fragment
    /// `s3://` with no bucket.
    case missingBucket
    /// A bucket name S3 does not allow.
    case invalidBucket(String)
    /// A prefix with empty, `.` or `..` segments or characters outside S3's safe set.
    case invalidPrefix(String)
    /// A query part that is not `name=value` (or not valid percent-encoding).
    case malformedParameter(String)
    /// A parameter this setting does not have.
    case unknownParameter(String)
    /// A parameter given twice.
    case repeatedParameter(String)
    /// No `endpoint` parameter.
    case missingEndpoint
    /// An unusable `endpoint`.
    case invalidEndpoint(EndpointProblem)
    /// A region that is not lowercase letters, digits and `-`.
    case invalidRegion(String)
    /// `path_style` other than `true` or `false`.
    case invalidPathStyle(String)
    /// `payload` other than `unsigned` or `signed`.
    case invalidPayload(String)
    /// A bucket with dots in the host name over TLS.
    case dottedBucketNeedsPathStyle(String)
    /// `AWS_ACCESS_KEY_ID` or `AWS_SECRET_ACCESS_KEY` unset or empty.
    case missingCredentials

    private static let form = "s3://BUCKET[/PREFIX]?endpoint=URL&region=R&path_style=true|false&payload=unsigned|signed"

    /// The sentence for the operator.
    package var description: String {
        switch self {
        case .notS3: "the blob store takes \(Self.form)"
        case .credentialsInURL:
            "the blob store setting must not carry credentials (user information before '@'); set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment instead"
        case .fragment: "the blob store setting has a '#fragment'; it takes \(Self.form)"
        case .missingBucket: "the blob store setting names no bucket: \(Self.form)"
        case .invalidBucket(let name):
            "'\(name)' is not an S3 bucket name (3-63 characters of a-z, 0-9, '.' and '-', starting and ending with a letter or digit, not an IP address)"
        case .invalidPrefix(let prefix):
            "the blob store prefix '\(prefix)' is not valid: segments of A-Z a-z 0-9 ! - _ . * ' ( ), none empty, '.' or '..', at most 512 bytes"
        case .malformedParameter(let text): "the blob store setting's parameter '\(text)' is not name=value"
        case .unknownParameter(let name): "the blob store setting has no parameter '\(name)' (endpoint, region, path_style, payload)"
        case .repeatedParameter(let name): "the blob store setting gives '\(name)' more than once"
        case .missingEndpoint: "the blob store setting needs endpoint=URL (e.g. endpoint=https://s3.eu-west-1.amazonaws.com): \(Self.form)"
        case .invalidEndpoint(.scheme): "the blob store endpoint must start with http:// or https://"
        case .invalidEndpoint(.host): "the blob store endpoint names no valid host (letters, digits, '.' and '-', or [IPv6])"
        case .invalidEndpoint(.path): "the blob store endpoint must be scheme://host[:port] only (no path, query or fragment)"
        case .invalidEndpoint(.port): "the blob store endpoint's port must be 1-65535"
        case .invalidRegion(let region): "the blob store region '\(region)' is not valid (lowercase letters, digits and '-', e.g. us-east-1)"
        case .invalidPathStyle(let value): "path_style is true or false, not '\(value)'"
        case .invalidPayload(let value): "payload is unsigned or signed, not '\(value)'"
        case .dottedBucketNeedsPathStyle(let bucket):
            "the bucket '\(bucket)' has dots, which TLS cannot verify in a host name: add path_style=true"
        case .missingCredentials:
            "the S3 blob store needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment (and AWS_SESSION_TOKEN for temporary credentials)"
        }
    }
}
