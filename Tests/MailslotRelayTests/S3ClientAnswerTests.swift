import Foundation
import MailslotTestSupport
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import Testing
@testable import MailslotRelay

/// The S3 client against answers no well-behaved store gives, from a fake endpoint on 127.0.0.1:
/// each is a typed error, bounded in what it reads, never a crash or a hang. Also what the client
/// sends (path, query, signed headers), a refused connection and a server that never answers.
/// (S3ClientTests runs the client against a real S3 server.)
@Suite struct S3ClientAnswerTests {
    static let credentials = SigV4.Credentials(accessKeyID: "AKIDTEST", secretAccessKey: "secret")

    @Test func errorInsideA200IsAnError() async throws {
        try await FakeS3.with({ _ in .init(.ok, body: "<?xml version=\"1.0\"?>\n<Error><Code>InternalError</Code><Message>try again</Message></Error>") }) { client, _ in
            await #expect(throws: S3Error.throttled(status: 200, code: "InternalError")) {
                try await client.completeMultipartUpload(key: "k", uploadID: "u", parts: [S3Client.CompletedPart(number: 1, etag: "\"e\"")])
            }
        }
    }

    @Test func xmlAnswersAreBounded() async throws {
        let huge = "<InitiateMultipartUploadResult><UploadId>" + String(repeating: "a", count: 100_000) + "</UploadId></InitiateMultipartUploadResult>"
        try await FakeS3.with({ _ in .init(.ok, body: huge) }) { client, _ in
            await #expect(throws: S3Error.badResponse("an XML answer over 65536 bytes")) { try await client.createMultipartUpload(key: "k") }
        }
        try await FakeS3.with({ _ in .init(.ok, body: "<InitiateMultipartUploadResult><Key>k</Key></InitiateMultipartUploadResult>") }) { client, _ in
            await #expect(throws: S3Error.badResponse("CreateMultipartUpload answered without an UploadId")) { try await client.createMultipartUpload(key: "k") }
        }
    }

    /// A refusal's body is read up to the bound only: a megabyte of it still gives the code.
    @Test func refusalBodiesAreBounded() async throws {
        let body = "<Error><Code>SlowDown</Code><Message>" + String(repeating: "x", count: 1 << 20) + "</Message></Error>"
        try await FakeS3.with({ _ in .init(.serviceUnavailable, body: body) }) { client, _ in
            await #expect(throws: S3Error.throttled(status: 503, code: "SlowDown")) { try await client.deleteObject(key: "k") }
            // An answer to HEAD has no body: the status alone decides.
            await #expect(throws: S3Error.throttled(status: 503, code: "")) { try await client.headObject(key: "k") }
        }
        try await FakeS3.with({ _ in .init(.forbidden, body: "<Error><Code>SignatureDoesNotMatch</Code></Error>") }) { client, _ in
            await #expect(throws: S3Error.signatureRejected(code: "SignatureDoesNotMatch")) { try await client.createMultipartUpload(key: "k") }
        }
    }

    /// A signed request is for one host: a redirect is an answer, not followed.
    @Test func redirectsAreNotFollowed() async throws {
        try await FakeS3.with({ _ in .init(.temporaryRedirect, headers: [("location", "http://127.0.0.1:1/elsewhere")]) }) { client, fake in
            await #expect(throws: S3Error.other(status: 307, code: "")) { try await client.headObject(key: "k") }
            #expect(fake.requests.count == 1)
        }
    }

    /// UploadPart: the path and query as signed, `UNSIGNED-PAYLOAD`, the body's length; an answer
    /// without an ETag is unusable.
    @Test func uploadPartRequestAndMissingETag() async throws {
        try await FakeS3.with({ _ in .init(.ok) }) { client, fake in
            await #expect(throws: S3Error.badResponse("UploadPart answered without an ETag")) {
                try await client.uploadPart(key: "blobs/ab", uploadID: "u+1/=", number: 3, body: .bytes(ByteBuffer(bytes: [1, 2, 3, 4, 5])))
            }
            let request = try #require(fake.requests.first)
            #expect(request.head.method == .PUT)
            #expect(request.head.uri == "/mailslot-test/blobs/ab?partNumber=3&uploadId=u%2B1%2F%3D")
            #expect(request.head.headers["x-amz-content-sha256"] == ["UNSIGNED-PAYLOAD"])
            #expect(request.head.headers["content-length"] == ["5"])
            #expect(request.bodyBytes == 5)
            #expect(request.head.headers["host"] == ["127.0.0.1:\(fake.port)"])
            let authorization = try #require(request.head.headers["authorization"].first)
            #expect(authorization.hasPrefix("AWS4-HMAC-SHA256 Credential=AKIDTEST/"))
            #expect(authorization.contains("/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature="))
        }
    }

    /// A part body that cannot be read to its length fails as the body's fault, not the store's.
    @Test func unreadablePartBody() async throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("s3-short-\(UUID().uuidString)").path
        try Data([1, 2, 3]).write(to: URL(fileURLWithPath: file))
        defer { try? FileManager.default.removeItem(atPath: file) }
        try await FakeS3.with({ _ in .init(.ok, headers: [("etag", "\"e\"")]) }) { client, _ in
            await #expect(throws: S3Error.bodyUnreadable) {
                try await client.uploadPart(key: "k", uploadID: "u", number: 1, body: .file(file + ".missing", length: 3))
            }
            await #expect(throws: S3Error.bodyUnreadable) {
                try await client.uploadPart(key: "k", uploadID: "u", number: 1, body: .file(file, length: 10))
            }
            let etag = try await client.uploadPart(key: "k", uploadID: "u", number: 1, body: .file(file, offset: 1, length: 2))
            #expect(etag == "\"e\"")
        }
    }

    /// Ranged reads: `Range` is sent and signed; 206 and rclone's 200 with `Content-Range` are
    /// accepted; another range, no `Content-Range` for a part of the object, or a body cut short
    /// are errors.
    @Test func rangedReads() async throws {
        let object = (0..<100).map { UInt8($0) }
        @Sendable func answer(_ status: HTTPResponseStatus, _ contentRange: String?, cut: Int? = nil) -> FakeS3.Answer {
            .init(status, headers: contentRange.map { [("content-range", $0)] } ?? [], bytes: Array(object[5...9]), cutAfter: cut)
        }
        for (status, contentRange) in [(HTTPResponseStatus.partialContent, "bytes 5-9/100"), (.ok, "bytes 5-9/100")] {
            try await FakeS3.with({ _ in answer(status, contentRange) }) { client, fake in
                var bytes: [UInt8] = []
                let total = try await client.getObject(key: "k", range: 5...9) { bytes += $0.readableBytesView }
                #expect(bytes == Array(object[5...9]) && total == 100)
                let request = try #require(fake.requests.first)
                #expect(request.head.headers["range"] == ["bytes=5-9"])
                #expect(request.head.headers["authorization"].first?.contains("SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,") == true)
            }
        }
        try await FakeS3.with({ _ in answer(.partialContent, "bytes 6-10/100") }) { client, _ in
            await #expect(throws: S3Error.badResponse("GetObject answered another range than asked (bytes 6-10/100)")) {
                try await client.getObject(key: "k", range: 5...9) { _ in }
            }
        }
        try await FakeS3.with({ _ in answer(.ok, nil) }) { client, _ in
            await #expect(throws: S3Error.badResponse("GetObject answered without a Content-Range")) {
                try await client.getObject(key: "k", range: 5...9) { _ in }
            }
        }
        try await FakeS3.with({ _ in answer(.partialContent, "bytes 5-9/100", cut: 2) }) { client, _ in
            await #expect(throws: S3Error.unavailable(.connectionFailed)) {
                try await client.getObject(key: "k", range: 5...9) { _ in }
            }
        }
    }

    /// A ListMultipartUploadsResult page as S3 writes it (AWS's documented example's shape).
    static func uploadList(_ uploads: [(key: String, id: String, initiated: String?)], truncated: Bool = false,
                           nextKey: String? = nil, nextID: String? = nil) -> String {
        var xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListMultipartUploadsResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        xml += "<Bucket>mailslot-test</Bucket><KeyMarker></KeyMarker><UploadIdMarker></UploadIdMarker>"
        if let nextKey { xml += "<NextKeyMarker>\(nextKey)</NextKeyMarker>" }
        if let nextID { xml += "<NextUploadIdMarker>\(nextID)</NextUploadIdMarker>" }
        xml += "<MaxUploads>500</MaxUploads><IsTruncated>\(truncated)</IsTruncated>"
        for upload in uploads {
            xml += "<Upload><Key>\(upload.key)</Key><UploadId>\(upload.id)</UploadId>"
            xml += "<Initiator><ID>arn:aws:iam::111122223333:user/user1-11111a31-17b5-4fb7-9df5-b111111f13de</ID><DisplayName>user1</DisplayName></Initiator>"
            xml += "<Owner><ID>75aa57f09aa0c8caeab4f8c24e99d10f8e7faeebf76c078efc7c6caea54ba06a</ID><DisplayName>OwnerDisplayName</DisplayName></Owner>"
            xml += "<StorageClass>STANDARD</StorageClass>"
            if let initiated = upload.initiated { xml += "<Initiated>\(initiated)</Initiated>" }
            xml += "</Upload>"
        }
        return xml + "<Prefix>blobs/</Prefix></ListMultipartUploadsResult>"
    }

    /// ListMultipartUploads: a signed `GET` of the bucket with `uploads`, the prefix, the page
    /// size and the markers; each `<Upload>` read with its start time; the next markers of a
    /// truncated page.
    @Test func listMultipartUploadsRequestAndAnswer() async throws {
        let page = Self.uploadList([("blobs/a&amp;b", "u1", "2026-11-26T20:48:33.000Z"), ("blobs/c", "u2", nil), ("blobs/c", "u3", "bad")],
                                   truncated: true, nextKey: "blobs/c", nextID: "u3")
        try await FakeS3.with({ _ in .init(.ok, body: page) }) { client, fake in
            let answer = try await client.listMultipartUploads(prefix: "blobs/", after: S3Client.ListMarker(key: "blobs/0", uploadID: "u+0"),
                                                               maxUploads: 3)
            #expect(answer.uploads == [S3Client.MultipartUpload(key: "blobs/a&b", uploadID: "u1", initiated: 1_795_726_113),
                                       S3Client.MultipartUpload(key: "blobs/c", uploadID: "u2", initiated: nil),
                                       S3Client.MultipartUpload(key: "blobs/c", uploadID: "u3", initiated: nil)])
            #expect(answer.next == S3Client.ListMarker(key: "blobs/c", uploadID: "u3"))
            let request = try #require(fake.requests.first)
            #expect(request.head.method == .GET)
            #expect(request.head.uri == "/mailslot-test?uploads&max-uploads=3&prefix=blobs%2F&key-marker=blobs%2F0&upload-id-marker=u%2B0")
            #expect(request.head.headers["x-amz-content-sha256"] == [SigV4.emptyPayloadHash])
            #expect(request.head.headers["authorization"].first?.hasPrefix("AWS4-HMAC-SHA256 Credential=AKIDTEST/") == true)
        }
        // The last page: no next marker.
        try await FakeS3.with({ _ in .init(.ok, body: Self.uploadList([("blobs/d", "u4", "2026-11-26T20:48:33Z")])) }) { client, _ in
            let answer = try await client.listMultipartUploads(prefix: "blobs/")
            #expect(answer.uploads == [S3Client.MultipartUpload(key: "blobs/d", uploadID: "u4", initiated: 1_795_726_113)])
            #expect(answer.next == nil)
        }
        // A truncated page without next markers goes on after its last upload (some stores leave them out).
        try await FakeS3.with({ _ in .init(.ok, body: Self.uploadList([("blobs/e", "u5", nil)], truncated: true)) }) { client, _ async throws in
            #expect(try await client.listMultipartUploads(prefix: "blobs/").next == S3Client.ListMarker(key: "blobs/e", uploadID: "u5"))
        }
    }

    /// Listings that would make a caller loop, or are not listings, are errors; the answer is
    /// read up to its bound only.
    @Test func listMultipartUploadsRefusesBadPages() async throws {
        try await FakeS3.with({ _ in .init(.ok, body: Self.uploadList([], truncated: true)) }) { client, _ in
            await #expect(throws: S3Error.badResponse("ListMultipartUploads answered a truncated page without a next marker")) {
                try await client.listMultipartUploads(prefix: "blobs/")
            }
        }
        try await FakeS3.with({ _ in .init(.ok, body: Self.uploadList([("blobs/e", "u5", nil)], truncated: true, nextKey: "blobs/e", nextID: "u5")) }) { client, _ in
            await #expect(throws: S3Error.badResponse("ListMultipartUploads answered a truncated page that does not move on")) {
                try await client.listMultipartUploads(prefix: "blobs/", after: S3Client.ListMarker(key: "blobs/e", uploadID: "u5"))
            }
        }
        try await FakeS3.with({ _ in .init(.ok, body: "<ListMultipartUploadsResult><Upload><Key>k</Key></Upload></ListMultipartUploadsResult>") }) { client, _ in
            await #expect(throws: S3Error.badResponse("ListMultipartUploads answered an Upload without its Key or UploadId")) {
                try await client.listMultipartUploads(prefix: "blobs/")
            }
        }
        try await FakeS3.with({ _ in .init(.ok, body: "<InitiateMultipartUploadResult/>") }) { client, _ in
            await #expect(throws: S3Error.badResponse("ListMultipartUploads answered without a ListMultipartUploadsResult")) {
                try await client.listMultipartUploads(prefix: "blobs/")
            }
        }
        let huge = Self.uploadList((0..<2000).map { ("blobs/\($0)", String(repeating: "u", count: 200), nil) })
        try await FakeS3.with({ _ in .init(.ok, body: huge) }) { client, _ in
            await #expect(throws: S3Error.badResponse("an XML answer over \(S3Client.maxListAnswer) bytes")) {
                try await client.listMultipartUploads(prefix: "blobs/")
            }
        }
        try await FakeS3.with({ _ in .init(.forbidden, body: "<Error><Code>AccessDenied</Code></Error>") }) { client, _ in
            await #expect(throws: S3Error.self) { try await client.listMultipartUploads(prefix: "blobs/") }
        }
    }

    /// `Initiated` times: ISO 8601 in UTC with or without a fraction; anything else is unread.
    @Test func initiatedTimestamps() {
        #expect(S3Client.parseTimestamp("1970-01-01T00:00:00Z") == 0)
        #expect(S3Client.parseTimestamp("2010-11-10T20:48:33.000Z") == 1_289_422_113)
        #expect(S3Client.parseTimestamp("2000-02-29T23:59:59.5Z") == 951_868_799)
        #expect(S3Client.parseTimestamp("2026-11-26T20:48:33.123456789Z") == 1_795_726_113)
        for bad in ["", "2010-11-10T20:48:33", "2010-11-10T20:48:33+01:00", "2010-13-10T20:48:33Z", "2010-11-10 20:48:33Z",
                    "2010-11-10T20:48:33.Z", "2010-11-10T20:48:33.0x0Z", "+010-11-10T20:48:33Z"] {
            #expect(S3Client.parseTimestamp(bad) == nil, "\(bad)")
        }
    }

    /// Nothing listening: a retryable `unavailable(.connectionFailed)`.
    @Test func refusedConnectionIsUnavailable() async throws {
        // Held bound and not listening for the whole test: another test's server cannot take it.
        let refusing = try LoopbackPort.refusing()
        defer { refusing.close() }
        let port = refusing.port
        // The HTTP client retries refused connections until the connect timeout: keep it short.
        var timeouts = S3Client.Timeouts()
        timeouts.connect = .seconds(1)
        let client = S3Client(location: try FakeS3.location(port: port), credentials: Self.credentials, timeouts: timeouts, logger: TestRelay.logger)
        try await FakeS3.run(client) { client in
            let failure = await #expect(throws: S3Error.self) { try await client.headObject(key: "k") }
            #expect(failure == .unavailable(.connectionFailed))
            #expect(failure?.isRetryable == true)
        }
    }

    /// A server that accepts and never answers: the call's deadline ends it, typed and retryable.
    @Test func silentServerTimesOut() async throws {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { child in child.eventLoop.makeSucceededVoidFuture() }
            .bind(host: "127.0.0.1", port: 0).get()
        defer { channel.close(promise: nil) }
        let port = try #require(channel.localAddress?.port)
        var timeouts = S3Client.Timeouts()
        timeouts.call = .milliseconds(500)
        timeouts.read = .seconds(5)
        let client = S3Client(location: try FakeS3.location(port: port), credentials: Self.credentials, timeouts: timeouts, logger: TestRelay.logger)
        try await FakeS3.run(client) { client in
            await #expect(throws: S3Error.unavailable(.timedOut)) { try await client.createMultipartUpload(key: "k") }
            await #expect(throws: S3Error.unavailable(.timedOut)) { try await client.deleteObject(key: "k") }
        }
    }
}

/// A fake S3 endpoint on 127.0.0.1 for one test: answers every request with what `answer` says
/// once the request's body is in, and keeps each request's head and body length.
final class FakeS3: Sendable {
    /// One canned answer.
    struct Answer: Sendable {
        var status: HTTPResponseStatus
        var headers: [(String, String)]
        var bytes: [UInt8]
        /// Send only this many bytes of the body, then close the connection.
        var cutAfter: Int?

        init(_ status: HTTPResponseStatus, headers: [(String, String)] = [], body: String = "") {
            self.init(status, headers: headers, bytes: Array(body.utf8))
        }

        init(_ status: HTTPResponseStatus, headers: [(String, String)] = [], bytes: [UInt8], cutAfter: Int? = nil) {
            self.status = status
            self.headers = headers
            self.bytes = bytes
            self.cutAfter = cutAfter
        }
    }

    struct Request: Sendable {
        var head: HTTPRequestHead
        var bodyBytes: Int
    }

    let channel: any Channel
    let port: Int
    private let recorded: NIOLockedValueBox<[Request]>

    var requests: [Request] { recorded.withLockedValue { $0 } }

    private init(channel: any Channel, port: Int, recorded: NIOLockedValueBox<[Request]>) {
        self.channel = channel
        self.port = port
        self.recorded = recorded
    }

    static func location(port: Int) throws -> S3Location {
        try S3Location("s3://mailslot-test?endpoint=http://127.0.0.1:\(port)&path_style=true")
    }

    /// Starts a fake endpoint, runs `body` with a client of it, and stops both.
    static func with(_ answer: @escaping @Sendable (HTTPRequestHead) -> Answer,
                     _ body: (S3Client, FakeS3) async throws -> Void) async throws {
        let recorded = NIOLockedValueBox<[Request]>([])
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { child in
                child.eventLoop.makeCompletedFuture {
                    try child.pipeline.syncOperations.configureHTTPServerPipeline()
                    try child.pipeline.syncOperations.addHandler(FakeS3Handler(answer: answer, recorded: recorded))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        let fake = FakeS3(channel: channel, port: try #require(channel.localAddress?.port), recorded: recorded)
        var timeouts = S3Client.Timeouts()
        timeouts.call = .seconds(10)
        let client = S3Client(location: try location(port: fake.port), credentials: S3ClientAnswerTests.credentials,
                              timeouts: timeouts, logger: TestRelay.logger)
        do {
            try await run(client) { try await body($0, fake) }
            try? await channel.close()
        } catch {
            try? await channel.close()
            throw error
        }
    }

    /// Runs `body` with `client`, and shuts the client down afterwards.
    static func run(_ client: S3Client, _ body: (S3Client) async throws -> Void) async throws {
        do {
            try await body(client)
            try await client.shutdown()
        } catch {
            try? await client.shutdown()
            throw error
        }
    }
}

/// The fake endpoint's per-connection handler.
final class FakeS3Handler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let answer: @Sendable (HTTPRequestHead) -> FakeS3.Answer
    let recorded: NIOLockedValueBox<[FakeS3.Request]>
    var head: HTTPRequestHead?
    var bodyBytes = 0

    init(answer: @escaping @Sendable (HTTPRequestHead) -> FakeS3.Answer, recorded: NIOLockedValueBox<[FakeS3.Request]>) {
        self.answer = answer
        self.recorded = recorded
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            bodyBytes = 0
        case .body(let buffer):
            bodyBytes += buffer.readableBytes
        case .end:
            guard let head else { return }
            recorded.withLockedValue { $0.append(FakeS3.Request(head: head, bodyBytes: bodyBytes)) }
            let answer = answer(head)
            var responseHead = HTTPResponseHead(version: .http1_1, status: answer.status)
            for (name, value) in answer.headers { responseHead.headers.add(name: name, value: value) }
            responseHead.headers.replaceOrAdd(name: "content-length", value: String(answer.bytes.count))
            context.write(wrapOutboundOut(.head(responseHead)), promise: nil)
            let sent = answer.cutAfter.map { Array(answer.bytes.prefix($0)) } ?? answer.bytes
            if !sent.isEmpty { context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: sent)))), promise: nil) }
            if answer.cutAfter != nil {
                context.flush()
                context.close(promise: nil)
            } else {
                context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
            }
        }
    }
}
