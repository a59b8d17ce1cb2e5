import AsyncHTTPClient
import Foundation
import Logging
import MailslotCrypto
import NIOCore
import NIOHTTP1
import NIOPosix
import ServiceLifecycle
import _NIOFileSystem

/// The few S3 calls the blob store needs (docs/architecture.md, "Blobs/S3"): a multipart upload
/// (create, parts, complete, abort), the listing of unfinished uploads (for the
/// ``S3OrphanUploadSweeper``), ranged reads, `HEAD` and `DELETE` of one object, signed with
/// ``SigV4``, over AsyncHTTPClient. Works with AWS and S3-compatible stores (R2, MinIO, Ceph,
/// rclone's `serve s3`, which the tests run).
///
/// Bounds: every call has a deadline (small calls ``Timeouts/call``; transfers that plus their
/// length at ``Timeouts/minimumRate``) and the connection a read timeout; XML answers are read up
/// to ``maxXMLAnswer`` bytes; part bodies stream from a file or a sequence of buffers and downloads
/// stream into a callback, so memory per call is a few socket reads, whatever the size. Failures
/// are ``S3Error``s. Redirects are not followed (a signed request is for one host).
///
/// Lifecycle: the client owns an `HTTPClient`, which must be shut down before the client is let go
/// (AsyncHTTPClient checks it): run the client as a `Service` (it shuts the HTTP client down on
/// graceful shutdown) or call ``shutdown()`` when done.
package final class S3Client: Service, Sendable {
    /// The time bounds of a call.
    package struct Timeouts: Sendable {
        /// To open a connection.
        package var connect: TimeAmount = .seconds(10)
        /// Between two reads on a connection (a stalled store).
        package var read: TimeAmount = .seconds(30)
        /// A whole call without a large body: create, complete, abort, head, delete; and the base
        /// of a transfer's deadline.
        package var call: TimeAmount = .seconds(30)
        /// The slowest transfer rate a part upload or a download may average, in bytes per second:
        /// its deadline is ``call`` plus its length at this rate.
        package var minimumRate: Int64 = 1 << 20

        /// The defaults: 10 s to connect, 30 s idle, 30 s a call, 1 MiB/s at least.
        package init() {}
    }

    /// A part's body: where UploadPart reads it from.
    package struct Body: Sendable {
        enum Source: Sendable {
            case file(path: String, offset: Int64)
            case stream(HTTPClientRequest.Body)
        }

        let source: Source
        /// The body's length in bytes (sent as `Content-Length`).
        package let length: Int64

        /// `length` bytes of the file at `path` from `offset`, read in 1 MiB chunks while sending.
        package static func file(_ path: String, offset: Int64 = 0, length: Int64) -> Body {
            Body(source: .file(path: path, offset: offset), length: length)
        }

        /// The buffers of `sequence`, exactly `length` bytes in all, sent as they come.
        package static func buffers<Buffers: AsyncSequence & Sendable>(_ sequence: Buffers, length: Int64) -> Body
        where Buffers.Element == ByteBuffer {
            Body(source: .stream(.stream(sequence, length: .known(length))), length: length)
        }

        /// One buffer (tests, small parts).
        package static func bytes(_ buffer: ByteBuffer) -> Body {
            Body(source: .stream(.bytes(buffer)), length: Int64(buffer.readableBytes))
        }
    }

    /// A part of a multipart upload, as CompleteMultipartUpload names it.
    package struct CompletedPart: Sendable, Equatable {
        /// The part number, 1…10 000.
        package var number: Int
        /// The ETag UploadPart answered, as answered (quotes included).
        package var etag: String

        /// A part from its number and ETag.
        package init(number: Int, etag: String) {
            self.number = number
            self.etag = etag
        }
    }

    /// What HeadObject tells.
    package struct ObjectInfo: Sendable, Equatable {
        /// The object's size in bytes.
        package var size: Int64
        /// Its ETag, when the store sent one.
        package var etag: String?
    }

    /// The largest XML answer read (CreateMultipartUpload, CompleteMultipartUpload, errors); S3's
    /// are a few hundred bytes.
    package static let maxXMLAnswer = 64 * 1024

    /// The largest ListMultipartUploads answer read: a page of ``maxListedUploads`` entries of
    /// about 1 KiB each at most (a 1 KiB key, an upload id of a few hundred bytes, owner fields).
    package static let maxListAnswer = 1 << 20

    /// The most uploads one ListMultipartUploads page asks for (S3's own maximum is 1 000).
    package static let maxListedUploads = 500

    /// An unfinished multipart upload, as ListMultipartUploads names it.
    package struct MultipartUpload: Sendable, Equatable {
        /// The object key it will write.
        package var key: String
        /// Its upload id.
        package var uploadID: String
        /// When it was started (`Initiated`), in seconds since 1970 UTC; nil when the store did
        /// not say or said it in a form this client does not read.
        package var initiated: Int64?

        /// An upload from its fields.
        package init(key: String, uploadID: String, initiated: Int64?) {
            self.key = key
            self.uploadID = uploadID
            self.initiated = initiated
        }
    }

    /// Where a listing goes on: after this key and upload id (S3's `key-marker` and `upload-id-marker`).
    package struct ListMarker: Sendable, Equatable {
        /// The last key of the page before.
        package var key: String
        /// The last upload id of that key on the page before (may be empty).
        package var uploadID: String

        /// A marker from its fields.
        package init(key: String, uploadID: String) {
            self.key = key
            self.uploadID = uploadID
        }
    }

    /// One page of ListMultipartUploads.
    package struct UploadPage: Sendable, Equatable {
        /// The uploads on this page, in the store's order (by key, then by start).
        package var uploads: [MultipartUpload]
        /// Where the next page starts; nil when this was the last.
        package var next: ListMarker?
    }

    /// Where the objects are.
    package let location: S3Location
    private let signer: SigV4
    private let http: HTTPClient
    private let timeouts: Timeouts
    private let now: @Sendable () -> Int64
    private let logger: Logger

    /// A client for `location` signing with `credentials`. `connectionsPerHost`: connections kept
    /// to the store (calls beyond wait for one, and their deadline runs while they wait; the
    /// blob store's own limits keep it below). `now` gives the signing time (seconds since 1970
    /// UTC); tests may inject it.
    package init(location: S3Location, credentials: SigV4.Credentials, timeouts: Timeouts = Timeouts(), connectionsPerHost: Int = 32,
                 eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton, logger: Logger,
                 now: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) }) {
        self.location = location
        self.signer = SigV4(credentials: credentials, region: location.region, service: "s3")
        self.timeouts = timeouts
        self.now = now
        // AsyncHTTPClient logs whole response heads at trace level, and some stores echo the
        // request's `x-amz-security-token` (rclone does): its loggers stop at debug, whatever the
        // relay's level, so that a session token never reaches the log (S3BlobStorageTests).
        var httpLogger = logger
        if httpLogger.logLevel < .debug { httpLogger.logLevel = .debug }
        self.logger = httpLogger
        var configuration = HTTPClient.Configuration(
            redirectConfiguration: .disallow,
            timeout: HTTPClient.Configuration.Timeout(connect: timeouts.connect, read: timeouts.read),
            decompression: .disabled)
        configuration.connectionPool = HTTPClient.Configuration.ConnectionPool(
            idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: connectionsPerHost)
        self.http = HTTPClient(eventLoopGroupProvider: .shared(eventLoopGroup), configuration: configuration,
                               backgroundActivityLogger: httpLogger)
    }

    /// A client released without ``shutdown()`` (a relay made but never run, a start that
    /// failed) closes its connections now rather than leak them (AsyncHTTPClient would stop a
    /// debug build at its own release). Without waiting: the shutdown finishes in the background.
    deinit {
        _ = http.shutdown()
    }

    /// As a `Service`: waits for graceful shutdown, then shuts the HTTP client down.
    package func run() async throws {
        try? await gracefulShutdown()
        try await shutdown()
    }

    /// Closes the connections. Calls made afterwards fail with ``S3Error/unavailable(_:)``.
    /// Calling it again does nothing.
    package func shutdown() async throws {
        do {
            try await http.shutdown()
        } catch let error as HTTPClientError where error == .alreadyShutdown {
            return
        }
    }

    // MARK: Multipart upload

    /// CreateMultipartUpload (`POST /key?uploads`): a new upload of `key`; returns its upload id.
    package func createMultipartUpload(key: String) async throws(S3Error) -> String {
        let answer = try await xmlCall(.POST, key: key, query: [SigV4.QueryItem("uploads")], body: nil)
        // AWS's root is InitiateMultipartUploadResult, rclone's InitiateMultipartUpload: the id is what matters
        // (an <Error> root has already been thrown by xmlCall).
        guard let id = S3XML.text(of: "UploadId", in: answer), !id.isEmpty
        else { throw .badResponse("CreateMultipartUpload answered without an UploadId") }
        return id
    }

    /// UploadPart (`PUT /key?partNumber=n&uploadId=…`): stores part `number` (1…10 000) of the
    /// upload; returns its ETag. The same part again replaces it (S3) or must have the same
    /// bytes (rclone). `payloadHash`: the body's hex SHA-256 when the location signs payloads,
    /// nil for `UNSIGNED-PAYLOAD`.
    package func uploadPart(key: String, uploadID: String, number: Int, body: Body, payloadHash: String? = nil)
        async throws(S3Error) -> String {
        precondition((1...10_000).contains(number), "S3 part numbers are 1...10000")
        let query = [SigV4.QueryItem("partNumber", String(number)), SigV4.QueryItem("uploadId", uploadID)]
        let deadline = transferDeadline(body.length)
        let hash = payloadHash ?? SigV4.unsignedPayload
        let upload: @Sendable (HTTPClientRequest.Body) async throws -> String = { requestBody in
            let response = try await self.execute(.PUT, key: key, query: query, headers: [], payloadHash: hash,
                                                  body: requestBody, deadline: deadline)
            guard response.status == .ok else { throw try await self.refusal(response) }
            let etag = response.headers.first(name: "etag")
            try await self.drain(response)
            guard let etag, !etag.isEmpty else { throw S3Error.badResponse("UploadPart answered without an ETag") }
            return etag
        }
        return try await mapped(sendsCallerBody: true) {
            switch body.source {
            case .stream(let stream):
                return try await upload(stream)
            case .file(let path, let offset):
                // The file stays open until the answer has been read: the body streams from it.
                return try await FileSystem.shared.withFileHandle(forReadingAt: FilePath(path)) { handle in
                    let chunks = handle.readChunks(in: offset..<(offset + body.length), chunkLength: .mebibytes(1))
                    return try await upload(.stream(chunks, length: .known(body.length)))
                }
            }
        }
    }

    /// CompleteMultipartUpload (`POST /key?uploadId=…`): joins `parts` (ascending numbers) into
    /// the object. S3 may refuse with an error inside a `200`; that is an error here too.
    package func completeMultipartUpload(key: String, uploadID: String, parts: [CompletedPart]) async throws(S3Error) {
        var xml = "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        for part in parts {
            xml += "<Part><PartNumber>\(part.number)</PartNumber><ETag>\(S3XML.escape(part.etag))</ETag></Part>"
        }
        xml += "</CompleteMultipartUpload>"
        let answer = try await xmlCall(.POST, key: key, query: [SigV4.QueryItem("uploadId", uploadID)],
                                       body: ByteBuffer(string: xml), contentType: "application/xml")
        // A 200 whose root is <Error> has been thrown by xmlCall; anything but an XML document is not an answer.
        guard S3XML.rootName(answer) != nil else {
            throw .badResponse("CompleteMultipartUpload answered without an XML document")
        }
    }

    /// AbortMultipartUpload (`DELETE /key?uploadId=…`): drops the upload and its parts. An upload
    /// that is already gone counts as aborted: erasing is idempotent.
    package func abortMultipartUpload(key: String, uploadID: String) async throws(S3Error) {
        do {
            try await emptyCall(.DELETE, key: key, query: [SigV4.QueryItem("uploadId", uploadID)], accepted: [.noContent, .ok])
        } catch .uploadLost {
            return
        }
    }

    /// ListMultipartUploads (`GET /?uploads&prefix=…`): one page of the bucket's unfinished
    /// uploads whose keys start with `prefix`, after `marker` (nil: from the start), at most
    /// `maxUploads` (1…``maxListedUploads``). A page the store marks truncated without saying
    /// where to go on, or whose marker does not move past `marker`, is a ``S3Error/badResponse(_:)``
    /// (a caller paging on would otherwise loop).
    package func listMultipartUploads(prefix: String, after marker: ListMarker? = nil, maxUploads: Int = S3Client.maxListedUploads)
        async throws(S3Error) -> UploadPage {
        precondition((1...Self.maxListedUploads).contains(maxUploads), "a page of 1...\(Self.maxListedUploads) uploads")
        var query = [SigV4.QueryItem("uploads"), SigV4.QueryItem("max-uploads", String(maxUploads)), SigV4.QueryItem("prefix", prefix)]
        if let marker {
            query.append(SigV4.QueryItem("key-marker", marker.key))
            if !marker.uploadID.isEmpty { query.append(SigV4.QueryItem("upload-id-marker", marker.uploadID)) }
        }
        let answer = try await mapped {
            let response = try await self.execute(.GET, path: self.location.bucketPath, query: query, headers: [],
                                                  payloadHash: SigV4.emptyPayloadHash, body: nil, deadline: .now() + self.timeouts.call)
            guard response.status == .ok else { throw try await self.refusal(response) }
            return try await self.collect(response, limit: Self.maxListAnswer)
        }
        let root = S3XML.rootName(answer)
        if root == "Error" { throw S3Error.from(status: 200, code: S3XML.text(of: "Code", in: answer)) }
        guard root == "ListMultipartUploadsResult" else {
            throw .badResponse("ListMultipartUploads answered without a ListMultipartUploadsResult")
        }
        var uploads: [MultipartUpload] = []
        for element in S3XML.elements(named: "Upload", in: answer) {
            guard let key = S3XML.text(of: "Key", in: element), let id = S3XML.text(of: "UploadId", in: element), !id.isEmpty else {
                throw .badResponse("ListMultipartUploads answered an Upload without its Key or UploadId")
            }
            uploads.append(MultipartUpload(key: key, uploadID: id, initiated: S3XML.text(of: "Initiated", in: element).flatMap(Self.parseTimestamp)))
        }
        guard S3XML.text(of: "IsTruncated", in: answer) == "true" else { return UploadPage(uploads: uploads, next: nil) }
        // S3 names the next markers; some stores leave them out and mean the page's last upload.
        let nextKey = S3XML.text(of: "NextKeyMarker", in: answer).flatMap { $0.isEmpty ? nil : $0 } ?? uploads.last?.key
        let nextID = S3XML.text(of: "NextUploadIdMarker", in: answer).flatMap { $0.isEmpty ? nil : $0 } ?? uploads.last?.uploadID ?? ""
        guard let nextKey else { throw .badResponse("ListMultipartUploads answered a truncated page without a next marker") }
        let next = ListMarker(key: nextKey, uploadID: nextID)
        guard next != marker else { throw .badResponse("ListMultipartUploads answered a truncated page that does not move on") }
        return UploadPage(uploads: uploads, next: next)
    }

    // MARK: Objects

    /// GetObject with `Range: bytes=lower-upper`: passes the bytes to `write` as they arrive, one
    /// socket read at a time (the next is not read until `write` returns: memory stays bounded).
    /// Accepts S3's `206` and the `200` with a matching `Content-Range` that rclone answers.
    /// Returns the object's whole size (from `Content-Range`).
    ///
    /// Throws ``S3Error`` for the store's failures (`notFound`, `invalidRange`, a body shorter
    /// than the range: `unavailable(.connectionFailed)`), and whatever `write` throws, unchanged.
    package func getObject(key: String, range: ClosedRange<Int64>,
                           into write: (ByteBuffer) async throws -> Void) async throws -> Int64 {
        precondition(range.lowerBound >= 0, "a range starts at 0 or later")
        let expected = range.upperBound - range.lowerBound + 1
        let response = try await mapped {
            try await self.execute(.GET, key: key, query: [], headers: [SigV4.Header("range", "bytes=\(range.lowerBound)-\(range.upperBound)")],
                                   payloadHash: SigV4.emptyPayloadHash, body: nil, deadline: self.transferDeadline(expected))
        }
        guard response.status == .partialContent || response.status == .ok else {
            throw try await mapped { try await self.refusal(response) }
        }
        let total: Int64
        if let contentRange = response.headers.first(name: "content-range") {
            guard let parsed = Self.parseContentRange(contentRange), parsed.range == range else {
                try? await drain(response)
                throw S3Error.badResponse("GetObject answered another range than asked (\(contentRange))")
            }
            total = parsed.total
        } else if response.status == .ok, range.lowerBound == 0,
                  let length = response.headers.first(name: "content-length").flatMap(Int64.init), length == expected {
            total = length  // the whole object was asked for, and came whole
        } else {
            try? await drain(response)
            throw S3Error.badResponse("GetObject answered without a Content-Range")
        }
        var received: Int64 = 0
        var iterator = response.body.makeAsyncIterator()
        while true {
            let next: ByteBuffer?
            do {
                next = try await iterator.next()
            } catch {
                throw Self.map(error)
            }
            guard let buffer = next else { break }
            received += Int64(buffer.readableBytes)
            guard received <= expected else { throw S3Error.badResponse("GetObject sent more bytes than the range") }
            try await write(buffer)
        }
        guard received == expected else { throw S3Error.unavailable(.connectionFailed) }
        return total
    }

    /// HeadObject: the object's size and ETag; ``S3Error/notFound`` when there is none.
    package func headObject(key: String) async throws(S3Error) -> ObjectInfo {
        try await mapped {
            let response = try await self.execute(.HEAD, key: key, query: [], headers: [], payloadHash: SigV4.emptyPayloadHash,
                                                  body: nil, deadline: .now() + self.timeouts.call)
            guard response.status == .ok else { throw try await self.refusal(response) }
            try await self.drain(response)
            guard let size = response.headers.first(name: "content-length").flatMap(Int64.init), size >= 0 else {
                throw S3Error.badResponse("HeadObject answered without a Content-Length")
            }
            return ObjectInfo(size: size, etag: response.headers.first(name: "etag"))
        }
    }

    /// DeleteObject: removes the object. One that does not exist counts as deleted (S3 answers
    /// `204` either way; some stores `404`).
    package func deleteObject(key: String) async throws(S3Error) {
        do {
            try await emptyCall(.DELETE, key: key, query: [], accepted: [.noContent, .ok])
        } catch .notFound {
            return
        }
    }

    // MARK: Calls

    /// A call answered with XML (bounded), body optional and signed with its SHA-256.
    private func xmlCall(_ method: HTTPMethod, key: String, query: [SigV4.QueryItem], body: ByteBuffer?,
                         contentType: String? = nil) async throws(S3Error) -> [UInt8] {
        try await mapped {
            var headers: [SigV4.Header] = []
            if let contentType { headers.append(SigV4.Header("content-type", contentType)) }
            let hash = body.map { buffer in buffer.withUnsafeReadableBytes { SigV4.hex(sha256($0)) } } ?? SigV4.emptyPayloadHash
            let response = try await self.execute(method, key: key, query: query, headers: headers, payloadHash: hash,
                                                  body: body.map { .bytes($0) }, deadline: .now() + self.timeouts.call)
            guard response.status == .ok else { throw try await self.refusal(response) }
            let answer = try await self.collect(response)
            if S3XML.rootName(answer) == "Error" {  // an error inside a 200 (CompleteMultipartUpload)
                throw S3Error.from(status: 200, code: S3XML.text(of: "Code", in: answer))
            }
            return answer
        }
    }

    /// A call without a body either way.
    private func emptyCall(_ method: HTTPMethod, key: String, query: [SigV4.QueryItem], accepted: [HTTPResponseStatus]) async throws(S3Error) {
        try await mapped {
            let response = try await self.execute(method, key: key, query: query, headers: [], payloadHash: SigV4.emptyPayloadHash,
                                                  body: nil, deadline: .now() + self.timeouts.call)
            guard accepted.contains(response.status) else { throw try await self.refusal(response) }
            try await self.drain(response)
        }
    }

    /// Signs and sends one request; returns once the answer's head is in.
    private func execute(_ method: HTTPMethod, key: String, query: [SigV4.QueryItem], headers: [SigV4.Header],
                         payloadHash: String, body: HTTPClientRequest.Body?, deadline: NIODeadline) async throws -> HTTPClientResponse {
        try await execute(method, path: location.path(forKey: key), query: query, headers: headers, payloadHash: payloadHash,
                          body: body, deadline: deadline)
    }

    /// Signs and sends one request to the decoded `path` (an object's or the bucket's).
    private func execute(_ method: HTTPMethod, path: String, query: [SigV4.QueryItem], headers: [SigV4.Header],
                         payloadHash: String, body: HTTPClientRequest.Body?, deadline: NIODeadline) async throws -> HTTPClientResponse {
        let signed = signer.sign(SigV4.Request(method: method.rawValue, path: path, query: query,
                                               headers: [SigV4.Header("host", location.hostHeader)] + headers, payloadHash: payloadHash),
                                 at: now())
        var request = HTTPClientRequest(url: location.url(path: path, query: query))
        request.method = method
        request.headers.add(name: "host", value: location.hostHeader)
        for header in headers + signed.headers { request.headers.add(name: header.name, value: header.value) }
        request.body = body
        let response = try await http.execute(request, deadline: deadline, logger: logger)
        logger.debug("object store call", metadata: ["method": "\(method.rawValue)", "status": "\(response.status.code)"])
        return response
    }

    /// The error a non-success answer stands for, from its status and `<Error><Code>`.
    private func refusal(_ response: HTTPClientResponse) async throws -> S3Error {
        var body: [UInt8] = []
        do {
            // Bounded: past the bound the rest is left unread (the connection is then closed).
            for try await buffer in response.body {
                body += buffer.readableBytesView.prefix(Self.maxXMLAnswer - body.count)
                if body.count >= Self.maxXMLAnswer { break }
            }
        } catch {
            // The status decides; a body cut short only loses the code.
        }
        return S3Error.from(status: Int(response.status.code), code: S3XML.text(of: "Code", in: body))
    }

    /// The answer's body, at most `limit` bytes.
    private func collect(_ response: HTTPClientResponse, limit: Int = S3Client.maxXMLAnswer) async throws -> [UInt8] {
        var body: [UInt8] = []
        for try await buffer in response.body {
            guard body.count + buffer.readableBytes <= limit else {
                throw S3Error.badResponse("an XML answer over \(limit) bytes")
            }
            body += buffer.readableBytesView
        }
        return body
    }

    /// Reads and drops a body that should be empty (so the connection can be reused), bounded.
    private func drain(_ response: HTTPClientResponse) async throws {
        var count = 0
        for try await buffer in response.body {
            count += buffer.readableBytes
            guard count <= Self.maxXMLAnswer else { throw S3Error.badResponse("an unexpected body over \(Self.maxXMLAnswer) bytes") }
        }
    }

    private func transferDeadline(_ length: Int64) -> NIODeadline {
        .now() + timeouts.call + .seconds(max(0, length) / max(1, timeouts.minimumRate))
    }

    /// Runs `body`, turning every failure into an ``S3Error``. `sendsCallerBody`: the request's
    /// body comes from the caller (a part), so a failure that is not the network's is the body's.
    private func mapped<T>(sendsCallerBody: Bool = false, _ body: () async throws -> T) async throws(S3Error) -> T {
        do {
            return try await body()
        } catch {
            throw Self.map(error, sendsCallerBody: sendsCallerBody)
        }
    }

    /// An S3Error for any failure of a call: its own, the HTTP client's or NIO's (the network's),
    /// or, when the caller supplied the body, the body source's.
    static func map(_ error: any Error, sendsCallerBody: Bool = false) -> S3Error {
        if let error = error as? S3Error { return error }
        if let error = error as? HTTPClientError {
            switch error {
            case .deadlineExceeded, .readTimeout, .connectTimeout, .writeTimeout: return .unavailable(.timedOut)
            case .bodyLengthMismatch: return .bodyUnreadable
            default: return .unavailable(.connectionFailed)
            }
        }
        if error is FileSystemError { return .bodyUnreadable }
        if error is ChannelError || error is IOError || error is NIOConnectionError || error is HTTPParserError || !sendsCallerBody {
            return .unavailable(.connectionFailed)
        }
        // Not the network's: the part body's own source (a buffer sequence that failed).
        return .bodyUnreadable
    }

    /// S3's timestamp `YYYY-MM-DDTHH:MM:SS[.fff]Z` (ISO 8601 in UTC, as `Initiated` is written)
    /// → seconds since 1970, fractions dropped; nil for anything else.
    static func parseTimestamp(_ text: String) -> Int64? {
        let bytes = Array(text.utf8)
        guard bytes.count >= 20, bytes.last == UInt8(ascii: "Z") else { return nil }
        func number(_ range: Range<Int>) -> Int64? {
            var value: Int64 = 0
            for byte in bytes[range] {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
                value = value * 10 + Int64(byte - UInt8(ascii: "0"))
            }
            return value
        }
        guard bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"), bytes[10] == UInt8(ascii: "T"),
              bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"),
              let year = number(0..<4), let month = number(5..<7), let day = number(8..<10),
              let hour = number(11..<13), let minute = number(14..<16), let second = number(17..<19),
              (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61 else { return nil }
        // Nothing but a fraction may come between the seconds and the `Z`.
        if bytes.count > 20 {
            guard bytes[19] == UInt8(ascii: "."), bytes.count > 21, number(20..<(bytes.count - 1)) != nil else { return nil }
        }
        // Days from 1970-01-01 to the date (the proleptic Gregorian calendar, March-based years).
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        return days * 86_400 + hour * 3600 + minute * 60 + second
    }

    /// `bytes a-b/total` → (a...b, total); nil for anything else (`*/total` included).
    static func parseContentRange(_ value: String) -> (range: ClosedRange<Int64>, total: Int64)? {
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        guard trimmed.hasPrefix("bytes ") else { return nil }
        let spec = trimmed.dropFirst("bytes ".count)
        let halves = spec.split(separator: "/", maxSplits: 1)
        guard halves.count == 2, let total = Int64(halves[1]) else { return nil }
        let bounds = halves[0].split(separator: "-", maxSplits: 1)
        guard bounds.count == 2, let lower = Int64(bounds[0]), let upper = Int64(bounds[1]), lower <= upper, upper < total else { return nil }
        return (lower...upper, total)
    }
}
