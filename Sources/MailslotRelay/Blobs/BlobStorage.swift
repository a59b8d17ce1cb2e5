import MailslotWire
import NIOCore

// Where blob bytes live: files under the data folder (``FileBlobStorage``, the default) or an
// S3-compatible object store (``S3BlobStorage``, for several relays). The blob service is the
// only caller; it has already checked access, state and bounds, and records in the store what
// a storage call did only after the call returned. Keys are random storage keys, never blob ids.

/// Why a storage call failed. Nothing the storage held before the call is lost by a failure.
enum BlobStorageFailure: Error, Equatable {
    /// The part's bytes do not hash to the digest the client sent: nothing kept of them.
    case digestMismatch
    /// The body ended before the part's length.
    case shortBody
    /// No room: the disk (or the spool's) is under the free-space watermark. `507`.
    case full
    /// The object store cannot be reached now. `503`; safe to repeat.
    case unavailable
    /// The object store no longer knows the unfinished upload (an S3 server restarted). `410`.
    case uploadLost
    /// Anything else the storage said. `500`.
    case failed(String)
}

/// An unfinished upload as the storage knows it: the S3 multipart upload id; nil for files.
typealias UploadHandle = String?

/// Where blob bytes live.
protocol BlobStorage: Sendable {
    /// Prepares to receive a blob of `size` bytes under `key` (files: creates and allocates the
    /// file, so that the free-space watermark sees the whole upload now; S3: starts a multipart
    /// upload and returns its id).
    func begin(key: String, size: Int64) async throws(BlobStorageFailure) -> UploadHandle

    /// Writes exactly `length` bytes from `body` as part `number`, at `offset` of the blob,
    /// hashing them on the way: refused (``BlobStorageFailure/digestMismatch``) unless they hash
    /// (BLAKE2b-256) to `digest`, durable when it returns. Memory: about one part at most, read
    /// from `body` at the pace the storage writes. The ETag an object store gave the part, if any.
    func writePart<Body: AsyncSequence & Sendable>(key: String, upload: UploadHandle, number: Int, offset: Int64, length: Int64,
                                                   digest: [UInt8], body: Body) async throws(BlobStorageFailure) -> String?
        where Body.Element == ByteBuffer

    /// Makes the blob whole once every part is written (S3: `CompleteMultipartUpload` with `parts`).
    func complete(key: String, upload: UploadHandle, parts: [StoredPart]) async throws(BlobStorageFailure)

    /// Reads bytes `range` of a complete blob, handing them to `write` in chunks of at most 1 MiB,
    /// each written before the next is read (the reader's pace bounds the memory).
    func read(key: String, range: Range<Int64>, into write: (ByteBuffer) async throws -> Void) async throws

    /// Removes the blob's bytes and its unfinished upload, if any. Idempotent: bytes already
    /// gone are success.
    func erase(key: String, upload: UploadHandle) async throws(BlobStorageFailure)

    /// Free bytes where the storage writes, when it can tell (files: the data folder's disk);
    /// nil for an object store (whose spool the S3 backend watches itself).
    func freeBytes() -> Int64?
}
