import Foundation
import Logging
import MailslotWire
import PostgresNIO

// Blob metadata on PostgreSQL (``BlobRecords``; ``PostgresSchema`` migration 5,
// docs/design/attachments.md §3.2), for relays sharing one database. No blob write changes a
// mailbox or author message size, so none takes the write lock. What makes them exact across
// relays under READ COMMITTED:
// - a create holds its author's advisory lock (``PostgresStore/LockSpace/blobAuthor``) while it
//   counts, so concurrent creates of one author cannot pass the bounds together;
// - every write that erases, acknowledges or records a part locks the blob's row first (`FOR
//   UPDATE`, `FOR SHARE` for a part), so the statements after the lock see every earlier one
//   committed: exactly one acknowledgement finds itself the last, and no part is recorded for a
//   blob being erased. An erasure deletes the `blobs` row before its parts and recipients, so a
//   part recorded while it waited is deleted with them;
// - a completion holds the blob's advisory lock (``PostgresStore/LockSpace/blobCompletion``) in
//   a transaction around "every part recorded? → the storage completes → complete".
extension PostgresStore {
    func createBlob(_ blob: NewBlob, limits: BlobLimits, now: Int64) async throws -> BlobCreateOutcome {
        try await write("create_blob") { connection, logger in
            try await Self.lock(connection, logger, space: .blobAuthor, key: blob.author)
            if let stored = try await Self.storedBlobs(connection, logger, ids: [blob.id]).first {
                if stored.isExpired(now: now) {
                    // Gone for every purpose but the sweeper's: erase it now to free the id.
                    try await Self.erase(connection, logger, id: blob.id, now: now)
                } else {
                    guard stored.author == blob.author, stored.size == blob.size, stored.ttlSeconds == blob.ttlSeconds,
                          Set(stored.recipients) == Set(blob.recipients) else { throw BlobRefusal.conflict }
                    return .existing(stored)
                }
            }
            var usage = try await Self.blobUsage(connection, logger, author: blob.author)
            if usage.uploading >= limits.maxUploading || usage.bytes + blob.size > limits.maxAuthorBytes {
                // Only when refused: the author's expired blobs the sweeper has not reached yet
                // count for nothing, so erase them and count again.
                let rows = try await connection.query("""
                    SELECT id FROM blobs WHERE author = \(blob.author)
                        AND (CASE state WHEN 0 THEN upload_expires_at ELSE expires_at END) <= \(now)
                    """, logger: logger)
                var expired: [String] = []
                for try await id in rows.decode(String.self) { expired.append(id) }
                for id in expired { try await Self.erase(connection, logger, id: id, now: now) }
                usage = try await Self.blobUsage(connection, logger, author: blob.author)
            }
            guard usage.uploading < limits.maxUploading else { throw BlobRefusal.tooManyUploads }
            guard usage.bytes + blob.size <= limits.maxAuthorBytes else { throw BlobRefusal.quota }
            // Another author's create of this id may have committed since the lookup (the lock is
            // per author): then the id is taken.
            guard try await Self.first(connection, """
                INSERT INTO blobs (id, author, size, part_size, parts, state, storage_key, ttl_seconds, created_at, upload_expires_at)
                VALUES (\(blob.id), \(blob.author), \(blob.size), \(blob.partSize), \(Int64(blob.parts)), 0, \(blob.storageKey),
                        \(blob.ttlSeconds), \(now), \(blob.uploadExpiresAt))
                ON CONFLICT (id) DO NOTHING RETURNING 1
                """, logger) != nil else { throw BlobRefusal.conflict }
            try await connection.query("""
                INSERT INTO blob_recipients (blob_id, uid) SELECT \(blob.id), uid FROM unnest(\(blob.recipients)::TEXT[]) AS r (uid)
                """, logger: logger)
            guard let stored = try await Self.storedBlobs(connection, logger, ids: [blob.id]).first else {
                throw PostgresSchema.Refusal(description: "a blob just created is missing")
            }
            return .created(stored)
        }
    }

    func setBlobUploadHandle(id: String, handle: String) async throws {
        try await write("set_blob_upload_handle") { connection, logger in
            _ = try await connection.query("UPDATE blobs SET upload_handle = \(handle) WHERE id = \(id) AND state = 0", logger: logger)
        }
    }

    func blob(id: String, now: Int64) async throws -> BlobLookup {
        // One transaction: the row, its recipients and its parts as of one moment.
        try await write("blob") { connection, logger in
            try await connection.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", logger: logger)
            guard let stored = try await Self.storedBlobs(connection, logger, ids: [id]).first else { return .none }
            return stored.isExpired(now: now) ? .expired(stored) : .live(stored)
        }
    }

    func recordPart(blob id: String, part: StoredPart, now: Int64) async throws -> PartOutcome {
        try await write("record_part") { connection, logger in
            guard let row = try await Self.first(connection, """
                SELECT parts FROM blobs WHERE id = \(id) AND state = 0 AND upload_expires_at > \(now) FOR SHARE
                """, logger) else { return .gone }
            // The service refuses other numbers first (invalid_part); a part outside the blob is
            // never recorded, whoever asks.
            guard (1...Int(try row.decode(Int64.self))).contains(part.number) else { return .conflict }
            let number = Int64(part.number)
            let inserted = try await Self.first(connection, """
                INSERT INTO blob_parts (blob_id, number, digest, etag) VALUES (\(id), \(number), \(Data(part.digest)), \(part.etag))
                ON CONFLICT (blob_id, number) DO NOTHING RETURNING 1
                """, logger) != nil
            if !inserted {
                let digest = try await Self.first(connection, "SELECT digest FROM blob_parts WHERE blob_id = \(id) AND number = \(number)", logger)?
                    .decode(Data.self)
                // Digests of ciphertext the author sent: no secret to compare in constant time.
                guard let digest, Array(digest) == part.digest else { return .conflict }
            }
            guard let stored = try await Self.storedBlobs(connection, logger, ids: [id]).first else { return .gone }
            return inserted ? .recorded(stored) : .same(stored)
        }
    }

    /// Completes blob `id` in one transaction holding the blob's advisory lock from before it
    /// is read until the state is set, with `finish` run in between. `finish` is not an escaping
    /// closure, and the pool's transactions take one: so the transaction hands the blob out
    /// (``Handoff``) and waits for this task's verdict on `finish`, keeping its lock meanwhile.
    /// Run once, never retried: a retry after `finish` would run it again.
    func completeBlob(id: String, now: Int64, finish: @Sendable (StoredBlob) async throws -> Void) async throws -> StoredBlob? {
        let start = ContinuousClock.now
        defer { metrics?.store("complete_blob", ContinuousClock.now - start) }
        let offered = Handoff<StoredBlob?>(), verdict = Handoff<Bool>()
        async let completed = Self.completion(pool, logger: logger, id: id, now: now, offered: offered, verdict: verdict)
        // Whatever happens here, the transaction is not left waiting (a verdict already given stays).
        defer { verdict.give(false) }
        if let blob = await offered.take() {
            do {
                try await finish(blob)
            } catch {
                verdict.give(false)
                _ = try? await completed
                throw error
            }
            verdict.give(true)
        }
        return try await completed
    }

    /// The transaction of ``completeBlob(id:now:finish:)``: offers the blob to finish (nil when
    /// there is none to finish), and completes it if the verdict is yes.
    private static func completion(_ pool: PostgresPool, logger: Logger, id: String, now: Int64,
                                   offered: Handoff<StoredBlob?>, verdict: Handoff<Bool>) async throws -> StoredBlob? {
        // Whatever happens here, the caller is not left waiting for an offer.
        defer { offered.give(nil) }
        return try await transaction(pool, logger: logger, attempts: 1) { connection, logger in
            try await lock(connection, logger, space: .blobCompletion, key: id)
            guard let blob = try await storedBlobs(connection, logger, ids: [id]).first, !blob.isExpired(now: now) else { return nil }
            if blob.state == .complete { return blob }
            guard blob.received.count == blob.parts else { return nil }
            offered.give(blob)
            // The storage completes meanwhile; a failure leaves the blob uploading.
            guard await verdict.take() else { throw CancellationError() }
            // Only the blob `finish` completed: not one erased meanwhile and created again.
            guard try await first(connection, """
                UPDATE blobs SET state = 1, completed_at = \(now), expires_at = \(now) + ttl_seconds * 1000, upload_handle = NULL
                WHERE id = \(id) AND storage_key = \(blob.storageKey) AND state = 0 RETURNING 1
                """, logger) != nil else { return nil }
            return try await storedBlobs(connection, logger, ids: [id]).first
        }
    }

    func acknowledgeBlob(id: String, recipient: String, now: Int64) async throws -> BlobAckOutcome {
        try await write("acknowledge_blob") { connection, logger in
            // The row lock serializes the acknowledgements of one blob: each counts after the
            // ones before it committed, so exactly one finds itself the last.
            guard let row = try await Self.first(connection, """
                SELECT state, upload_expires_at, expires_at FROM blobs WHERE id = \(id) FOR UPDATE
                """, logger) else { return .notRecipient }
            let (state, uploadExpiresAt, expiresAt) = try row.decode((Int16, Int64, Int64?).self)
            guard (state == 0 ? uploadExpiresAt : expiresAt ?? .max) > now else { return .notRecipient }
            guard try await Self.first(connection, """
                DELETE FROM blob_recipients WHERE blob_id = \(id) AND uid = \(recipient) RETURNING 1
                """, logger) != nil else { return .notRecipient }
            guard try await Self.first(connection, "SELECT 1 FROM blob_recipients WHERE blob_id = \(id) LIMIT 1", logger) == nil else {
                return .acknowledged(erased: false)
            }
            try await Self.erase(connection, logger, id: id, now: now)
            return .acknowledged(erased: true)
        }
    }

    func deleteBlob(id: String, author: String, now: Int64) async throws -> Bool {
        try await write("delete_blob") { connection, logger in
            guard try await Self.first(connection, "SELECT 1 FROM blobs WHERE id = \(id) AND author = \(author) FOR UPDATE", logger) != nil else {
                return false
            }
            try await Self.erase(connection, logger, id: id, now: now)
            return true
        }
    }

    func blobs(uid: String, role: BlobRole, after cursor: String, limit: Int, now: Int64) async throws -> [StoredBlob] {
        try await write("blobs") { connection, logger in
            try await connection.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", logger: logger)
            let rows = switch role {
            case .author:
                try await connection.query("""
                    SELECT b.id FROM blobs b WHERE b.author = \(uid) AND b.id > \(cursor)
                        AND (CASE b.state WHEN 0 THEN b.upload_expires_at ELSE b.expires_at END) > \(now)
                    ORDER BY b.id LIMIT \(Int64(limit))
                    """, logger: logger)
            case .recipient:
                try await connection.query("""
                    SELECT b.id FROM blob_recipients r JOIN blobs b ON b.id = r.blob_id
                    WHERE r.uid = \(uid) AND r.blob_id > \(cursor)
                        AND (CASE b.state WHEN 0 THEN b.upload_expires_at ELSE b.expires_at END) > \(now)
                    ORDER BY r.blob_id LIMIT \(Int64(limit))
                    """, logger: logger)
            }
            var ids: [String] = []
            for try await id in rows.decode(String.self) { ids.append(id) }
            return try await Self.storedBlobs(connection, logger, ids: ids)
        }
    }

    /// Erases expired blobs in transactions of at most `batch`. Safe beside another relay's
    /// sweep: each skips the rows the other has locked.
    func sweepExpiredBlobs(now: Int64, batch: Int) async throws -> Int {
        var erased = 0
        while true {
            let count = try await write("sweep_expired_blobs") { connection, logger in
                let rows = try await connection.query("""
                    SELECT id FROM blobs WHERE (state = 0 AND upload_expires_at <= \(now)) OR (state = 1 AND expires_at <= \(now))
                    LIMIT \(Int64(batch)) FOR UPDATE SKIP LOCKED
                    """, logger: logger)
                var ids: [String] = []
                for try await id in rows.decode(String.self) { ids.append(id) }
                for id in ids { try await Self.erase(connection, logger, id: id, now: now) }
                return ids.count
            }
            erased += count
            if count < batch || Task.isCancelled { return erased }
        }
    }

    func blobErasures(limit: Int) async throws -> [BlobErasure] {
        try await read("blob_erasures") { connection, logger in
            let rows = try await connection.query("""
                SELECT storage_key, upload_handle FROM blob_erasures ORDER BY queued_at, storage_key LIMIT \(Int64(limit))
                """, logger: logger)
            var erasures: [BlobErasure] = []
            for try await (key, handle) in rows.decode((String, String?).self) { erasures.append(BlobErasure(storageKey: key, uploadHandle: handle)) }
            return erasures
        }
    }

    func finishBlobErasure(storageKey: String) async throws {
        try await write("finish_blob_erasure") { connection, logger in
            _ = try await connection.query("DELETE FROM blob_erasures WHERE storage_key = \(storageKey)", logger: logger)
        }
    }

    func blobStorageKeysInUse(_ storageKeys: [String]) async throws -> Set<String> {
        guard !storageKeys.isEmpty else { return [] }
        return try await read("blob_storage_keys_in_use") { connection, logger in
            let rows = try await connection.query("SELECT storage_key FROM blobs WHERE storage_key = ANY(\(storageKeys))", logger: logger)
            var used: Set<String> = []
            for try await key in rows.decode(String.self) { used.insert(key) }
            return used
        }
    }

    func blobUsage(author: String) async throws -> (bytes: Int64, uploading: Int) {
        try await read("blob_usage") { connection, logger in try await Self.blobUsage(connection, logger, author: author) }
    }

    // MARK: Rows

    /// The author's blob bytes and unfinished uploads (kept by migration 5's trigger).
    private static func blobUsage(_ connection: PostgresConnection, _ logger: Logger, author: String) async throws -> (bytes: Int64, uploading: Int) {
        guard let row = try await first(connection, "SELECT bytes, uploading FROM blob_author_sizes WHERE author = \(author)", logger) else {
            return (0, 0)
        }
        let (bytes, uploading) = try row.decode((Int64, Int64).self)
        return (bytes, Int(uploading))
    }

    /// Deletes blob `id`'s rows and queues its storage key for erasure, in the caller's
    /// transaction. The `blobs` row goes first: a part recorded by a transaction that held the
    /// row until now is committed, and deleted below with the rest.
    private static func erase(_ connection: PostgresConnection, _ logger: Logger, id: String, now: Int64) async throws {
        guard let row = try await first(connection, "DELETE FROM blobs WHERE id = \(id) RETURNING storage_key, upload_handle", logger) else {
            return
        }
        let (storageKey, uploadHandle) = try row.decode((String, String?).self)
        try await connection.query("DELETE FROM blob_parts WHERE blob_id = \(id)", logger: logger)
        try await connection.query("DELETE FROM blob_recipients WHERE blob_id = \(id)", logger: logger)
        // Storage keys are random and never reused: a conflict would be an erasure already queued.
        try await connection.query("""
            INSERT INTO blob_erasures (storage_key, upload_handle, queued_at) VALUES (\(storageKey), \(uploadHandle), \(now))
            ON CONFLICT (storage_key) DO NOTHING
            """, logger: logger)
    }

    /// The blobs `ids` that exist, in that order, each with its unacknowledged recipients
    /// (sorted) and recorded parts (by number): three statements, however many blobs.
    private static func storedBlobs(_ connection: PostgresConnection, _ logger: Logger, ids: [String]) async throws -> [StoredBlob] {
        guard !ids.isEmpty else { return [] }
        var recipients: [String: [String]] = [:]
        let recipientRows = try await connection.query("""
            SELECT blob_id, uid FROM blob_recipients WHERE blob_id = ANY(\(ids)::TEXT[]) ORDER BY blob_id, uid
            """, logger: logger)
        for try await (id, uid) in recipientRows.decode((String, String).self) { recipients[id, default: []].append(uid) }
        var parts: [String: [StoredPart]] = [:]
        let partRows = try await connection.query("""
            SELECT blob_id, number, digest, etag FROM blob_parts WHERE blob_id = ANY(\(ids)::TEXT[]) ORDER BY blob_id, number
            """, logger: logger)
        for try await (id, number, digest, etag) in partRows.decode((String, Int64, Data, String?).self) {
            parts[id, default: []].append(StoredPart(number: Int(number), digest: Array(digest), etag: etag))
        }
        var blobs: [String: StoredBlob] = [:]
        let rows = try await connection.query("""
            SELECT id, author, size, part_size, parts, state, storage_key, upload_handle, ttl_seconds,
                   created_at, upload_expires_at, completed_at, expires_at FROM blobs WHERE id = ANY(\(ids)::TEXT[])
            """, logger: logger)
        for try await row in rows {
            let (id, author, size, partSize, count, state, storageKey, uploadHandle, ttl, createdAt, uploadExpiresAt, completedAt, expiresAt) =
                try row.decode((String, String, Int64, Int64, Int64, Int16, String, String?, Int64, Int64, Int64, Int64?, Int64?).self)
            blobs[id] = StoredBlob(id: id, author: author, size: size, partSize: partSize, parts: Int(count),
                                   state: state == 1 ? .complete : .uploading, storageKey: storageKey, uploadHandle: uploadHandle,
                                   ttlSeconds: ttl, createdAt: createdAt, uploadExpiresAt: uploadExpiresAt, completedAt: completedAt,
                                   expiresAt: expiresAt, recipients: recipients[id] ?? [], received: parts[id] ?? [])
        }
        return ids.compactMap { blobs[$0] }
    }
}
