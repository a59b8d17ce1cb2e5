import Testing
@testable import MailslotRelay

/// Reading the object store's answers without a server: the XML scanner on S3's documented
/// answers (and near misses), the error each status and code stands for, and `Content-Range`.
@Suite struct S3ResponseTests {
    @Test func initiateAnswer() {
        let answer = Array("""
            <?xml version="1.0" encoding="UTF-8"?>
            <!-- a comment <UploadId>not this</UploadId> -->
            <InitiateMultipartUploadResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
              <Bucket>example-bucket</Bucket>
              <Key>example-object</Key>
              <UploadIdMarker>nope</UploadIdMarker>
              <UploadId>VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA&amp;x=&#65;&#x42;</UploadId>
            </InitiateMultipartUploadResult>
            """.utf8)
        #expect(S3XML.rootName(answer) == "InitiateMultipartUploadResult")
        #expect(S3XML.text(of: "UploadId", in: answer) == "VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA&x=AB")
        #expect(S3XML.text(of: "Bucket", in: answer) == "example-bucket")
        #expect(S3XML.text(of: "Missing", in: answer) == nil)
    }

    @Test func errorAnswer() {
        let answer = Array("""
            <?xml version="1.0" encoding="UTF-8"?>
            <Error><Code>NoSuchUpload</Code><Message>The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed.</Message><UploadId>abc</UploadId><RequestId>4442587FB7D0A2F9</RequestId></Error>
            """.utf8)
        #expect(S3XML.rootName(answer) == "Error")
        #expect(S3XML.text(of: "Code", in: answer) == "NoSuchUpload")
        #expect(S3XML.text(of: "Message", in: answer)?.hasPrefix("The specified upload") == true)
        #expect(S3XML.rootName(Array("<Empty/>".utf8)) == "Empty")
        #expect(S3XML.text(of: "Empty", in: Array("<A><Empty/></A>".utf8)) == "")
        #expect(S3XML.rootName(Array("not xml".utf8)) == nil)
        #expect(S3XML.rootName([]) == nil)
        #expect(S3XML.text(of: "Code", in: Array("<Error><Code>Unclosed".utf8)) == nil)
        #expect(S3XML.escape("\"etag\"&<>'") == "&quot;etag&quot;&amp;&lt;&gt;&apos;")
    }

    @Test func errorsByStatusAndCode() {
        #expect(S3Error.from(status: 404, code: "NoSuchKey") == .notFound)
        #expect(S3Error.from(status: 404, code: nil) == .notFound)
        #expect(S3Error.from(status: 404, code: "NoSuchUpload") == .uploadLost)
        #expect(S3Error.from(status: 404, code: "NoSuchBucket") == .other(status: 404, code: "NoSuchBucket"))
        #expect(S3Error.from(status: 403, code: "SignatureDoesNotMatch") == .signatureRejected(code: "SignatureDoesNotMatch"))
        #expect(S3Error.from(status: 403, code: "InvalidAccessKeyId") == .signatureRejected(code: "InvalidAccessKeyId"))
        #expect(S3Error.from(status: 403, code: "AccessDenied") == .accessDenied(code: "AccessDenied"))
        #expect(S3Error.from(status: 403, code: nil) == .accessDenied(code: ""))
        #expect(S3Error.from(status: 400, code: "EntityTooSmall") == .entityTooSmall)
        #expect(S3Error.from(status: 400, code: "InvalidPart") == .invalidPart(code: "InvalidPart"))
        #expect(S3Error.from(status: 416, code: "InvalidRange") == .invalidRange)
        #expect(S3Error.from(status: 503, code: "SlowDown") == .throttled(status: 503, code: "SlowDown"))
        #expect(S3Error.from(status: 200, code: "InternalError") == .throttled(status: 200, code: "InternalError"))
        #expect(S3Error.from(status: 502, code: nil) == .throttled(status: 502, code: ""))
        #expect(S3Error.from(status: 400, code: "InvalidArgument") == .other(status: 400, code: "InvalidArgument"))
        #expect(S3Error.throttled(status: 503, code: "SlowDown").isRetryable)
        #expect(S3Error.unavailable(.timedOut).isRetryable)
        #expect(!S3Error.uploadLost.isRetryable && !S3Error.signatureRejected(code: "x").isRetryable && !S3Error.notFound.isRetryable)
    }

    @Test func contentRange() {
        #expect(S3Client.parseContentRange("bytes 0-9/100")! == (0...9, 100))
        #expect(S3Client.parseContentRange(" bytes 5242780-6291455/6292480 ")! == (5_242_780...6_291_455, 6_292_480))
        #expect(S3Client.parseContentRange("bytes */100") == nil)
        #expect(S3Client.parseContentRange("bytes 9-0/100") == nil)
        #expect(S3Client.parseContentRange("bytes 0-100/100") == nil)
        #expect(S3Client.parseContentRange("items 0-9/100") == nil)
        #expect(S3Client.parseContentRange("bytes 0-9/*") == nil)
    }
}
