import Testing
@testable import MailslotRelay

/// The operator's `s3://` blob-store setting: what it accepts, its defaults, the URLs and `Host`
/// headers it gives, and a clear, secret-free error for everything else.
@Suite struct S3LocationTests {
    @Test func fullSetting() throws {
        let location = try S3Location("s3://mailslot-blobs/relay/eu?endpoint=https://s3.eu-west-1.amazonaws.com&region=eu-west-1&path_style=false&payload=signed")
        #expect(location.bucket == "mailslot-blobs")
        #expect(location.prefix == "relay/eu/")
        #expect(location.scheme == "https" && location.host == "s3.eu-west-1.amazonaws.com" && location.port == nil)
        #expect(location.region == "eu-west-1" && !location.pathStyle && location.payloadSigning == .signed)
        #expect(location.hostHeader == "mailslot-blobs.s3.eu-west-1.amazonaws.com")
        #expect(location.path(forKey: location.key("blobs/ab")) == "/relay/eu/blobs/ab")
        #expect(location.url(path: "/relay/eu/blobs/ab", query: [SigV4.QueryItem("uploads")])
            == "https://mailslot-blobs.s3.eu-west-1.amazonaws.com/relay/eu/blobs/ab?uploads")
        // The canonical form reads back as the same location.
        #expect(try S3Location(location.description) == location)
    }

    @Test func defaultsAndPathStyle() throws {
        let location = try S3Location("s3://mailslot-test?endpoint=http://127.0.0.1:9000&path_style=true")
        #expect(location.prefix == "" && location.region == "us-east-1" && location.payloadSigning == .unsigned)
        #expect(location.hostHeader == "127.0.0.1:9000")
        #expect(location.path(forKey: "blobs/k") == "/mailslot-test/blobs/k")
        #expect(location.url(path: "/mailslot-test/blobs/k", query: [SigV4.QueryItem("partNumber", "2"), SigV4.QueryItem("uploadId", "a/b+c")])
            == "http://127.0.0.1:9000/mailslot-test/blobs/k?partNumber=2&uploadId=a%2Fb%2Bc")
        #expect(location.description == "s3://mailslot-test?endpoint=http://127.0.0.1:9000&region=us-east-1&path_style=true&payload=unsigned")
        // Default ports are left out of Host (it must match what the client sends and signs).
        #expect(try S3Location("s3://b-1?endpoint=https://minio.internal:443&path_style=true").hostHeader == "minio.internal")
        #expect(try S3Location("s3://b-1?endpoint=http://minio.internal:80/&path_style=true").hostHeader == "minio.internal")
        #expect(try S3Location("s3://b-1?endpoint=http://[::1]:9000&path_style=true").hostHeader == "[::1]:9000")
        #expect(try S3Location("s3://b-1/?endpoint=http%3A%2F%2Fexample.com&region=auto").prefix == "")
        // Plain HTTP is for the loopback; anything else crosses a network in the clear.
        #expect(!location.sendsInTheClear)
        #expect(try !S3Location("s3://b-1?endpoint=http://localhost:9000").sendsInTheClear)
        #expect(try !S3Location("s3://b-1?endpoint=http://[::1]:9000").sendsInTheClear)
        #expect(try S3Location("s3://b-1?endpoint=http://minio.internal:9000").sendsInTheClear)
        #expect(try !S3Location("s3://b-1?endpoint=https://minio.internal:9000").sendsInTheClear)
    }

    @Test(arguments: [
        ("https://bucket?endpoint=http://x", S3LocationError.notS3),
        ("s3://?endpoint=http://x", .missingBucket),
        ("s3://Bucket?endpoint=http://x", .invalidBucket("Bucket")),
        ("s3://ab?endpoint=http://x", .invalidBucket("ab")),
        ("s3://-abc?endpoint=http://x", .invalidBucket("-abc")),
        ("s3://a..b?endpoint=http://x", .invalidBucket("a..b")),
        ("s3://192.168.1.1?endpoint=http://x", .invalidBucket("192.168.1.1")),
        ("s3://abc//p?endpoint=http://x", .invalidPrefix("//p")),
        ("s3://abc/a//b?endpoint=http://x", .invalidPrefix("/a//b")),
        ("s3://abc/a/../b?endpoint=http://x", .invalidPrefix("/a/../b")),
        ("s3://abc/a%20b?endpoint=http://x", .invalidPrefix("/a%20b")),
        ("s3://abc", .missingEndpoint),
        ("s3://abc?region=us-east-1", .missingEndpoint),
        ("s3://abc?endpoint=", .missingEndpoint),
        ("s3://abc?endpoint=ftp://x", .invalidEndpoint(.scheme)),
        ("s3://abc?endpoint=x", .invalidEndpoint(.scheme)),
        ("s3://abc?endpoint=http://x/path", .invalidEndpoint(.path)),
        ("s3://abc?endpoint=http://x:70000", .invalidEndpoint(.port)),
        ("s3://abc?endpoint=http://x&endpoint=http://y", .repeatedParameter("endpoint")),
        ("s3://abc?endpoint=http://x&bucket=y", .unknownParameter("bucket")),
        ("s3://abc?endpoint=http://x&path_style", .malformedParameter("path_style")),
        ("s3://abc?endpoint=http://x&path_style=yes", .invalidPathStyle("yes")),
        ("s3://abc?endpoint=http://x&payload=none", .invalidPayload("none")),
        ("s3://abc?endpoint=http://x&region=US_EAST", .invalidRegion("US_EAST")),
        ("s3://abc?endpoint=http://x#frag", .fragment),
        ("s3://my.bucket?endpoint=https://s3.amazonaws.com", .dottedBucketNeedsPathStyle("my.bucket")),
    ])
    func refused(_ text: String, _ expected: S3LocationError) {
        #expect(throws: expected) { try S3Location(text) }
        #expect(!expected.description.isEmpty)
    }

    /// Credentials in the setting are refused without being repeated: the error may be logged.
    @Test func credentialsInTheURLAreRefusedWithoutEcho() {
        for text in ["s3://AKIAKEY:s3cr3tvalue@bucket?endpoint=http://x", "s3://bucket?endpoint=http://AKIAKEY:s3cr3tvalue@x"] {
            do {
                _ = try S3Location(text)
                Issue.record("accepted \(text)")
            } catch {
                #expect(error == .credentialsInURL)
                #expect(!error.description.contains("s3cr3tvalue") && !error.description.contains("AKIAKEY"))
            }
        }
    }

    @Test func credentialsComeFromTheEnvironment() throws {
        let credentials = try S3Location.credentials(from: ["AWS_ACCESS_KEY_ID": "AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret-1",
                                                            "AWS_SESSION_TOKEN": "token-1"])
        #expect(credentials.accessKeyID == "AKIAEXAMPLE" && credentials.secretAccessKey == "secret-1" && credentials.sessionToken == "token-1")
        #expect(!"\(credentials)".contains("secret-1") && !"\(credentials)".contains("token-1"))
        #expect(try S3Location.credentials(from: ["AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b", "AWS_SESSION_TOKEN": ""]).sessionToken == nil)
        #expect(throws: S3LocationError.missingCredentials) { try S3Location.credentials(from: ["AWS_ACCESS_KEY_ID": "a"]) }
        #expect(throws: S3LocationError.missingCredentials) { try S3Location.credentials(from: ["AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": ""]) }
        #expect(throws: S3LocationError.missingCredentials) { try S3Location.credentials(from: [:]) }
    }
}
