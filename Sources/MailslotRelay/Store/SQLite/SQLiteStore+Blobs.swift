import Foundation
import GRDB
import MailslotWire

// Blob metadata on SQLite (``BlobRecords``; tables of Schema v8, docs/design/attachments.md §3.2).
// Every write runs in the pool's one writer transaction at a time, which is what makes a create's
// quota check and an acknowledgement's "last recipient" test atomic here. Blob writes do not go
// through the group commit: they are few (one per part of megabytes), and each is answered alone.
extension SQLiteStore {
    /// Completions in progress in this process, by database file and blob id: one process owns
    /// the file, so an in-process lock serializes every completer of a blob, even through two
    /// stores opened on the same file.
    private static let completions = KeyedLock()

    func createBlob(_ blob: NewBlob, limits: BlobLimits, now: Int64) async throws -> BlobCreateOutcome {
        try await write("create_blob") { db in
            if let stored = try Self.storedBlob(db, id: blob.id) {
                if stored.isExpired(now: now) {
                    // Gone for every purpose but the sweeper's: erase it now to free the id.
                    try Self.erase(db, id: blob.id, now: now)
                } else {
                    guard stored.author == blob.author, stored.size == blob.size, stored.ttlSeconds == blob.ttlSeconds,
                          Set(stored.recipients) == Set(blob.recipients) else { throw BlobRefusal.conflict }
                    return .existing(stored)
                }
            }
            var usage = try Self.usage(db, author: blob.author)
            if usage.uploading >= limits.maxUploading || usage.bytes + blob.size > limits.maxAuthorBytes {
                // Only when refused: the author's expired blobs the sweeper has not reached yet
                // count for nothing, so erase them and count again.
                let expired = try String.fetchAll(db.cachedStatement(sql: """
                    SELECT id FROM blobs WHERE author = ? AND (CASE state WHEN 0 THEN upload_expires_at ELSE expires_at END) <= ?
                    """), arguments: [blob.author, now])
                for id in expired { try Self.erase(db, id: id, now: now) }
                usage = try Self.usage(db, author: blob.author)
            }
            guard usage.uploading < limits.maxUploading else { throw BlobRefusal.tooManyUploads }
            guard usage.bytes + blob.size <= limits.maxAuthorBytes else { throw BlobRefusal.quota }
            try db.cachedStatement(sql: """
                INSERT INTO blobs (id, author, size, part_size, parts, state, storage_key, ttl_seconds, created_at, upload_expires_at)
                VALUES (?, ?, ?, ?, ?, 0, ?, ?, ?, ?)
                """).execute(arguments: [blob.id, blob.author, blob.size, blob.partSize, blob.parts, blob.storageKey,
                                         blob.ttlSeconds, now, blob.uploadExpiresAt])
            let insert = try db.cachedStatement(sql: "INSERT INTO blob_recipients (blob_id, uid) VALUES (?, ?)")
            for recipient in blob.recipients { try insert.execute(arguments: [blob.id, recipient]) }
            return .created(try Self.storedBlob(db, id: blob.id)!)
        }
    }

    func setBlobUploadHandle(id: String, handle: String) async throws {
        try await write("set_blob_upload_handle") { db in
            try db.cachedStatement(sql: "UPDATE blobs SET upload_handle = ? WHERE id = ? AND state = 0")
                .execute(arguments: [handle, id])
        }
    }

    func blob(id: String, now: Int64) async throws -> BlobLookup {
        try await read("blob") { db in
            guard let stored = try Self.storedBlob(db, id: id) else { return .none }
            return stored.isExpired(now: now) ? .expired(stored) : .live(stored)
        }
    }

    func recordPart(blob id: String, part: StoredPart, now: Int64) async throws -> PartOutcome {
        try await write("record_part") { db in
            guard let row = try Row.fetchOne(db.cachedStatement(sql: """
                SELECT parts FROM blobs WHERE id = ? AND state = 0 AND upload_expires_at > ?
                """), arguments: [id, now]) else { return .gone }
            // The service refuses other numbers first (invalid_part); a part outside the blob is
            // never recorded, whoever asks.
            guard (1...(row[0] as Int)).contains(part.number) else { return .conflict }
            if let digest = try Data.fetchOne(db.cachedStatement(sql: "SELECT digest FROM blob_parts WHERE blob_id = ? AND number = ?"),
                                              arguments: [id, part.number]) {
                // Digests of ciphertext the author sent: public to the author, no secret to compare in constant time.
                guard Array(digest) == part.digest else { return .conflict }
                return .same(try Self.storedBlob(db, id: id)!)
            }
            try db.cachedStatement(sql: "INSERT INTO blob_parts (blob_id, number, digest, etag) VALUES (?, ?, ?, ?)")
                .execute(arguments: [id, part.number, Data(part.digest), part.etag])
            return .recorded(try Self.storedBlob(db, id: id)!)
        }
    }

    func completeBlob(id: String, now: Int64, finish: @Sendable (StoredBlob) async throws -> Void) async throws -> StoredBlob? {
        try await Self.completions.withLock(path + "\n" + id) {
            guard case .live(let blob) = try await self.blob(id: id, now: now) else { return nil }
            if blob.state == .complete { return blob }
            guard blob.received.count == blob.parts else { return nil }
            // The storage completes outside any transaction (it may take long); the lock keeps
            // every other completer of this blob out meanwhile. A failure leaves it uploading.
            try await finish(blob)
            return try await write("complete_blob") { db in
                // Only the blob `finish` completed: not one erased meanwhile and created again.
                try db.cachedStatement(sql: """
                    UPDATE blobs SET state = 1, completed_at = ?, expires_at = ? + ttl_seconds * 1000, upload_handle = NULL
                    WHERE id = ? AND storage_key = ? AND state = 0
                    """).execute(arguments: [now, now, id, blob.storageKey])
                guard db.changesCount == 1 else { return nil }
                return try Self.storedBlob(db, id: id)
            }
        }
    }

    func acknowledgeBlob(id: String, recipient: String, now: Int64) async throws -> BlobAckOutcome {
        try await write("acknowledge_blob") { db in
            guard let stored = try Self.storedBlob(db, id: id), !stored.isExpired(now: now) else { return .notRecipient }
            try db.cachedStatement(sql: "DELETE FROM blob_recipients WHERE blob_id = ? AND uid = ?").execute(arguments: [id, recipient])
            guard db.changesCount == 1 else { return .notRecipient }
            guard stored.recipients.count == 1 else { return .acknowledged(erased: false) }
            try Self.erase(db, id: id, now: now)
            return .acknowledged(erased: true)
        }
    }

    func deleteBlob(id: String, author: String, now: Int64) async throws -> Bool {
        try await write("delete_blob") { db in
            guard try String.fetchOne(db.cachedStatement(sql: "SELECT author FROM blobs WHERE id = ?"), arguments: [id]) == author else {
                return false
            }
            try Self.erase(db, id: id, now: now)
            return true
        }
    }

    func blobs(uid: String, role: BlobRole, after cursor: String, limit: Int, now: Int64) async throws -> [StoredBlob] {
        try await read("blobs") { db in
            let live = "(CASE b.state WHEN 0 THEN b.upload_expires_at ELSE b.expires_at END) > ?"
            let ids = switch role {
            case .author:
                try String.fetchAll(db.cachedStatement(sql: """
                    SELECT b.id FROM blobs b WHERE b.author = ? AND b.id > ? AND \(live) ORDER BY b.id LIMIT ?
                    """), arguments: [uid, cursor, now, limit])
            case .recipient:
                try String.fetchAll(db.cachedStatement(sql: """
                    SELECT b.id FROM blob_recipients r JOIN blobs b ON b.id = r.blob_id
                    WHERE r.uid = ? AND r.blob_id > ? AND \(live) ORDER BY r.blob_id LIMIT ?
                    """), arguments: [uid, cursor, now, limit])
            }
            return try ids.compactMap { try Self.storedBlob(db, id: $0) }
        }
    }

    func sweepExpiredBlobs(now: Int64, batch: Int) async throws -> Int {
        var erased = 0
        while true {
            let count = try await write("sweep_expired_blobs") { db in
                let ids = try String.fetchAll(db.cachedStatement(sql: """
                    SELECT id FROM blobs INDEXED BY blobs_uploading_by_expiry WHERE state = 0 AND upload_expires_at <= ?
                    UNION ALL
                    SELECT id FROM blobs INDEXED BY blobs_complete_by_expiry WHERE state = 1 AND expires_at <= ?
                    LIMIT ?
                    """), arguments: [now, now, batch])
                for id in ids { try Self.erase(db, id: id, now: now) }
                return ids.count
            }
            erased += count
            if count < batch || Task.isCancelled { return erased }
        }
    }

    func blobErasures(limit: Int) async throws -> [BlobErasure] {
        try await read("blob_erasures") { db in
            try Row.fetchAll(db.cachedStatement(sql: """
                SELECT storage_key, upload_handle FROM blob_erasures ORDER BY queued_at, storage_key LIMIT ?
                """), arguments: [limit]).map { BlobErasure(storageKey: $0[0], uploadHandle: $0[1]) }
        }
    }

    func finishBlobErasure(storageKey: String) async throws {
        try await write("finish_blob_erasure") { db in
            try db.cachedStatement(sql: "DELETE FROM blob_erasures WHERE storage_key = ?").execute(arguments: [storageKey])
        }
    }

    func blobStorageKeysInUse(_ storageKeys: [String]) async throws -> Set<String> {
        guard !storageKeys.isEmpty else { return [] }
        return try await read("blob_storage_keys_in_use") { db in
            // One lookup of the unique index per key; the caller's pages are bounded.
            let statement = try db.cachedStatement(sql: "SELECT 1 FROM blobs WHERE storage_key = ?")
            var used: Set<String> = []
            for key in storageKeys where try Row.fetchOne(statement, arguments: [key]) != nil { used.insert(key) }
            return used
        }
    }

    func blobUsage(author: String) async throws -> (bytes: Int64, uploading: Int) {
        try await read("blob_usage") { db in try Self.usage(db, author: author) }
    }

    // MARK: Rows

    /// The author's blob bytes and unfinished uploads (kept by the `v8` triggers).
    private static func usage(_ db: Database, author: String) throws -> (bytes: Int64, uploading: Int) {
        let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT bytes, uploading FROM blob_author_sizes WHERE author = ?"),
                                   arguments: [author])
        return (row?[0] ?? 0, row?[1] ?? 0)
    }

    /// Deletes blob `id`'s rows and queues its storage key for erasure, in the caller's
    /// transaction: the bytes are never left without a row saying to erase them.
    private static func erase(_ db: Database, id: String, now: Int64) throws {
        guard let row = try Row.fetchOne(db.cachedStatement(sql: "DELETE FROM blobs WHERE id = ? RETURNING storage_key, upload_handle"),
                                         arguments: [id]) else { return }
        try db.cachedStatement(sql: "DELETE FROM blob_parts WHERE blob_id = ?").execute(arguments: [id])
        try db.cachedStatement(sql: "DELETE FROM blob_recipients WHERE blob_id = ?").execute(arguments: [id])
        // Storage keys are random and never reused: a conflict would be an erasure already queued.
        try db.cachedStatement(sql: """
            INSERT INTO blob_erasures (storage_key, upload_handle, queued_at) VALUES (?, ?, ?) ON CONFLICT (storage_key) DO NOTHING
            """).execute(arguments: [row[0] as String, row[1] as String?, now])
    }

    /// Blob `id` with its unacknowledged recipients (sorted) and its recorded parts (by number).
    private static func storedBlob(_ db: Database, id: String) throws -> StoredBlob? {
        guard let row = try Row.fetchOne(db.cachedStatement(sql: """
            SELECT id, author, size, part_size, parts, state, storage_key, upload_handle, ttl_seconds,
                   created_at, upload_expires_at, completed_at, expires_at FROM blobs WHERE id = ?
            """), arguments: [id]) else { return nil }
        let recipients = try String.fetchAll(db.cachedStatement(sql: "SELECT uid FROM blob_recipients WHERE blob_id = ? ORDER BY uid"),
                                             arguments: [id])
        let received = try Row.fetchAll(db.cachedStatement(sql: "SELECT number, digest, etag FROM blob_parts WHERE blob_id = ? ORDER BY number"),
                                        arguments: [id])
            .map { StoredPart(number: $0[0], digest: Array($0[1] as Data), etag: $0[2]) }
        return StoredBlob(id: row[0], author: row[1], size: row[2], partSize: row[3], parts: row[4],
                          state: (row[5] as Int) == 1 ? .complete : .uploading, storageKey: row[6], uploadHandle: row[7],
                          ttlSeconds: row[8], createdAt: row[9], uploadExpiresAt: row[10], completedAt: row[11], expiresAt: row[12],
                          recipients: recipients, received: received)
    }
}
