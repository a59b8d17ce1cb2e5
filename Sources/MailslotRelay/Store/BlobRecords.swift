import Foundation
import MailslotWire

// What the relay keeps about blobs — who wrote them, who may read them, which parts are stored,
// when they expire — and the interface its blob service uses to keep it. The bytes themselves
// live in a ``BlobStorage`` (files or an object store) under a random storage key; the store
// only names that key. Every erasure (last acknowledgement, author delete, expiry) removes the
// rows and queues the storage key in the same transaction (``BlobErasure``), so bytes are never
// left without a row that says to erase them. spec/protocol.md §4.15–§4.21.

/// A blob to create, as the service decided it.
struct NewBlob: Sendable, Equatable {
    let id: String
    let author: String
    /// Ciphertext bytes.
    let size: Int64
    let partSize: Int64
    let parts: Int
    /// Where the bytes go in the storage: 32 random hex characters, never the blob id (a blob
    /// id re-created after an erasure never meets the old bytes).
    let storageKey: String
    /// Lifetime after completion, in seconds.
    let ttlSeconds: Int64
    /// When an unfinished upload is erased (milliseconds).
    let uploadExpiresAt: Int64
    /// The uids that may read it, distinct.
    let recipients: [String]
}

/// The per-author bounds a create checks, atomically with the insert.
struct BlobLimits: Sendable, Equatable {
    /// The most bytes of blobs, finished and unfinished, one author may hold.
    var maxAuthorBytes: Int64
    /// The most unfinished uploads one author may have.
    var maxUploading: Int
}

/// One part the storage holds and the store has recorded.
struct StoredPart: Sendable, Equatable {
    /// 1 … parts.
    let number: Int
    /// BLAKE2b-256 of the part's bytes.
    let digest: [UInt8]
    /// What the object store called the part (S3 `ETag`); nil for files.
    let etag: String?
}

/// A blob row with its unacknowledged recipients and recorded parts.
struct StoredBlob: Sendable, Equatable {
    let id: String
    let author: String
    let size: Int64
    let partSize: Int64
    let parts: Int
    let state: BlobState
    let storageKey: String
    /// The object store's multipart upload id while uploading (S3); nil for files, and once complete.
    let uploadHandle: String?
    let ttlSeconds: Int64
    let createdAt: Int64
    let uploadExpiresAt: Int64
    /// Set at completion.
    let completedAt: Int64?
    /// Set at completion: `completedAt + ttlSeconds·1000`.
    let expiresAt: Int64?
    /// Those that may still read it, sorted.
    let recipients: [String]
    /// The recorded parts, by number.
    let received: [StoredPart]

    /// Whether `now` is past its life: the unfinished upload's expiry, or the complete blob's.
    func isExpired(now: Int64) -> Bool {
        switch state {
        case .uploading: now >= uploadExpiresAt
        case .complete: now >= (expiresAt ?? .max)
        }
    }
}

/// Why a blob create was refused. Nothing is stored when it is.
enum BlobRefusal: Error, Equatable {
    /// The id is taken: by another author, or with another size, recipients or ttl.
    case conflict
    /// The author's blob bytes, with this one, would pass ``BlobLimits/maxAuthorBytes``.
    case quota
    /// The author has ``BlobLimits/maxUploading`` unfinished uploads.
    case tooManyUploads
}

/// The outcome of creating a blob.
enum BlobCreateOutcome: Sendable, Equatable {
    /// Stored now.
    case created(StoredBlob)
    /// The same author created the same blob (id, size, recipients, ttl) before: nothing
    /// changed. A retry after a lost answer.
    case existing(StoredBlob)
}

/// What a lookup found.
enum BlobLookup: Sendable, Equatable {
    /// A blob within its life.
    case live(StoredBlob)
    /// A blob past its life that the sweeper has not erased yet: answered as gone.
    case expired(StoredBlob)
    /// No such blob.
    case none
}

/// The outcome of recording a part.
enum PartOutcome: Sendable, Equatable {
    /// Recorded now; the blob as it stands after.
    case recorded(StoredBlob)
    /// Recorded before with the same digest: nothing changed.
    case same(StoredBlob)
    /// Recorded before with another digest: nothing changed.
    case conflict
    /// The blob is gone (erased, expired or complete in the meantime).
    case gone
}

/// The outcome of a recipient's acknowledgement.
enum BlobAckOutcome: Sendable, Equatable {
    /// The recipient is no longer one; `erased` when it was the last, and the blob is erased.
    case acknowledged(erased: Bool)
    /// No such live blob, or the principal is not among its unacknowledged recipients.
    case notRecipient
}

/// Bytes to remove from the storage: queued by every erasure, removed by the ``BlobEraser``.
struct BlobErasure: Sendable, Equatable {
    let storageKey: String
    /// The object store's unfinished multipart upload, to abort; nil when none.
    let uploadHandle: String?
}

/// The blob half of a relay's store. Every write is atomic; a refusal changes nothing.
/// Times are milliseconds since the epoch.
protocol BlobRecords: Sendable {
    /// Inserts `blob` (state uploading, no parts), unless refused: its id taken otherwise
    /// (``BlobRefusal/conflict``), or the author's bounds in `limits` reached. Concurrent creates
    /// of one author, from any relay, are counted one after another.
    func createBlob(_ blob: NewBlob, limits: BlobLimits, now: Int64) async throws -> BlobCreateOutcome

    /// Records the object store's upload id of a blob still uploading (S3 `CreateMultipartUpload`).
    func setBlobUploadHandle(id: String, handle: String) async throws

    /// The blob `id`, with its recipients and parts.
    func blob(id: String, now: Int64) async throws -> BlobLookup

    /// Records part `number` of an uploading, unexpired blob.
    func recordPart(blob id: String, part: StoredPart, now: Int64) async throws -> PartOutcome

    /// Completes an uploading blob whose every part is recorded: under a lock on the blob that
    /// holds across relays, runs `finish` (the storage's completion), then sets it complete with
    /// `expiresAt = now + ttl`. Returns the blob as it stands (complete), or nil when it is gone
    /// or not every part is recorded. A second completer finds it complete and does not run `finish`.
    func completeBlob(id: String, now: Int64, finish: @Sendable (StoredBlob) async throws -> Void) async throws -> StoredBlob?

    /// Removes `recipient` from the live blob's recipients; the last one erases the blob.
    func acknowledgeBlob(id: String, recipient: String, now: Int64) async throws -> BlobAckOutcome

    /// Erases blob `id` when `author` wrote it (whatever its state); whether it did.
    func deleteBlob(id: String, author: String, now: Int64) async throws -> Bool

    /// Live blobs `uid` wrote (``BlobRole/author``) or may read (``BlobRole/recipient``), by id
    /// after `cursor` (empty: from the start), at most `limit`.
    func blobs(uid: String, role: BlobRole, after cursor: String, limit: Int, now: Int64) async throws -> [StoredBlob]

    /// Erases expired blobs (unfinished past their upload expiry, complete past theirs), in
    /// transactions of at most `batch`; the number erased.
    func sweepExpiredBlobs(now: Int64, batch: Int) async throws -> Int

    /// Storage keys waiting to be erased from the storage, oldest first, at most `limit`.
    func blobErasures(limit: Int) async throws -> [BlobErasure]

    /// Forgets a queued erasure once the storage has removed its bytes.
    func finishBlobErasure(storageKey: String) async throws

    /// Those of `storageKeys` that a blob row (any state) names: the rest belong to no blob, and
    /// an object-store upload under them is an orphan (``S3OrphanUploadSweeper``).
    func blobStorageKeysInUse(_ storageKeys: [String]) async throws -> Set<String>

    /// Bytes of blobs `author` holds (finished and unfinished) and its unfinished uploads.
    func blobUsage(author: String) async throws -> (bytes: Int64, uploading: Int)
}
