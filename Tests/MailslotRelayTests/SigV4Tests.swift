import Foundation
import MailslotCrypto
import Testing
@testable import MailslotRelay

/// The object-store signer against AWS's own test suite (awslabs/aws-c-auth,
/// `tests/aws-signing-test-suite/v4` @495329c2, in Fixtures/aws-sigv4 with its licence) and the S3
/// documentation's four header-signing examples. Each case checks the canonical request, the
/// string to sign and the signature.
@Suite struct SigV4Tests {
    static let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/aws-sigv4/v4")

    /// The suite's `*-normalized` path cases whose normalised path differs from the request's
    /// (`/example/..` → `/`, `//` → `/`, …). S3 never normalises paths — a key may be `a/../b` —
    /// so the signer has no normaliser; the `*-unnormalized` twin of each runs instead.
    static let normalisationCases: Set<String> = [
        "get-relative-normalized", "get-relative-relative-normalized", "get-slash-dot-slash-normalized",
        "get-slash-normalized", "get-slash-pointless-dot-normalized", "get-slashes-normalized",
    ]

    static let allCases: [String] = ((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []).sorted()
    static let applicable: [String] = allCases.filter { !normalisationCases.contains($0) }

    /// All 38 folders are there, the six skipped ones among them: a lost fixture cannot pass
    /// silently as a skipped or missing case.
    @Test func suiteIsComplete() {
        #expect(Self.allCases.count == 38)
        #expect(Self.normalisationCases.isSubset(of: Set(Self.allCases)))
        #expect(Self.applicable.count == 32)
    }

    @Test(arguments: applicable)
    func suiteCase(_ name: String) throws {
        let caseFolder = Self.folder.appendingPathComponent(name)
        func text(_ file: String) throws -> String {
            try String(contentsOf: caseFolder.appendingPathComponent(file), encoding: .utf8)
        }
        let context = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: caseFolder.appendingPathComponent("context.json"))) as? [String: Any])
        let credentials = try #require(context["credentials"] as? [String: Any])
        let signer = SigV4(
            credentials: SigV4.Credentials(accessKeyID: try #require(credentials["access_key_id"] as? String),
                                           secretAccessKey: try #require(credentials["secret_access_key"] as? String),
                                           sessionToken: credentials["token"] as? String),
            region: try #require(context["region"] as? String), service: try #require(context["service"] as? String),
            sendsPayloadHash: context["sign_body"] as? Bool ?? false,
            signsSessionToken: !(context["omit_session_token"] as? Bool ?? false))
        let timestamp = try #require(context["timestamp"] as? String)
        let time = try #require(ISO8601DateFormatter().date(from: timestamp))
        let request = try Self.parse(try text("request.txt"))

        let signed = signer.sign(request, at: Int64(time.timeIntervalSince1970))
        #expect(signed.canonicalRequest == (try text("header-canonical-request.txt")))
        #expect(signed.stringToSign == (try text("header-string-to-sign.txt")))
        #expect(signed.signature == (try text("header-signature.txt")).trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(signed.authorization.hasSuffix("Signature=\(signed.signature)"))
        #expect(signed.headers.last?.value == signed.authorization)
    }

    /// A request.txt: `METHOD PATH[?QUERY] HTTP/1.1`, header lines (a line starting with white
    /// space continues the previous value), an empty line, the body. Path and query are decoded
    /// (the signer encodes them); the payload hash is the body's SHA-256.
    static func parse(_ text: String) throws -> SigV4.Request {
        let (head, body): (Substring, Substring)
        if let blank = text.range(of: "\n\n") {
            (head, body) = (text[..<blank.lowerBound], text[blank.upperBound...])
        } else {
            (head, body) = (Substring(text), "")
        }
        var lines = head.split(separator: "\n", omittingEmptySubsequences: false)
        let requestLine = lines.removeFirst()
        let method = try #require(requestLine.split(separator: " ").first)
        let target = requestLine.dropFirst(method.count + 1).dropLast(" HTTP/1.1".count)
        let questionMark = target.firstIndex(of: "?")
        let path = try #require(String(target[..<(questionMark ?? target.endIndex)]).removingPercentEncoding)
        var query: [SigV4.QueryItem] = []
        if let questionMark {
            for pair in target[target.index(after: questionMark)...].split(separator: "&") {
                let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                query.append(SigV4.QueryItem(try #require(String(parts[0]).removingPercentEncoding),
                                             parts.count > 1 ? try #require(String(parts[1]).removingPercentEncoding) : ""))
            }
        }
        var headers: [SigV4.Header] = []
        for line in lines where !line.isEmpty {
            if line.first == " " || line.first == "\t" {
                headers[headers.count - 1].value += "\n" + line
            } else {
                let colon = try #require(line.firstIndex(of: ":"))
                headers.append(SigV4.Header(String(line[..<colon]), String(line[line.index(after: colon)...])))
            }
        }
        return SigV4.Request(method: String(method), path: path, query: query, headers: headers,
                             payloadHash: SigV4.hex(sha256(Array(body.utf8))))
    }

    // MARK: The S3 documentation's examples

    /// docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html: the example key pair,
    /// 2013-05-24T00:00:00Z, us-east-1, bucket `examplebucket` in the host name.
    static let documentationSigner = SigV4(
        credentials: SigV4.Credentials(accessKeyID: "AKIAIOSFODNN7EXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
        region: "us-east-1")
    static let documentationTime: Int64 = 1_369_353_600
    static let host = SigV4.Header("Host", "examplebucket.s3.amazonaws.com")

    @Test func documentationGetObject() {
        let signed = Self.documentationSigner.sign(
            SigV4.Request(method: "GET", path: "/test.txt", headers: [Self.host, SigV4.Header("Range", "bytes=0-9")],
                          payloadHash: SigV4.emptyPayloadHash),
            at: Self.documentationTime)
        #expect(signed.canonicalRequest == """
            GET
            /test.txt

            host:examplebucket.s3.amazonaws.com
            range:bytes=0-9
            x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
            x-amz-date:20130524T000000Z

            host;range;x-amz-content-sha256;x-amz-date
            e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
            """)
        #expect(signed.stringToSign == """
            AWS4-HMAC-SHA256
            20130524T000000Z
            20130524/us-east-1/s3/aws4_request
            7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972
            """)
        #expect(signed.signature == "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
        #expect(signed.authorization == "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            + "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
        #expect(signed.headers.map(\.name) == ["x-amz-date", "x-amz-content-sha256", "Authorization"])
    }

    @Test func documentationPutObject() {
        let body = Array("Welcome to Amazon S3.".utf8)
        let signed = Self.documentationSigner.sign(
            SigV4.Request(method: "PUT", path: "/test$file.text",
                          headers: [Self.host, SigV4.Header("Date", "Fri, 24 May 2013 00:00:00 GMT"),
                                    SigV4.Header("x-amz-storage-class", "REDUCED_REDUNDANCY")],
                          payloadHash: SigV4.hex(sha256(body))),
            at: Self.documentationTime)
        #expect(signed.canonicalRequest.hasPrefix("PUT\n/test%24file.text\n\ndate:Fri, 24 May 2013 00:00:00 GMT\n"))
        #expect(signed.signature == "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd")
    }

    @Test func documentationGetBucketLifecycle() {
        let signed = Self.documentationSigner.sign(
            SigV4.Request(method: "GET", path: "/", query: [SigV4.QueryItem("lifecycle")], headers: [Self.host],
                          payloadHash: SigV4.emptyPayloadHash),
            at: Self.documentationTime)
        #expect(signed.canonicalRequest.hasPrefix("GET\n/\nlifecycle=\n"))
        #expect(signed.signature == "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543")
    }

    @Test func documentationListObjects() {
        let signed = Self.documentationSigner.sign(
            SigV4.Request(method: "GET", path: "/", query: [SigV4.QueryItem("prefix", "J"), SigV4.QueryItem("max-keys", "2")],
                          headers: [Self.host], payloadHash: SigV4.emptyPayloadHash),
            at: Self.documentationTime)
        #expect(signed.canonicalRequest.hasPrefix("GET\n/\nmax-keys=2&prefix=J\n"))
        #expect(signed.signature == "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7")
    }

    // MARK: The relay's own requests

    /// A temporary credential's token is signed; the credentials never show their secrets.
    @Test func sessionTokenIsSignedAndCredentialsRedact() {
        let credentials = SigV4.Credentials(accessKeyID: "AKIDEXAMPLE", secretAccessKey: "very-secret-key", sessionToken: "token-value")
        let signed = SigV4(credentials: credentials, region: "auto").sign(
            SigV4.Request(method: "DELETE", path: "/bucket/key", headers: [SigV4.Header("host", "example.com")],
                          payloadHash: SigV4.emptyPayloadHash), at: 0)
        #expect(signed.canonicalRequest.contains("\nx-amz-security-token:token-value\n"))
        #expect(signed.authorization.contains("SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token,"))
        #expect(signed.stringToSign.contains("19700101/auto/s3/aws4_request"))
        var dumped = ""
        dump(credentials, to: &dumped)
        for text in [credentials.description, credentials.debugDescription, String(describing: credentials), String(reflecting: credentials), dumped] {
            #expect(!text.contains("very-secret-key") && !text.contains("token-value") && !text.contains("AKIDEXAMPLE"), "\(text)")
        }
        #expect(SigV4.Credentials(accessKeyID: "a", secretAccessKey: "b", sessionToken: "").sessionToken == nil)
    }

    /// Keys are encoded once per segment (`/` kept), query values fully (`/`, `=`, `+` too).
    @Test func encoding() {
        #expect(SigV4.canonicalPath("/bucket/blobs/a b+c/ሴ") == "/bucket/blobs/a%20b%2Bc/%E1%88%B4")
        #expect(SigV4.canonicalPath("") == "/")
        #expect(SigV4.canonicalQuery([SigV4.QueryItem("uploadId", "a/b=c+d"), SigV4.QueryItem("partNumber", "10")])
            == "partNumber=10&uploadId=a%2Fb%3Dc%2Bd")
    }

    /// The civil date of a time, across leap days and centuries (the scope's date must be UTC's).
    @Test func timestamps() {
        #expect(SigV4.timestamp(0) == "19700101T000000Z")
        #expect(SigV4.timestamp(1_440_938_160) == "20150830T123600Z")
        #expect(SigV4.timestamp(951_782_400) == "20000229T000000Z")
        #expect(SigV4.timestamp(4_107_542_399) == "21000228T235959Z")
        #expect(SigV4.timestamp(4_107_542_400) == "21000301T000000Z")
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        for _ in 0..<500 {
            let time = Int64.random(in: 0...4_102_444_800)
            let parts = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second],
                                                from: Date(timeIntervalSince1970: TimeInterval(time)))
            let expected = String(format: "%04d%02d%02dT%02d%02d%02dZ", parts.year!, parts.month!, parts.day!, parts.hour!, parts.minute!, parts.second!)
            #expect(SigV4.timestamp(time) == expected)
        }
    }
}
