import Foundation
import Logging
import MailslotCrypto
import NIOCore
import ServiceLifecycle
#if canImport(Glibc)
import Glibc
#endif

/// Blob bytes in an S3-compatible object store (`--blob-store s3://…`), so that several relays
/// over one PostgreSQL database serve the same blobs (docs/design/attachments.md §3.1,
/// docs/operations.md "Object storage").
///
/// - A blob is one object, `<prefix>blobs/<storage key>`, written as a multipart upload: ``begin(key:size:)``
///   starts it, each part is an `UploadPart`, ``complete(key:upload:parts:)`` joins them.
/// - A part is checked before anything reaches the store: its body is copied to a spool file
///   `<data>/spool/<random>` while hashed with BLAKE2b-256 (both on ``BlobIOPool``), refused on a wrong digest or length,
///   and only then streamed from the spool to the store; the spool file is deleted whatever
///   happens. (Stores differ on replacing a part: rclone refuses other bytes for a part it has, so
///   a bad part must never start.) The spool holds at most the parts in flight, and refuses a part
///   (``BlobStorageFailure/full``) that would take its disk under the free-space watermark.
/// - Reads are ranged `GetObject`s streamed to the writer in buffers of at most 1 MiB.
/// - Erasing aborts a leftover upload and deletes the object; both are idempotent.
///
/// Memory per transfer: the spool copy's two chunks (about 1 MiB, ``PartStream``); never a part or
/// an object whole. Credentials come only from the environment and are never logged (``S3Client``
/// and ``SigV4`` keep them out of descriptions). Failures map to the storage's: an unreachable,
/// slow or throttling store is ``BlobStorageFailure/unavailable`` (retry later), an upload the
/// store forgot (`NoSuchUpload`: rclone restarted, a lifecycle rule aborted it) is
/// ``BlobStorageFailure/uploadLost``, anything else ``BlobStorageFailure/failed(_:)`` with the
/// store's error code (never a secret).
final class S3BlobStorage: BlobStorage, Service {
    /// The object store.
    let client: S3Client
    /// Where parts wait while they are checked: `<data>/spool`.
    let spoolDirectory: String
    /// Free bytes the spool's disk keeps: a part that would leave fewer is refused (`507`).
    let minFreeBytes: Int64
    private let probe: DiskSpace.Probe
    private let logger: Logger
    /// Hashes and writes spooled parts (off the threads messages run on).
    private let pool: BlobIOPool

    /// The largest buffer handed to a reader.
    static let chunkBytes = 1 << 20

    /// A storage over `client`, spooling in `<dataDirectory>/spool` (created 0700; spool files a
    /// crash left there are deleted now). `probe` reads the spool disk's free space (tests inject it);
    /// `pool` hashes and writes the spool files.
    init(client: S3Client, dataDirectory: String, minFreeBytes: Int64, probe: @escaping DiskSpace.Probe = DiskSpace.available,
         logger: Logger, pool: BlobIOPool = .shared) throws {
        self.client = client
        self.pool = pool
        self.spoolDirectory = (dataDirectory as NSString).appendingPathComponent("spool")
        self.minFreeBytes = minFreeBytes
        self.probe = probe
        self.logger = logger
        try FileManager.default.createDirectory(atPath: spoolDirectory, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        // Also when it existed already: the spool holds ciphertext the relay has not checked yet.
        try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: spoolDirectory)
        // Only this relay writes here, and nothing in flight survives a restart.
        for name in (try? FileManager.default.contentsOfDirectory(atPath: spoolDirectory)) ?? [] where Self.isSpoolName(name) {
            unlink((spoolDirectory as NSString).appendingPathComponent(name))
        }
    }

    /// The storage for the setting `location` (`s3://…`), with credentials from `environment`
    /// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`) and nowhere else.
    /// Throws ``S3LocationError`` for missing credentials; the caller runs it as a `Service`
    /// (which shuts its HTTP client down).
    static func make(location: S3Location, environment: [String: String], dataDirectory: String, minFreeBytes: Int64,
                     probe: @escaping DiskSpace.Probe = DiskSpace.available, logger: Logger) throws -> S3BlobStorage {
        let credentials = try S3Location.credentials(from: environment)
        // A client never handed over is shut down when it is released (S3Client's deinit).
        let client = S3Client(location: location, credentials: credentials, logger: logger)
        return try S3BlobStorage(client: client, dataDirectory: dataDirectory, minFreeBytes: minFreeBytes, probe: probe, logger: logger)
    }

    /// As a `Service`: until graceful shutdown, then closes the store's connections.
    func run() async throws {
        try await client.run()
    }

    /// Closes the store's connections (tests; the relay runs the storage as a service).
    func shutdown() async throws {
        try await client.shutdown()
    }

    /// The object key of a blob's bytes.
    func objectKey(_ key: String) -> String {
        client.location.key("blobs/" + key)
    }

    // MARK: BlobStorage

    func begin(key: String, size: Int64) async throws(BlobStorageFailure) -> UploadHandle {
        try Self.checkKey(key)
        // New uploads wait while the spool cannot take a part.
        if let free = probe(spoolDirectory), free < minFreeBytes { throw .full }
        do {
            return try await client.createMultipartUpload(key: objectKey(key))
        } catch {
            throw map(error, "CreateMultipartUpload")
        }
    }

    func writePart<Body: AsyncSequence & Sendable>(key: String, upload: UploadHandle, number: Int, offset: Int64, length: Int64,
                                                   digest: [UInt8], body: Body) async throws(BlobStorageFailure) -> String?
    where Body.Element == ByteBuffer {
        try Self.checkKey(key)
        guard let upload else { throw .failed("an S3 part without its upload id") }
        guard (1...10_000).contains(number), length >= 0 else { throw .failed("part \(number) of \(length) bytes is outside S3's bounds") }
        if let free = probe(spoolDirectory), free - length < minFreeBytes { throw .full }

        let path = (spoolDirectory as NSString).appendingPathComponent(Self.newSpoolName())
        let outcome: Result<String, BlobStorageFailure>
        do {
            try await spool(body, length: length, digest: digest, to: path)
            let etag = try await client.uploadPart(key: objectKey(key), uploadID: upload, number: number,
                                                   body: .file(path, length: length))
            outcome = .success(etag)
        } catch let failure as BlobStorageFailure {
            outcome = .failure(failure)
        } catch {
            outcome = .failure(map(error, "UploadPart"))
        }
        // Whatever happened, the part's bytes leave the spool (a quick metadata call).
        unlink(path)
        return try outcome.get()
    }

    func complete(key: String, upload: UploadHandle, parts: [StoredPart]) async throws(BlobStorageFailure) {
        try Self.checkKey(key)
        guard let upload else { throw .failed("an S3 completion without its upload id") }
        var completed: [S3Client.CompletedPart] = []
        for part in parts.sorted(by: { $0.number < $1.number }) {
            guard let etag = part.etag else { throw .failed("part \(part.number) has no ETag") }
            completed.append(S3Client.CompletedPart(number: part.number, etag: etag))
        }
        do {
            try await client.completeMultipartUpload(key: objectKey(key), uploadID: upload, parts: completed)
        } catch .uploadLost {
            // Completed already (the answer, or the store's record of it, was lost) — the random
            // storage key has no other way to hold an object — or truly lost.
            do {
                _ = try await client.headObject(key: objectKey(key))
            } catch .notFound {
                throw .uploadLost
            } catch {
                throw map(error, "HeadObject")
            }
        } catch {
            throw map(error, "CompleteMultipartUpload")
        }
    }

    func read(key: String, range: Range<Int64>, into write: (ByteBuffer) async throws -> Void) async throws {
        try Self.checkKey(key)
        guard !range.isEmpty else { return }
        do {
            _ = try await client.getObject(key: objectKey(key), range: range.lowerBound...(range.upperBound - 1)) { buffer in
                // AsyncHTTPClient hands socket reads (tens of KiB); the bound holds whatever it hands.
                var buffer = buffer
                while buffer.readableBytes > Self.chunkBytes {
                    try await write(buffer.readSlice(length: Self.chunkBytes)!)
                }
                if buffer.readableBytes > 0 { try await write(buffer) }
            }
        } catch let error as S3Error {
            throw map(error, "GetObject")
        }
        // The writer's own errors pass through unchanged.
    }

    func erase(key: String, upload: UploadHandle) async throws(BlobStorageFailure) {
        try Self.checkKey(key)
        do {
            // Both count a missing upload or object as done.
            if let upload { try await client.abortMultipartUpload(key: objectKey(key), uploadID: upload) }
            try await client.deleteObject(key: objectKey(key))
        } catch {
            throw map(error, "erase")
        }
    }

    /// An object store has no free space the relay can see; the spool's is checked per part.
    func freeBytes() -> Int64? { nil }

    // MARK: Spool

    /// Copies exactly `length` bytes of `body` to a new file at `path` (0600), hashing them on
    /// the blob transfers' pool (``PartStream``: off the threads messages run on, about 1 MiB
    /// held); throws unless they hash to `digest`.
    private func spool<Body: AsyncSequence & Sendable>(_ body: Body, length: Int64, digest: [UInt8], to path: String) async throws
    where Body.Element == ByteBuffer {
        let descriptor: CInt
        do {
            descriptor = try await pool.run {
                let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
                guard descriptor >= 0 else { throw SpoolOpenFailure(errno: errno) }
                return descriptor
            }
        } catch let failure as SpoolOpenFailure {
            if failure.errno == ENOSPC || failure.errno == EDQUOT { throw BlobStorageFailure.full }
            logger.error("the S3 spool could not be written", metadata: ["error": "open: errno \(failure.errno)"])
            throw BlobStorageFailure.failed("spool: open: errno \(failure.errno)")
        } catch {
            throw BlobStorageFailure.failed("spool: \(type(of: error))")
        }
        defer { close(descriptor) }
        let written: Result<[UInt8], BlobStorageFailure>
        do {
            written = .success(try await PartStream(pool: pool).write(body, length: length, to: descriptor, at: 0))
        } catch {
            written = .failure(error)
        }
        switch written {
        case .success(let hashed):
            guard constantTimeEquals(hashed, digest) else { throw BlobStorageFailure.digestMismatch }
        case .failure(.failed(let reason)):
            logger.error("the S3 spool could not be written", metadata: ["error": "\(reason)"])
            throw BlobStorageFailure.failed("spool: \(reason)")
        case .failure(let failure):
            throw failure
        }
    }

    /// Why the spool file could not be created.
    private struct SpoolOpenFailure: Error {
        let errno: CInt
    }

    /// A fresh spool file name: 32 random hex characters.
    private static func newSpoolName() -> String {
        randomBytes(16).map { String(format: "%02x", $0) }.joined()
    }

    /// Whether `name` is one of ours (so that start-up deletes nothing else).
    static func isSpoolName(_ name: String) -> Bool {
        name.utf8.count == 32 && name.utf8.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0) }
    }

    /// Storage keys are the service's random names; anything else would reach the store as an
    /// object key, so it is refused rather than sent.
    private static func checkKey(_ key: String) throws(BlobStorageFailure) {
        guard (1...128).contains(key.utf8.count),
              key.utf8.allSatisfy({ $0.isASCIIAlphanumeric || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") })
        else { throw .failed("not a storage key") }
    }

    // MARK: Failures

    /// The storage failure for an object-store error, logged (the store's code, never a secret).
    private func map(_ error: any Error, _ call: String) -> BlobStorageFailure {
        if let failure = error as? BlobStorageFailure { return failure }
        let s3 = error as? S3Error ?? S3Client.map(error)
        let failure: BlobStorageFailure
        switch s3 {
        case .uploadLost: failure = .uploadLost
        case .unavailable, .throttled: failure = .unavailable
        default: failure = .failed(s3.description)
        }
        switch failure {
        case .failed: logger.error("object store call failed", metadata: ["call": "\(call)", "error": "\(s3)"])
        default: logger.warning("object store call failed", metadata: ["call": "\(call)", "error": "\(s3)"])
        }
        return failure
    }
}

extension UInt8 {
    /// `0-9 A-Z a-z`.
    fileprivate var isASCIIAlphanumeric: Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(self) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(self)
            || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(self)
    }
}
