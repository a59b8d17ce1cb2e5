import Foundation
import Logging
import MailslotCrypto
import MailslotTestSupport
import NIOCore
import Testing
@testable import MailslotRelay

/// The S3 client against a real S3 server: `rclone serve s3`, started by `tools/s3 run` (as
/// tools/test runs this suite), which sets MAILSLOT_TEST_S3_URL and the credentials. Without it the
/// cases report themselves skipped, with the reason. (S3ClientAnswerTests checks the client against
/// a fake endpoint's misbehaviour, without a server.)
@Suite struct S3ClientTests {
    static let skipReason = "MAILSLOT_TEST_S3_URL is not set: run the tests under tools/s3 run"
    static let environment = ProcessInfo.processInfo.environment
    static let serverURL = environment["MAILSLOT_TEST_S3_URL"].flatMap { $0.isEmpty ? nil : $0 }
    static let hasServer = serverURL != nil

    /// Runs `body` with a client of the test server (credentials from the environment, or
    /// `secret` instead of the right one), and shuts the client down afterwards.
    static func withClient<T>(secret: String? = nil, _ body: (S3Client) async throws -> T) async throws -> T {
        let location = try S3Location(try #require(serverURL))
        var credentials = try S3Location.credentials(from: environment)
        if let secret { credentials = SigV4.Credentials(accessKeyID: credentials.accessKeyID, secretAccessKey: secret) }
        return try await withClient(S3Client(location: location, credentials: credentials, logger: TestRelay.logger), body)
    }

    static func withClient<T>(_ client: S3Client, _ body: (S3Client) async throws -> T) async throws -> T {
        do {
            let value = try await body(client)
            try await client.shutdown()
            return value
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    /// A key of this test's own under the location's prefix.
    static func newKey(_ client: S3Client) -> String {
        client.location.key("tests/\(UUID().uuidString.lowercased())")
    }

    /// The bytes of `key` in `range`, through the streaming callback.
    static func read(_ client: S3Client, _ key: String, _ range: ClosedRange<Int64>) async throws -> [UInt8] {
        var bytes: [UInt8] = []
        _ = try await client.getObject(key: key, range: range) { bytes += $0.readableBytesView }
        return bytes
    }

    static func temporaryFile(_ name: String) -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("s3client-\(name)-\(UUID().uuidString)").path
    }

    // MARK: Against the server

    /// Create → parts from a file (over 5 MiB), from a sequence of buffers and from one buffer →
    /// the first part again (same ETag) → complete → HEAD → ranged reads (across part boundaries,
    /// byte for byte) → a range past the end → delete → reads find nothing → delete again.
    @Test(.enabled(if: S3ClientTests.hasServer, Comment(rawValue: S3ClientTests.skipReason)))
    func multipartRoundTrip() async throws {
        try await Self.withClient { client in
            let key = Self.newKey(client)
            let first = randomBytes(5 * 1024 * 1024 + 1000), second = randomBytes(1024 * 1024), third = randomBytes(4321)
            let whole = first + second + third
            let file = Self.temporaryFile("part1")
            defer { try? FileManager.default.removeItem(atPath: file) }
            // The first part sits in the middle of a file: the client reads from an offset.
            try Data(randomBytes(777) + first + randomBytes(99)).write(to: URL(fileURLWithPath: file))

            let upload = try await client.createMultipartUpload(key: key)
            #expect(!upload.isEmpty)
            let etag1 = try await client.uploadPart(key: key, uploadID: upload, number: 1, body: .file(file, offset: 777, length: Int64(first.count)))
            let again = try await client.uploadPart(key: key, uploadID: upload, number: 1, body: .file(file, offset: 777, length: Int64(first.count)))
            #expect(again == etag1, "the same part again is accepted and keeps its ETag")
            let buffers = stride(from: 0, to: second.count, by: 100_000).map { ByteBuffer(bytes: second[$0..<min($0 + 100_000, second.count)]) }
            let stream = AsyncStream<ByteBuffer> { continuation in
                for buffer in buffers { continuation.yield(buffer) }
                continuation.finish()
            }
            let etag2 = try await client.uploadPart(key: key, uploadID: upload, number: 2, body: .buffers(stream, length: Int64(second.count)))
            let etag3 = try await client.uploadPart(key: key, uploadID: upload, number: 3, body: .bytes(ByteBuffer(bytes: third)))
            try await client.completeMultipartUpload(key: key, uploadID: upload, parts: [
                S3Client.CompletedPart(number: 1, etag: etag1), S3Client.CompletedPart(number: 2, etag: etag2),
                S3Client.CompletedPart(number: 3, etag: etag3),
            ])

            let info = try await client.headObject(key: key)
            #expect(info.size == Int64(whole.count))
            let size = Int64(whole.count)
            let boundary = Int64(first.count)
            for range in [0...9, boundary - 100...boundary + 99, boundary + Int64(second.count) - 1...size - 1, 0...size - 1, size - 1...size - 1] {
                let bytes = try await Self.read(client, key, range)
                #expect(bytes == Array(whole[Int(range.lowerBound)...Int(range.upperBound)]), "range \(range)")
            }
            var total: Int64 = 0
            total = try await client.getObject(key: key, range: 10...19) { _ in }
            #expect(total == size, "the object's size comes from Content-Range")
            await #expect(throws: S3Error.invalidRange) { try await Self.read(client, key, size + 10...size + 20) }

            try await client.deleteObject(key: key)
            await #expect(throws: S3Error.notFound) { try await Self.read(client, key, 0...9) }
            await #expect(throws: S3Error.notFound) { try await client.headObject(key: key) }
            try await client.deleteObject(key: key)  // a missing object counts as deleted
        }
    }

    /// An aborted upload is gone: parts and completion find `uploadLost`; aborting again is fine.
    @Test(.enabled(if: S3ClientTests.hasServer, Comment(rawValue: S3ClientTests.skipReason)))
    func abortedUploadIsLost() async throws {
        try await Self.withClient { client in
            let key = Self.newKey(client)
            let upload = try await client.createMultipartUpload(key: key)
            let etag = try await client.uploadPart(key: key, uploadID: upload, number: 1, body: .bytes(ByteBuffer(bytes: randomBytes(1000))))
            try await client.abortMultipartUpload(key: key, uploadID: upload)
            await #expect(throws: S3Error.uploadLost) {
                try await client.uploadPart(key: key, uploadID: upload, number: 2, body: .bytes(ByteBuffer(bytes: randomBytes(10))))
            }
            await #expect(throws: S3Error.uploadLost) {
                try await client.completeMultipartUpload(key: key, uploadID: upload, parts: [S3Client.CompletedPart(number: 1, etag: etag)])
            }
            try await client.abortMultipartUpload(key: key, uploadID: upload)
            await #expect(throws: S3Error.notFound) { try await client.headObject(key: key) }
        }
    }

    /// A wrong secret is a typed signature refusal, not a string or a retryable failure.
    @Test(.enabled(if: S3ClientTests.hasServer, Comment(rawValue: S3ClientTests.skipReason)))
    func wrongSecretIsASignatureError() async throws {
        try await Self.withClient(secret: "not-the-secret") { client in
            await #expect(throws: S3Error.signatureRejected(code: "SignatureDoesNotMatch")) {
                try await client.createMultipartUpload(key: Self.newKey(client))
            }
            await #expect(throws: S3Error.signatureRejected(code: "SignatureDoesNotMatch")) {
                try await Self.read(client, Self.newKey(client), 0...1)
            }
        }
    }

    /// 64 MiB uploaded in eight 8 MiB parts from one file (offsets), then downloaded whole through
    /// the callback: the bytes hash the same, and no buffer handed over is larger than 1 MiB — the
    /// client streams, it never gathers the body (which would show as one 64 MiB buffer).
    @Test(.enabled(if: S3ClientTests.hasServer, Comment(rawValue: S3ClientTests.skipReason)))
    func largeDownloadStreamsInBoundedBuffers() async throws {
        try await Self.withClient { client in
            let key = Self.newKey(client)
            let partSize = 8 * 1024 * 1024, parts = 8
            let file = Self.temporaryFile("64mib")
            defer { try? FileManager.default.removeItem(atPath: file) }
            #expect(FileManager.default.createFile(atPath: file, contents: nil))
            let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: file))
            let sourceHash = SHA256Hasher()
            for _ in 0..<parts {
                let chunk = randomBytes(partSize)
                chunk.withUnsafeBytes { sourceHash.update($0) }
                try handle.write(contentsOf: chunk)
            }
            try handle.close()
            let expected = sourceHash.finalize()

            let upload = try await client.createMultipartUpload(key: key)
            var completed: [S3Client.CompletedPart] = []
            for number in 1...parts {
                let etag = try await client.uploadPart(key: key, uploadID: upload, number: number,
                                                       body: .file(file, offset: Int64((number - 1) * partSize), length: Int64(partSize)))
                completed.append(S3Client.CompletedPart(number: number, etag: etag))
            }
            try await client.completeMultipartUpload(key: key, uploadID: upload, parts: completed)

            let total = Int64(parts * partSize)
            let downloadHash = SHA256Hasher()
            var largest = 0, calls = 0
            var received: Int64 = 0
            let size = try await client.getObject(key: key, range: 0...total - 1) { buffer in
                largest = max(largest, buffer.readableBytes)
                calls += 1
                received += Int64(buffer.readableBytes)
                buffer.withUnsafeReadableBytes { downloadHash.update($0) }
            }
            #expect(size == total && received == total)
            #expect(downloadHash.finalize() == expected)
            #expect(largest <= 1024 * 1024, "largest buffer \(largest) bytes")
            #expect(calls >= 64, "\(calls) buffers for 64 MiB")
            try await client.deleteObject(key: key)
        }
    }
}
