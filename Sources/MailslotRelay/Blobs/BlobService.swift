import Foundation
import Logging
import MailslotWire
import NIOCore

/// The blob resource (spec/protocol.md §4.15–§4.21, docs/design/attachments.md §2): the one entry
/// point of every blob request. Each function runs the checks in the order of the design's
/// validation rows, asks the ``AccessRules`` (`allows(_:blobOf:recipients:principal:)`; anyone who
/// is not a party gets exactly the answer of a blob that does not exist), applies the bounds,
/// then changes the ``BlobRecords`` and the ``BlobStorage`` — the storage first, the record
/// once the storage has done its part, so that nothing recorded is missing from the storage.
struct BlobService: Sendable {
    let records: any BlobRecords
    let storage: any BlobStorage
    let configuration: RelayConfiguration
    /// The author's message create bucket: a blob create takes one token of it.
    let rateLimiter: RateLimiter
    let transfers: TransferLimiter
    /// The relay-wide transfer bandwidth cap (`--max-transfer-rate`); nil: none.
    let bandwidth: TransferBandwidth?
    let eraser: BlobEraser
    let metrics: RelayMetrics
    let logger: Logger

    typealias Principal = SessionService.Principal

    /// The time now, in milliseconds (``RelayConfiguration/clock``: injected by tests).
    var now: Int64 { configuration.clock.now() }

    /// The one answer for a blob that does not exist, is past its life, or is not the asker's
    /// business: byte for byte the same, so that no one learns which.
    static let notFound = Problem(.notFound, "no such blob")

    /// The largest create body: the JSON around 4 KiB, and each recipient with its quotes and comma.
    var createBodyBytes: Int { 4096 + 132 * configuration.maxBlobRecipients }

    // MARK: Create

    /// Creates a blob of the principal's: its record (author view), and whether it is new (201)
    /// or an identical create seen before (200).
    func create(_ principal: Principal, _ request: BlobCreateRequest) async throws -> (record: BlobRecord, created: Bool) {
        try Self.check(blobID: request.id)
        guard configuration.rules.allows(.create, blobOf: principal.uid, recipients: [], principal: principal.uid) else {
            throw Problem(.forbidden, "you may not do this")
        }
        guard FileCipher.isValidSize(request.size) else {
            throw Problem(.invalidBlobSize, "size must be the ciphertext size of a file (spec/attachments.md)")
        }
        let recipients = request.recipients
        guard (1...configuration.maxBlobRecipients).contains(recipients.count), recipients.allSatisfy(Identifier.isValidUID),
              Set(recipients).count == recipients.count else {
            throw Problem(.invalidRecipients, "recipients must be 1 to \(configuration.maxBlobRecipients) distinct valid uids")
        }
        let ttl = request.ttlSeconds ?? configuration.defaultMessageTTL
        guard (1...configuration.maxMessageTTL).contains(ttl) else {
            throw Problem(.invalidTTL, "ttl_seconds must be 1 to \(configuration.maxMessageTTL)")
        }
        guard request.size <= configuration.maxBlobSize else {
            throw Problem(.blobTooLarge, "the relay takes files of at most \(configuration.maxFileBytes) bytes (\(configuration.maxBlobSize) bytes sealed)")
        }
        guard let layout = BlobLayout(size: request.size, partSize: configuration.blobPartBytes) else {
            throw Problem(.blobTooLarge, "the file needs more than \(BlobLayout.maxParts) parts")
        }
        let now = now
        let blob = NewBlob(id: request.id, author: principal.uid, size: request.size, partSize: layout.partSize, parts: layout.parts,
                           storageKey: Self.newStorageKey(), ttlSeconds: ttl,
                           uploadExpiresAt: now + configuration.blobUploadTTL * 1000, recipients: recipients)
        if let retryAfter = rateLimiter.take(principal.uid, now: now) {
            // An identical retry is answered all the same, as for messages.
            if case .live(let stored) = try await records.blob(id: request.id, now: now), Self.isSame(stored, blob) {
                return (record(stored, for: principal.uid), false)
            }
            throw Problem(.rateLimited, "too many creates; slow down", retryAfter: retryAfter)
        }
        let outcome: BlobCreateOutcome
        do {
            outcome = try await records.createBlob(blob, limits: BlobLimits(maxAuthorBytes: configuration.maxAuthorBlobBytes,
                                                                            maxUploading: configuration.maxUploadsPerAuthor), now: now)
        } catch let refusal as BlobRefusal {
            switch refusal {
            case .conflict: throw Problem(.conflict, "this blob id is taken")
            case .tooManyUploads:
                throw Problem(.tooManyUploads, "you have \(configuration.maxUploadsPerAuthor) unfinished uploads; finish or delete one", retryAfter: 60)
            case .quota:
                throw Problem(.blobQuota, "your blobs would hold more than \(configuration.maxAuthorBlobBytes) bytes", retryAfter: 60)
            }
        }
        switch outcome {
        case .existing(let stored):
            rateLimiter.refund(principal.uid)
            return (record(stored, for: principal.uid), false)
        case .created(let stored):
            do {
                try await begin(stored)
            } catch {
                // Nothing of a refused create stays: the row goes, and its file with the erasure.
                _ = try? await records.deleteBlob(id: stored.id, author: stored.author, now: now)
                eraser.wake()
                throw error
            }
            metrics.blobsCreated.increment()
            return (record(stored, for: principal.uid), true)
        }
    }

    /// Reserves the room of a new blob in the storage: refused under the free-space watermark.
    private func begin(_ blob: StoredBlob) async throws {
        if let free = storage.freeBytes(), free - blob.size < configuration.minFreeBytes {
            throw Problem.storageFull
        }
        do {
            if let handle = try await storage.begin(key: blob.storageKey, size: blob.size) {
                try await records.setBlobUploadHandle(id: blob.id, handle: handle)
            }
        } catch let failure as BlobStorageFailure {
            throw problem(failure)
        }
    }

    /// Whether a stored blob is what `blob` asks to create (a retry of the same create).
    static func isSame(_ stored: StoredBlob, _ blob: NewBlob) -> Bool {
        stored.author == blob.author && stored.size == blob.size && stored.ttlSeconds == blob.ttlSeconds
            && stored.recipients == blob.recipients.sorted()
    }

    /// 16 random bytes in lowercase hex: where a blob's bytes go in the storage.
    static func newStorageKey() -> String {
        randomBytes(16).map { String(format: "%02x", $0) }.joined()
    }

    // MARK: Reading the record

    /// `GET /v1/blobs/{id}`: the record, for its author and recipients.
    func record(_ principal: Principal, id: String) async throws -> BlobRecord {
        let blob = try await party(principal, id: id, allowingExpiredUpload: true)
        return record(blob, for: principal.uid)
    }

    /// The blob `id` when the principal is one of its parties and it is within its life;
    /// otherwise the not-found answer — except, when `allowingExpiredUpload`, its author's
    /// unfinished upload past its expiry, which is `410 upload_expired`.
    private func party(_ principal: Principal, id: String, allowingExpiredUpload: Bool = true) async throws -> StoredBlob {
        try Self.check(blobID: id)
        switch try await records.blob(id: id, now: now) {
        case .none:
            throw Self.notFound
        case .expired(let blob):
            if allowingExpiredUpload, blob.state == .uploading, blob.author == principal.uid {
                throw Problem(.uploadExpired, "the upload expired before it was finished; start over with a new blob")
            }
            throw Self.notFound
        case .live(let blob):
            guard configuration.rules.isParty(toBlobOf: blob.author, recipients: Set(blob.recipients), principal: principal.uid) else {
                throw Self.notFound
            }
            return blob
        }
    }

    /// Requires `operation` of a party: `403` when it may not (a recipient uploading, deleting).
    private func require(_ operation: AccessOperation, _ blob: StoredBlob, _ principal: Principal) throws {
        guard configuration.rules.allows(operation, blobOf: blob.author, recipients: Set(blob.recipients), principal: principal.uid) else {
            throw Problem(.forbidden, "you may not do this")
        }
    }

    /// The wire record of `blob` as `uid` may see it: its author sees the parts received and the
    /// recipients left; a recipient sees neither.
    func record(_ blob: StoredBlob, for uid: String) -> BlobRecord {
        let forAuthor = blob.author == uid
        let uploading = blob.state == .uploading
        return BlobRecord(id: blob.id, author: blob.author, size: blob.size, partSize: blob.partSize, parts: blob.parts, state: blob.state,
                          createdAt: EpochMilliseconds.format(blob.createdAt), expiresAt: uploading ? nil : blob.expiresAt.map(EpochMilliseconds.format),
                          uploadExpiresAt: uploading ? EpochMilliseconds.format(blob.uploadExpiresAt) : nil,
                          received: forAuthor && uploading ? blob.received.map(\.number).sorted() : nil,
                          recipients: forAuthor ? blob.recipients.sorted() : nil)
    }

    // MARK: Parts

    /// A part upload that passed every check that needs no body: what ``upload(_:body:)`` writes.
    struct PartUpload: Sendable {
        let blob: StoredBlob
        let number: Int
        let range: Range<Int64>
        let digest: [UInt8]
        let principal: Principal
        /// Held until the upload ends; nil when nothing is to be written (an identical repeat).
        let permit: TransferLimiter.Permit?
        /// The part is recorded with this digest already: answered 200, the body left unread.
        let alreadyRecorded: Bool
    }

    /// The headers of a part upload that the service checks.
    struct PartHeaders: Sendable {
        var contentType: String?
        var contentLength: String?
        var chunked: Bool
        var digest: String?
    }

    /// `PUT /v1/blobs/{id}/parts/{n}` up to its body: id → n a number → rule (404/403) → state
    /// and expiry (410/409) → n range → Content-Type → Content-Length → digest header →
    /// recorded already (200/409) → transfers (429).
    func startUpload(_ principal: Principal, id: String, part text: String, headers: PartHeaders) async throws -> PartUpload {
        try Self.check(blobID: id)
        guard let number = Int(text), String(number) == text else { throw Problem(.invalidPart, "the part number must be a number") }
        let blob = try await party(principal, id: id)
        try require(.update, blob, principal)
        let layout = BlobLayout(size: blob.size, partSize: blob.partSize)
        guard let range = layout?.range(ofPart: number) else {
            throw Problem(.invalidPart, "this blob has parts 1 to \(blob.parts)")
        }
        guard let type = headers.contentType?.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased(),
              type == "application/octet-stream" else {
            throw Problem(.unsupportedMediaType, "send Content-Type: application/octet-stream")
        }
        guard !headers.chunked, let lengthText = headers.contentLength else {
            throw Problem(.lengthRequired, "send the part with a Content-Length (no chunked bodies)")
        }
        guard let length = Int64(lengthText), length == Int64(range.count) else {
            throw Problem(.invalidPartLength, "part \(number) is \(range.count) bytes")
        }
        guard let digestText = headers.digest, digestText.utf8.count == 43, let digest = Base64URL.decode(digestText), digest.count == 32 else {
            throw Problem(.invalidDigest, "send \(BlobLayout.digestHeader): the part's BLAKE2b-256, 43 characters of unpadded base64url")
        }
        if let recorded = blob.received.first(where: { $0.number == number }) {
            guard constantTimeEquals(recorded.digest, digest) else {
                throw blob.state == .complete ? Problem(.blobComplete, "the blob is complete; its parts no longer change")
                    : Problem(.partConflict, "part \(number) is stored with another digest")
            }
            return PartUpload(blob: blob, number: number, range: range, digest: digest, principal: principal, permit: nil, alreadyRecorded: true)
        }
        guard blob.state == .uploading else { throw Problem(.blobComplete, "the blob is complete; its parts no longer change") }
        let permit = try startTransfer(principal, part: .init(blob: blob.id, number: number))
        return PartUpload(blob: blob, number: number, range: range, digest: digest, principal: principal, permit: permit, alreadyRecorded: false)
    }

    /// Streams the part's body into the storage, checks its digest, makes it durable, records
    /// it, and completes the blob when it was the last one missing. The record as it stands after.
    func upload<Body: AsyncSequence & Sendable>(_ upload: PartUpload, body: Body) async throws -> BlobRecord where Body.Element == ByteBuffer {
        let blob = upload.blob
        if upload.alreadyRecorded {
            return record(blob, for: upload.principal.uid)
        }
        let etag: String?
        do {
            if let bandwidth {
                // Paced above the storage, so that both stores keep the cap.
                etag = try await write(upload, body: PacedBody(base: body, bandwidth: bandwidth))
            } else {
                etag = try await write(upload, body: body)
            }
        } catch {
            if error == .digestMismatch { metrics.blobPartsRefused.increment() }
            if error == .uploadLost {
                // The object store forgot the upload: the blob cannot be finished; erase it.
                _ = try? await records.deleteBlob(id: blob.id, author: blob.author, now: now)
                eraser.wake()
            }
            throw problem(error)
        }
        metrics.blobPartsReceived.increment()
        metrics.blobBytesReceived.increment(by: upload.range.count)
        let now = now
        let stored = StoredPart(number: upload.number, digest: upload.digest, etag: etag)
        var current: StoredBlob
        switch try await records.recordPart(blob: blob.id, part: stored, now: now) {
        case .recorded(let blob), .same(let blob):
            current = blob
        case .conflict:
            throw Problem(.partConflict, "part \(upload.number) is stored with another digest")
        case .gone:
            // Deleted or expired while the part streamed: its bytes go with the rest.
            eraser.wake()
            throw Self.notFound
        }
        withExtendedLifetime(upload.permit) {}
        if current.state == .uploading, current.received.count == current.parts {
            let storage = storage
            if let complete = try await records.completeBlob(id: blob.id, now: now, finish: { blob in
                do { try await storage.complete(key: blob.storageKey, upload: blob.uploadHandle, parts: blob.received) } catch let failure as BlobStorageFailure {
                    throw problem(failure)
                }
            }) {
                current = complete
            } else if case .live(let blob) = try await records.blob(id: blob.id, now: now) {
                current = blob
            }
        }
        return record(current, for: upload.principal.uid)
    }

    /// Hands the part's body to the storage.
    private func write<Body: AsyncSequence & Sendable>(_ upload: PartUpload, body: Body) async throws(BlobStorageFailure) -> String?
    where Body.Element == ByteBuffer {
        try await storage.writePart(key: upload.blob.storageKey, upload: upload.blob.uploadHandle, number: upload.number,
                                    offset: upload.range.lowerBound, length: Int64(upload.range.count), digest: upload.digest, body: body)
    }

    // MARK: Downloads

    /// A download that passed its checks: the bytes to send and the permit it holds.
    struct Download: Sendable {
        let blob: StoredBlob
        /// The bytes asked for: the whole blob, or the one range.
        let range: Range<Int64>
        /// Whether a `Range` asked for them (206) or not (200).
        let partial: Bool
        let permit: TransferLimiter.Permit
    }

    /// A `Range` the relay does not serve: answered `416` with `Content-Range: bytes */size`.
    struct UnsatisfiableRange: Error {
        let size: Int64
    }

    /// `GET /v1/blobs/{id}/content` up to its body: id → rule (404) → complete (409) → range (416) → transfers (429).
    func startDownload(_ principal: Principal, id: String, range header: String?) async throws -> Download {
        let blob = try await party(principal, id: id)
        try require(.read, blob, principal)
        guard blob.state == .complete else { throw Problem(.blobIncomplete, "the blob is still uploading") }
        var range: Range<Int64> = 0..<blob.size
        if let header {
            guard let asked = Self.range(header, size: blob.size) else { throw UnsatisfiableRange(size: blob.size) }
            range = asked
        }
        let permit = try startTransfer(principal, part: nil)
        return Download(blob: blob, range: range, partial: header != nil, permit: permit)
    }

    /// Hands the download's bytes to `write`, chunk by chunk, each written before the next is
    /// read — and, under a transfer bandwidth cap, read only once the bucket has paid for the last.
    ///
    /// `mailslot_blob_bytes_sent_total` counts each chunk as it is handed to the connection, before
    /// the write returns: a client may have the bytes before the writing task runs again, and a
    /// counter read once the client has them must already include them.
    func read(_ download: Download, into write: (ByteBuffer) async throws -> Void) async throws {
        try await storage.read(key: download.blob.storageKey, range: download.range) { buffer in
            guard let bandwidth else {
                metrics.blobBytesSent.increment(by: buffer.readableBytes)
                try await write(buffer)
                return
            }
            // Capped: in slices (views of the chunk, not copies), each paid before the next is
            // written, so that a download's silences between slices stay short however many
            // transfers share the cap (a client times out a silent connection, not a slow one).
            var rest = buffer
            while let slice = rest.readSlice(length: min(rest.readableBytes, bandwidth.chargeBytes)), slice.readableBytes > 0 {
                metrics.blobBytesSent.increment(by: slice.readableBytes)
                try await write(slice)
                try await bandwidth.pace(slice.readableBytes)
            }
        }
        withExtendedLifetime(download.permit) {}
    }

    /// The one range of a `Range` header over `size` bytes: `bytes=a-b`, `bytes=a-`, `bytes=-n`;
    /// nil for several ranges, another unit, a malformed header, or none within the blob.
    static func range(_ header: String, size: Int64) -> Range<Int64>? {
        let text = header.trimmingCharacters(in: .whitespaces)
        guard text.lowercased().hasPrefix("bytes="), size > 0 else { return nil }
        let spec = text.dropFirst("bytes=".count).trimmingCharacters(in: .whitespaces)
        guard !spec.contains(","), let dash = spec.firstIndex(of: "-") else { return nil }
        let first = spec[..<dash].trimmingCharacters(in: .whitespaces), last = spec[spec.index(after: dash)...].trimmingCharacters(in: .whitespaces)
        func number(_ text: String) -> Int64? {
            guard !text.isEmpty, text.utf8.count <= 19, text.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
            return Int64(text)
        }
        if first.isEmpty {
            guard let suffix = number(last), suffix > 0 else { return nil }
            return max(0, size - suffix)..<size
        }
        guard let start = number(first), start < size else { return nil }
        if last.isEmpty { return start..<size }
        guard let end = number(last), end >= start else { return nil }
        return start..<min(end, size - 1) + 1
    }

    // MARK: Acknowledge, delete, list

    /// `POST /v1/blobs/{id}/ack`: the principal has the whole file; the last recipient's ack
    /// erases the blob. Anyone not among its recipients (the author, a second ack) gets `404`.
    func acknowledge(_ principal: Principal, id: String) async throws {
        let blob = try await party(principal, id: id, allowingExpiredUpload: false)
        guard configuration.rules.allows(.acknowledge, blobOf: blob.author, recipients: Set(blob.recipients), principal: principal.uid) else {
            throw Self.notFound
        }
        guard blob.state == .complete else { throw Problem(.blobIncomplete, "the blob is still uploading") }
        switch try await records.acknowledgeBlob(id: id, recipient: principal.uid, now: now) {
        case .acknowledged(let erased):
            metrics.blobsAcknowledged.increment()
            if erased {
                metrics.blobsErased.increment()
                eraser.wake()
            }
        case .notRecipient:
            throw Self.notFound
        }
    }

    /// `DELETE /v1/blobs/{id}`: its author erases it for everyone; a recipient gets `403`.
    func delete(_ principal: Principal, id: String) async throws {
        let blob = try await party(principal, id: id, allowingExpiredUpload: false)
        try require(.delete, blob, principal)
        guard try await records.deleteBlob(id: id, author: principal.uid, now: now) else { throw Self.notFound }
        metrics.blobsErased.increment()
        eraser.wake()
    }

    /// `GET /v1/users/{uid}/blobs`: the owner's blobs as author or as recipient, by id.
    func list(_ principal: Principal, owner: String, role text: String?, after cursor: String?, limit: Int?) async throws -> BlobPage {
        try SendValidation.check(uid: owner)
        guard configuration.rules.allows(.read, .blobList, principal: principal.uid, owner: owner) else {
            throw Problem(.forbidden, "you may not do this")
        }
        guard let role = text.map({ BlobRole(rawValue: $0) }) ?? .author else {
            throw Problem(.badRequest, "role must be author or recipient")
        }
        if let cursor, !Identifier.isValidBlobID(cursor) { throw Problem(.invalidCursor, "after must be a blob id from a previous page") }
        let pageSize = limit ?? 100
        guard (1...Defaults.maxBlobPageSize).contains(pageSize) else {
            throw Problem(.badRequest, "limit must be 1 to \(Defaults.maxBlobPageSize)")
        }
        let blobs = try await records.blobs(uid: owner, role: role, after: cursor ?? "", limit: pageSize, now: now)
        return BlobPage(blobs: blobs.map { record($0, for: principal.uid) }, next: blobs.count == pageSize ? blobs.last?.id : nil)
    }

    // MARK: Helpers

    private func startTransfer(_ principal: Principal, part: TransferLimiter.PartKey?) throws -> TransferLimiter.Permit {
        switch transfers.start(principal.uid, part: part) {
        case .success(let permit): return permit
        case .failure(.uid):
            throw Problem(.tooManyTransfers, "you have \(transfers.limit) uploads and downloads running on this relay; wait for one",
                          retryAfter: 1)
        case .failure(.part):
            throw Problem(.tooManyTransfers, "this part is being uploaded by another request", retryAfter: 1)
        }
    }

    static func check(blobID: String) throws {
        guard Identifier.isValidBlobID(blobID) else { throw Problem(.invalidBlobID, "a blob id is 16 to 64 of A-Z a-z 0-9 _ -") }
    }

    /// What a client is told of a storage failure.
    func problem(_ failure: BlobStorageFailure) -> Problem {
        switch failure {
        case .digestMismatch: return Problem(.partDigestMismatch, "the part's bytes do not hash to its \(BlobLayout.digestHeader); nothing was recorded")
        case .shortBody: return Problem(.invalidPartLength, "the body ended before the part's length")
        case .full: return .storageFull
        case .unavailable: return Problem(.unavailable, "the relay cannot reach its blob store; try again shortly", retryAfter: 2)
        case .uploadLost: return Problem(.uploadLost, "the blob store lost the unfinished upload; start over with a new blob")
        case .failed(let reason):
            logStorageFailure(reason)
            return Problem(.internalError)
        }
    }

    private func logStorageFailure(_ reason: String) {
        logger.error("blob storage failed", metadata: ["reason": "\(reason)"])
    }
}

extension RelayConfiguration {
    /// The largest blob ciphertext: the sealed size of the largest file.
    var maxBlobSize: Int64 { FileCipher.size(plainSize: maxFileBytes) ?? 0 }
}
