import Logging
import Synchronization

/// Aborts the object store's unfinished multipart uploads that no blob owns (issue 27;
/// docs/operations.md, "Object storage"). An upload is left behind when a relay stops — or its
/// call to the store times out — between `CreateMultipartUpload` and recording the upload id, or
/// when the blob's row is erased in that window: the erasure then knows no upload to abort, and
/// the store keeps the parts (and bills them) for ever unless a bucket lifecycle rule drops them.
///
/// The rule, safe with several relays sharing the bucket: the blob service inserts a blob's row
/// (which names its random storage key) **before** it starts the upload, and an upload under a
/// key is only ever made for that row. So an upload listed under `<prefix>blobs/<storage key>`
/// whose key no blob row names belongs to an erased blob (or to none) and nothing will complete
/// it; it is aborted only when it is also older than ``Limits/grace`` by the store's own
/// `Initiated` time, which covers clocks that disagree and any relay that would order its calls
/// otherwise. Keys that are not the relay's storage keys, and uploads whose start the store does
/// not tell, are never touched.
///
/// Bounds: a pass lists at most ``Limits/maxListed`` uploads in pages of
/// ``S3Client/maxListedUploads`` and aborts at most ``Limits/maxAborted``; a pass that stops at a
/// bound remembers where, and the next one goes on from there. Passes run from the
/// ``BlobEraser``: at start, then at most every ``Limits/interval``.
final class S3OrphanUploadSweeper: Sendable {
    /// The sweeper's periods and bounds (milliseconds, counts).
    struct Limits: Sendable {
        /// How old an unowned upload must be before it is aborted: 1 h.
        var grace: Int64 = 3_600_000
        /// The least time between two passes: 1 h.
        var interval: Int64 = 3_600_000
        /// Uploads listed per pass.
        var maxListed = 10_000
        /// Uploads aborted per pass.
        var maxAborted = 1_000
    }

    /// What a pass did.
    struct Outcome: Sendable, Equatable {
        /// Uploads listed under the blobs' prefix.
        var listed = 0
        /// Uploads aborted.
        var aborted = 0
        /// Whether the pass stopped at a bound (the next goes on where it stopped).
        var capped = false
    }

    private struct State {
        /// Where the next pass starts listing; nil: from the start.
        var marker: S3Client.ListMarker?
        /// When the last pass began (milliseconds); nil: none yet.
        var lastPass: Int64?
    }

    private let client: S3Client
    /// `<prefix>blobs/`: every blob's object key starts with it.
    private let prefix: String
    private let records: any BlobRecords
    private let clock: @Sendable () -> Int64
    private let limits: Limits
    private let state = Mutex(State())

    /// A sweeper of `storage`'s bucket, checking keys against `records`, at the time `clock`
    /// gives (milliseconds since 1970).
    init(storage: S3BlobStorage, records: any BlobRecords, clock: @escaping @Sendable () -> Int64, limits: Limits = Limits()) {
        self.client = storage.client
        self.prefix = storage.objectKey("")
        self.records = records
        self.clock = clock
        self.limits = limits
    }

    /// Runs a pass when none has run for ``Limits/interval``; failures are logged and left for
    /// the next pass.
    func passIfDue(logger: Logger) async {
        let now = clock()
        let due = state.withLock { state in
            guard state.lastPass.map({ now - $0 >= limits.interval }) ?? true else { return false }
            state.lastPass = now
            return true
        }
        guard due else { return }
        do {
            let outcome = try await sweep()
            if outcome.aborted > 0 || outcome.capped {
                logger.info("orphan object-store uploads aborted", metadata: [
                    "count": "\(outcome.aborted)", "listed": "\(outcome.listed)", "capped": "\(outcome.capped)"])
            }
        } catch {
            logger.warning("could not clean up orphan object-store uploads; retrying later", metadata: ["error": "\(error)"])
        }
    }

    /// One pass: lists the uploads under the blobs' prefix from where the last pass stopped,
    /// and aborts those no blob row names that are older than the grace period.
    func sweep() async throws -> Outcome {
        var outcome = Outcome()
        var marker = state.withLock { $0.marker }
        while true {
            let pageSize = min(S3Client.maxListedUploads, limits.maxListed - outcome.listed)
            let page = try await client.listMultipartUploads(prefix: prefix, after: marker, maxUploads: pageSize)
            outcome.listed += page.uploads.count
            let now = clock()
            let candidates = page.uploads.filter { upload in
                guard let initiated = upload.initiated, storageKey(upload.key) != nil else { return false }
                return initiated * 1000 + limits.grace <= now
            }
            let used = try await records.blobStorageKeysInUse(Array(Set(candidates.compactMap { storageKey($0.key) })))
            for upload in candidates where !used.contains(storageKey(upload.key) ?? "") {
                guard outcome.aborted < limits.maxAborted else {
                    // This page again next time: what was not aborted yet is still on it.
                    outcome.capped = true
                    state.withLock { $0.marker = marker }
                    return outcome
                }
                try await client.abortMultipartUpload(key: upload.key, uploadID: upload.uploadID)
                outcome.aborted += 1
            }
            marker = page.next
            if marker == nil { break }
            if outcome.listed >= limits.maxListed {
                outcome.capped = true
                break
            }
        }
        state.withLock { $0.marker = marker }
        return outcome
    }

    /// The storage key of an object key under the blobs' prefix when it has the form the blob
    /// service gives them (32 lowercase hexadecimal digits); nil for any other key.
    private func storageKey(_ objectKey: String) -> String? {
        guard objectKey.hasPrefix(prefix) else { return nil }
        let key = objectKey.dropFirst(prefix.count)
        guard key.utf8.count == 32, key.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0) })
        else { return nil }
        return String(key)
    }
}
