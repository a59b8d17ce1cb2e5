import Foundation
import Logging
import MailslotCrypto
import MailslotTestSupport
import NIOCore
import Synchronization
import Testing
@testable import MailslotRelay

/// The S3 blob storage against a real S3 server (`rclone serve s3`, started by `tools/s3 run`,
/// which sets MAILSLOT_TEST_S3_URL, the credentials and MAILSLOT_TEST_S3_DATA, the server's
/// folder). Without it the cases that need the server report themselves skipped, with the reason.
@Suite struct S3BlobStorageTests {
    static let skipReason = "MAILSLOT_TEST_S3_URL is not set: run the tests under tools/s3 run"
    static let environment = ProcessInfo.processInfo.environment
    static let hasServer = S3ClientTests.hasServer

    /// A storage over the test server with a data folder of its own (removed afterwards), shut
    /// down afterwards. `probe` stands for the spool disk's free space.
    @discardableResult
    static func withStorage<T>(environment: [String: String] = S3BlobStorageTests.environment, location: String? = nil,
                               minFreeBytes: Int64 = 0, probe: DiskSpace.Probe? = nil, logger: Logger = TestRelay.logger,
                               timeouts: S3Client.Timeouts = S3Client.Timeouts(),
                               _ body: (S3BlobStorage) async throws -> T) async throws -> T {
        let data = FileManager.default.temporaryDirectory.appendingPathComponent("s3blob-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: data) }
        let location = try S3Location(try #require(location ?? S3ClientTests.serverURL))
        let client = S3Client(location: location, credentials: try S3Location.credentials(from: environment), timeouts: timeouts,
                              logger: logger)
        let storage: S3BlobStorage
        do {
            storage = try S3BlobStorage(client: client, dataDirectory: data, minFreeBytes: minFreeBytes,
                                        probe: probe ?? DiskSpace.available, logger: logger)
        } catch {
            try? await client.shutdown()
            throw error
        }
        do {
            let value = try await body(storage)
            #expect(spoolFiles(storage).isEmpty, "the spool is empty after every call")
            try await storage.shutdown()
            return value
        } catch {
            try? await storage.shutdown()
            throw error
        }
    }

    static func spoolFiles(_ storage: S3BlobStorage) -> [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: storage.spoolDirectory)) ?? []
    }

    /// A fresh storage key, as the blob service makes them.
    static func newKey() -> String { randomBytes(16).map { String(format: "%02x", $0) }.joined() }

    /// `bytes` as a request body would come: buffers of at most 64 KiB.
    static func body(_ bytes: [UInt8], piece: Int = 65_536) -> AsyncStream<ByteBuffer> {
        let buffers = stride(from: 0, to: bytes.count, by: piece).map { ByteBuffer(bytes: bytes[$0..<min($0 + piece, bytes.count)]) }
        return AsyncStream { continuation in
            for buffer in buffers { continuation.yield(buffer) }
            continuation.finish()
        }
    }

    /// Writes part `number` (1-based) of `whole` cut in `partSize` parts; the stored part.
    static func write(_ storage: S3BlobStorage, _ key: String, _ upload: UploadHandle, _ whole: [UInt8], partSize: Int, number: Int)
        async throws -> StoredPart {
        let offset = (number - 1) * partSize
        let bytes = Array(whole[offset..<min(offset + partSize, whole.count)])
        let etag = try await storage.writePart(key: key, upload: upload, number: number, offset: Int64(offset), length: Int64(bytes.count),
                                               digest: blake2b(bytes), body: body(bytes))
        return StoredPart(number: number, digest: blake2b(bytes), etag: etag)
    }

    /// Bytes `range` of the blob, and the largest buffer the writer was handed.
    static func read(_ storage: S3BlobStorage, _ key: String, _ range: Range<Int64>) async throws -> (bytes: [UInt8], largest: Int) {
        var bytes: [UInt8] = [], largest = 0
        try await storage.read(key: key, range: range) { buffer in
            largest = max(largest, buffer.readableBytes)
            bytes += buffer.readableBytesView
        }
        return (bytes, largest)
    }

    /// The file rclone keeps object `key` in (MAILSLOT_TEST_S3_DATA/BUCKET/KEY).
    static func objectFile(_ storage: S3BlobStorage, _ key: String) throws -> String {
        let data = try #require(environment["MAILSLOT_TEST_S3_DATA"])
        return "\(data)/\(storage.client.location.bucket)/\(storage.objectKey(key))"
    }

    // MARK: Round trip

    /// Parts written out of order (3, 1, 2) and completed: the object is byte for byte the file,
    /// read whole and in ranges across the part boundaries, in buffers of at most 1 MiB; it sits
    /// under `<prefix>blobs/<key>`; erased, it is gone, and erasing again is fine.
    @Test(.enabled(if: S3BlobStorageTests.hasServer, Comment(rawValue: S3BlobStorageTests.skipReason)))
    func partsOutOfOrderRoundTrip() async throws {
        try await Self.withStorage { storage in
            let key = Self.newKey(), partSize = 1 << 20
            let whole = randomBytes(3 * partSize + 12_345)  // four parts, the last short
            let upload = try await storage.begin(key: key, size: Int64(whole.count))
            #expect(upload != nil)
            var parts: [StoredPart] = []
            for number in [3, 1, 4, 2] {
                parts.append(try await Self.write(storage, key, upload, whole, partSize: partSize, number: number))
                #expect(Self.spoolFiles(storage).isEmpty, "part \(number)'s spool file is gone once stored")
            }
            #expect(parts.allSatisfy { $0.etag?.isEmpty == false })
            try await storage.complete(key: key, upload: upload, parts: parts)  // in the order written: sorted inside
            // A second completion (a lost answer, another relay) finds the object and succeeds.
            try await storage.complete(key: key, upload: upload, parts: parts)
            #expect(FileManager.default.fileExists(atPath: try Self.objectFile(storage, key)))

            let size = Int64(whole.count), boundary = Int64(partSize)
            let (all, largest) = try await Self.read(storage, key, 0..<size)
            #expect(all == whole)
            #expect(largest <= S3BlobStorage.chunkBytes, "largest buffer \(largest)")
            for range: Range<Int64> in [0..<1, boundary - 1..<boundary + 1, boundary - 1000..<2 * boundary + 1000, 3 * boundary..<size, size - 1..<size, 5..<5] {
                let (bytes, _) = try await Self.read(storage, key, range)
                #expect(bytes == Array(whole[Int(range.lowerBound)..<Int(range.upperBound)]), "range \(range)")
            }

            try await storage.erase(key: key, upload: nil)
            #expect(!FileManager.default.fileExists(atPath: try Self.objectFile(storage, key)))
            await #expect(throws: BlobStorageFailure.failed(S3Error.notFound.description)) { try await Self.read(storage, key, 0..<10) }
            try await storage.erase(key: key, upload: nil)
            try await storage.erase(key: key, upload: upload)  // the upload is long gone: still fine
            try await storage.erase(key: Self.newKey(), upload: nil)  // never existed
        }
    }

    /// A reader's own error ends the read and comes back unchanged.
    @Test(.enabled(if: S3BlobStorageTests.hasServer, Comment(rawValue: S3BlobStorageTests.skipReason)))
    func readerErrorPassesThrough() async throws {
        struct Stop: Error {}
        try await Self.withStorage { storage in
            let key = Self.newKey(), whole = randomBytes(300_000)
            let upload = try await storage.begin(key: key, size: Int64(whole.count))
            let part = try await Self.write(storage, key, upload, whole, partSize: whole.count, number: 1)
            try await storage.complete(key: key, upload: upload, parts: [part])
            await #expect(throws: Stop.self) { try await storage.read(key: key, range: 0..<300_000) { _ in throw Stop() } }
            try await storage.erase(key: key, upload: nil)
        }
    }

    // MARK: Refused parts

    /// A part whose bytes do not match its digest, one cut short and one too long are refused and
    /// leave nothing: not in the spool, and not in the store — rclone refuses other bytes for a
    /// part it has, so the right part accepted afterwards proves the wrong one never arrived.
    @Test(.enabled(if: S3BlobStorageTests.hasServer, Comment(rawValue: S3BlobStorageTests.skipReason)))
    func refusedPartsLeaveNothing() async throws {
        try await Self.withStorage { storage in
            let key = Self.newKey(), whole = randomBytes(200_000)
            let upload = try await storage.begin(key: key, size: Int64(whole.count))
            var forged = whole
            forged[123_456] ^= 1
            await #expect(throws: BlobStorageFailure.digestMismatch) {
                try await storage.writePart(key: key, upload: upload, number: 1, offset: 0, length: Int64(whole.count),
                                            digest: blake2b(whole), body: Self.body(forged))
            }
            await #expect(throws: BlobStorageFailure.shortBody) {
                try await storage.writePart(key: key, upload: upload, number: 1, offset: 0, length: Int64(whole.count),
                                            digest: blake2b(whole), body: Self.body(Array(whole.dropLast())))
            }
            await #expect(throws: BlobStorageFailure.self) {
                try await storage.writePart(key: key, upload: upload, number: 1, offset: 0, length: Int64(whole.count),
                                            digest: blake2b(whole), body: Self.body(whole + [0]))
            }
            #expect(Self.spoolFiles(storage).isEmpty)
            let part = try await Self.write(storage, key, upload, whole, partSize: whole.count, number: 1)
            try await storage.complete(key: key, upload: upload, parts: [part])
            #expect(try await Self.read(storage, key, 0..<Int64(whole.count)).bytes == whole)
            try await storage.erase(key: key, upload: nil)
        }
    }

    /// A body that fails half-way (the client went away) is a short body; nothing is kept.
    @Test(.enabled(if: S3BlobStorageTests.hasServer, Comment(rawValue: S3BlobStorageTests.skipReason)))
    func failingBodyIsShort() async throws {
        struct Gone: Error {}
        try await Self.withStorage { storage in
            let key = Self.newKey()
            let upload = try await storage.begin(key: key, size: 100_000)
            let body = AsyncThrowingStream<ByteBuffer, any Error> { continuation in
                continuation.yield(ByteBuffer(bytes: randomBytes(50_000)))
                continuation.finish(throwing: Gone())
            }
            await #expect(throws: BlobStorageFailure.shortBody) {
                try await storage.writePart(key: key, upload: upload, number: 1, offset: 0, length: 100_000,
                                            digest: blake2b(randomBytes(10)), body: body)
            }
            try await storage.erase(key: key, upload: upload)
        }
    }

    /// Below the watermark on the spool's disk, uploads and parts are refused as full, and
    /// nothing is spooled or started.
    @Test(.enabled(if: S3BlobStorageTests.hasServer, Comment(rawValue: S3BlobStorageTests.skipReason)))
    func spoolUnderTheWatermarkIsFull() async throws {
        let free = FreeSpace(1 << 30)
        try await Self.withStorage(minFreeBytes: 100 << 20, probe: { _ in free.bytes }) { storage in
            let key = Self.newKey(), whole = randomBytes(100_000)
            let upload = try await storage.begin(key: key, size: Int64(whole.count))
            free.bytes = (100 << 20) + 50_000  // room for less than the part above the watermark
            await #expect(throws: BlobStorageFailure.full) {
                try await Self.write(storage, key, upload, whole, partSize: whole.count, number: 1)
            }
            free.bytes = 1 << 20
            await #expect(throws: BlobStorageFailure.full) { try await storage.begin(key: Self.newKey(), size: 10) }
            free.bytes = 1 << 30
            let part = try await Self.write(storage, key, upload, whole, partSize: whole.count, number: 1)
            try await storage.complete(key: key, upload: upload, parts: [part])
            try await storage.erase(key: key, upload: nil)
        }
    }

    // MARK: Erasing and lost uploads

    /// Erasing an unfinished upload aborts it: its parts and its completion find it lost, and
    /// no object is left; erasing again is fine.
    @Test(.enabled(if: S3BlobStorageTests.hasServer, Comment(rawValue: S3BlobStorageTests.skipReason)))
    func eraseAbortsAnUnfinishedUpload() async throws {
        try await Self.withStorage { storage in
            let key = Self.newKey(), whole = randomBytes(150_000)
            let upload = try await storage.begin(key: key, size: Int64(whole.count))
            let part = try await Self.write(storage, key, upload, whole, partSize: 100_000, number: 1)
            try await storage.erase(key: key, upload: upload)
            await #expect(throws: BlobStorageFailure.uploadLost) {
                try await Self.write(storage, key, upload, whole, partSize: 100_000, number: 2)
            }
            await #expect(throws: BlobStorageFailure.uploadLost) { try await storage.complete(key: key, upload: upload, parts: [part]) }
            #expect(!FileManager.default.fileExists(atPath: try Self.objectFile(storage, key)))
            try await storage.erase(key: key, upload: upload)
        }
    }

    /// Orphan uploads (issue 27), on the server: under a prefix of this test's own (so that other
    /// suites' uploads are never listed), an upload whose storage key a blob row names and one
    /// whose key none does. Fresh, neither is aborted; past the grace period the orphan is (its
    /// parts are refused as lost) and the owned one goes on.
    @Test(.enabled(if: S3BlobStorageTests.hasServer, Comment(rawValue: S3BlobStorageTests.skipReason)))
    func orphanUploadsAreAbortedOnARealServer() async throws {
        let url = try #require(S3ClientTests.serverURL)
        let query = try #require(url.firstIndex(of: "?"))
        let location = String(url[..<query]) + "/orphans-\(UUID().uuidString.lowercased())" + String(url[query...])
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("orphans-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let store = try SQLiteStore(path: folder.appendingPathComponent("relay.sqlite").path)
        try await Self.withStorage(location: location) { storage in
            let owned = Self.newKey(), orphan = Self.newKey(), whole = randomBytes(150_000)
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let blob = NewBlob(id: "blob-owned-0000000", author: "alice", size: Int64(whole.count), partSize: 100_000, parts: 2,
                               storageKey: owned, ttlSeconds: 60, uploadExpiresAt: now + 86_400_000, recipients: ["bob"])
            _ = try await store.createBlob(blob, limits: BlobLimits(maxAuthorBytes: 1 << 40, maxUploading: 8), now: now)
            let ownedUpload = try await storage.begin(key: owned, size: Int64(whole.count))
            let orphanUpload = try await storage.begin(key: orphan, size: Int64(whole.count))
            let part = try await Self.write(storage, owned, ownedUpload, whole, partSize: 100_000, number: 1)
            _ = try await Self.write(storage, orphan, orphanUpload, whole, partSize: 100_000, number: 1)

            let fresh = S3OrphanUploadSweeper(storage: storage, records: store, clock: { Int64(Date().timeIntervalSince1970 * 1000) })
            let first = try await fresh.sweep()
            #expect(first == S3OrphanUploadSweeper.Outcome(listed: 2, aborted: 0, capped: false))
            let later = S3OrphanUploadSweeper(storage: storage, records: store, clock: { Int64(Date().timeIntervalSince1970 * 1000) + 7_200_000 })
            let second = try await later.sweep()
            #expect(second == S3OrphanUploadSweeper.Outcome(listed: 2, aborted: 1, capped: false))
            await #expect(throws: BlobStorageFailure.uploadLost) {
                try await Self.write(storage, orphan, orphanUpload, whole, partSize: 100_000, number: 2)
            }
            let last = try await Self.write(storage, owned, ownedUpload, whole, partSize: 100_000, number: 2)
            let third = try await later.sweep()
            #expect(third == S3OrphanUploadSweeper.Outcome(listed: 1, aborted: 0, capped: false))
            try await storage.complete(key: owned, upload: ownedUpload, parts: [part, last])
            #expect(try await Self.read(storage, owned, 0..<Int64(whole.count)).bytes == whole)
            try await storage.erase(key: owned, upload: nil)
        }
    }

    /// A relay over S3 runs the sweeper at start (from its blob eraser): an orphan upload under its
    /// prefix, old by the relay's clock, is aborted without anything else happening.
    @Test(.enabled(if: S3BlobStorageTests.hasServer, Comment(rawValue: S3BlobStorageTests.skipReason)))
    func relayAbortsOrphanUploadsAtStart() async throws {
        let url = try #require(S3ClientTests.serverURL)
        let query = try #require(url.firstIndex(of: "?"))
        let store = String(url[..<query]) + "/orphans-\(UUID().uuidString.lowercased())" + String(url[query...])
        let location = try S3Location(store)
        let client = S3Client(location: location, credentials: try S3Location.credentials(from: Self.environment), logger: TestRelay.logger)
        try await S3ClientTests.withClient(client) { client in
            let prefix = location.key("blobs/")
            _ = try await client.createMultipartUpload(key: prefix + Self.newKey())
            #expect(try await client.listMultipartUploads(prefix: prefix).uploads.count == 1)
            try await withTestRelay(configure: {
                $0.blobStore = .s3(store)
                $0.blobPartBytes = RelayConfiguration.minS3PartBytes
                $0.clock = RelayClock { EpochMilliseconds.now() + 7_200_000 }  // two hours on: the orphan is past its grace
            }) { _ in
                try await eventually("the relay aborted the orphan upload at start") {
                    try await client.listMultipartUploads(prefix: prefix).uploads.isEmpty
                }
            }
        }
    }

    /// A store that cannot be reached is `unavailable` (retry later) for every call; nothing is
    /// left in the spool.
    @Test func unreachableStoreIsUnavailable() async throws {
        let refusing = try LoopbackPort.refusing()  // nothing listens there, and nothing can meanwhile
        defer { refusing.close() }
        let port = refusing.port
        var timeouts = S3Client.Timeouts()
        timeouts.connect = .seconds(1)
        timeouts.call = .seconds(5)
        let environment = ["AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": "not-a-real-secret"]
        try await Self.withStorage(environment: environment, location: "s3://bucket?endpoint=http://127.0.0.1:\(port)&path_style=true",
                                   timeouts: timeouts) { storage in
            let key = Self.newKey()
            await #expect(throws: BlobStorageFailure.unavailable) { try await storage.begin(key: key, size: 10) }
            await #expect(throws: BlobStorageFailure.unavailable) {
                try await Self.write(storage, key, "upload", randomBytes(1000), partSize: 1000, number: 1)
            }
            await #expect(throws: BlobStorageFailure.unavailable) {
                try await storage.complete(key: key, upload: "upload", parts: [StoredPart(number: 1, digest: [], etag: "\"e\"")])
            }
            await #expect(throws: BlobStorageFailure.unavailable) { try await Self.read(storage, key, 0..<10) }
            await #expect(throws: BlobStorageFailure.unavailable) { try await storage.erase(key: key, upload: "upload") }
        }
    }

    /// Keys that are not storage keys never reach the store as object keys.
    @Test func malformedKeysAreRefused() async throws {
        let environment = ["AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": "not-a-real-secret"]
        try await Self.withStorage(environment: environment, location: "s3://bucket?endpoint=http://127.0.0.1:9&path_style=true") { storage in
            for key in ["", "../x", "a/b", "a?uploads", String(repeating: "a", count: 129)] {
                await #expect(throws: BlobStorageFailure.failed("not a storage key")) { try await storage.begin(key: key, size: 1) }
                await #expect(throws: BlobStorageFailure.failed("not a storage key")) { try await storage.erase(key: key, upload: nil) }
            }
        }
    }

    /// Spool files a crash left behind are deleted when the storage starts; other files are not.
    @Test func leftoverSpoolFilesAreDeletedAtStart() async throws {
        let data = FileManager.default.temporaryDirectory.appendingPathComponent("s3blob-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: data) }
        let spool = data + "/spool"
        try FileManager.default.createDirectory(atPath: spool, withIntermediateDirectories: true)
        let leftover = Self.newKey(), other = "notes.txt"
        for name in [leftover, other] { #expect(FileManager.default.createFile(atPath: "\(spool)/\(name)", contents: Data([1, 2, 3]))) }
        let environment = ["AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": "not-a-real-secret"]
        let storage = try S3BlobStorage.make(location: try S3Location("s3://bucket?endpoint=http://127.0.0.1:9"), environment: environment,
                                             dataDirectory: data, minFreeBytes: 0, logger: TestRelay.logger)
        try await storage.shutdown()
        #expect(Self.spoolFiles(storage) == [other])
        let attributes = try FileManager.default.attributesOfItem(atPath: spool)
        #expect((attributes[.posixPermissions] as? Int).map { $0 & 0o077 } == 0, "the spool is private")
    }

    /// A storage let go without a shutdown (a relay made but never run) closes its client itself:
    /// AsyncHTTPClient would stop a debug build at the release of a client still running.
    @Test func storageLetGoWithoutShutdown() async throws {
        let data = FileManager.default.temporaryDirectory.appendingPathComponent("s3blob-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: data) }
        let environment = ["AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": "not-a-real-secret"]
        for _ in 0..<3 {
            _ = try S3BlobStorage.make(location: try S3Location("s3://bucket?endpoint=http://127.0.0.1:9"), environment: environment,
                                       dataDirectory: data, minFreeBytes: 0, logger: TestRelay.logger)
        }
        // What is checked happens at each release above: a debug build stops the process there
        // if the client was not shut down. The shutdowns themselves finish on their own threads.
    }

    /// Credentials come from the environment only: without them the storage is not made.
    @Test func credentialsOnlyFromTheEnvironment() throws {
        #expect(throws: S3LocationError.self) {
            try S3BlobStorage.make(location: try S3Location("s3://bucket?endpoint=http://127.0.0.1:9"), environment: [:],
                                   dataDirectory: "/nonexistent", minFreeBytes: 0, logger: TestRelay.logger)
        }
    }

    /// At trace level, through a whole upload, download, a refused signature and an erasure,
    /// neither the secret key nor the session token reaches the log.
    @Test(.enabled(if: S3BlobStorageTests.hasServer, Comment(rawValue: S3BlobStorageTests.skipReason)))
    func secretsNeverReachTheLog() async throws {
        let log = CapturedLog()
        let secret = try #require(Self.environment["AWS_SECRET_ACCESS_KEY"])
        let token = Self.newKey()
        var environment = Self.environment
        environment["AWS_SESSION_TOKEN"] = token
        try await Self.withStorage(environment: environment, logger: log.logger) { storage in
            let key = Self.newKey(), whole = randomBytes(100_000)
            let upload = try await storage.begin(key: key, size: Int64(whole.count))
            let part = try await Self.write(storage, key, upload, whole, partSize: whole.count, number: 1)
            try await storage.complete(key: key, upload: upload, parts: [part])
            _ = try await Self.read(storage, key, 0..<100)
            try await storage.erase(key: key, upload: nil)
        }
        var wrong = Self.environment
        wrong["AWS_SECRET_ACCESS_KEY"] = "wrong-\(secret)"
        try await Self.withStorage(environment: wrong, logger: log.logger) { storage in
            await #expect(throws: BlobStorageFailure.self) { try await storage.begin(key: Self.newKey(), size: 10) }
        }
        let text = log.text
        #expect(text.contains("SignatureDoesNotMatch"), "the refusal was logged, by its code")
        for value in [secret, token] {
            #expect(!text.contains(value))
            #expect(!text.contains(value.prefix(12)))
        }
    }
}

/// A free-space reading the test changes.
private final class FreeSpace: Sendable {
    private let value: Mutex<Int64>
    init(_ bytes: Int64) { value = Mutex(bytes) }
    var bytes: Int64 {
        get { value.withLock { $0 } }
        set { value.withLock { $0 = newValue } }
    }
}
