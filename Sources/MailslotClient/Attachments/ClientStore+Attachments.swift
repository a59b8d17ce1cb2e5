import Foundation
import GRDB
import MailslotWire

// The persisted state of file sends (`uploads`, with the send's `sent` row) and of received
// attachments (`attachments`): ClientStore migration v5.
extension ClientStore {
    // MARK: Uploads

    /// Where an unfinished upload stands; each stage is stored before the next step starts.
    enum UploadStage: String, Sendable {
        /// Stored; the relay has not confirmed the blob yet.
        case created
        /// The relay holds the (empty) blob; the file is not encrypted yet.
        case registered
        /// (Not a stored stage: encryption under way, parts uploading as they are sealed; the row
        /// says `registered` with its ``Upload/cipher`` until encryption ends.)
        /// The ciphertext is in the spool and the message body in `sent`: parts are uploading.
        case encrypted
    }

    /// An unfinished upload.
    struct Upload: Sendable {
        let messageID: String
        let blobID: String
        let recipient: String
        let source: URL
        let spool: URL
        let plainSize: Int64
        let size: Int64
        let mediaType: String
        let name: String?
        let preview: FilePreview?
        let caption: String?
        let senderName: String?
        let stage: UploadStage
        /// What the file is sealed with, stored before its first part goes up; nil until then.
        var cipher: UploadCipher? = nil
        /// The group it is sent to (`recipient` is then ''): the blob's recipients are the
        /// members but this user, and the message goes through the group send
        /// (docs/design/groups.md §5).
        var groupID: String? = nil
    }

    /// The key and stream header an upload's file is sealed with, and its source's stamp then: a
    /// resumed send seals the same file again into the same bytes, or is refused if the source
    /// changed (sealing other bytes under the same key and header would repeat the keystream).
    struct UploadCipher: Sendable {
        let key: FileKey
        let header: [UInt8]
        let sourceStamp: String
    }

    /// Stores a new file send: its upload (stage `created`) and its `sent` row (`uploading`, no
    /// body yet), in one transaction, before the relay is asked anything.
    func insertUpload(_ upload: Upload) async throws {
        let previewJSON = try upload.preview.map { try JSONEncoder().encode($0) }
        try await pool.write { db in
            let now = Date().timeIntervalSince1970
            try db.execute(sql: """
                INSERT INTO uploads (message_id, blob_id, recipient, source_path, spool_path, plain_size, size, media_type, name, preview,
                                     caption, sender_name, stage, created_at, group_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """, arguments: [upload.messageID, upload.blobID, upload.recipient, upload.source.path, upload.spool.path, upload.plainSize,
                                 upload.size, upload.mediaType, upload.name, previewJSON, upload.caption, upload.senderName,
                                 UploadStage.created.rawValue, now, upload.groupID])
            try db.execute(sql: """
                INSERT INTO sent (id, recipient, type, body, state, last_error, created_at, group_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                """, arguments: [upload.messageID, upload.recipient, MessageType.file.rawValue, Data(), OutgoingMessage.State.uploading.rawValue,
                                 "not started", now, upload.groupID])
        }
    }

    /// Every unfinished upload, oldest first.
    func uploads() async throws -> [Upload] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM uploads ORDER BY created_at, message_id").map { row in
                let preview = (row["preview"] as Data?).flatMap { try? JSONDecoder().decode(FilePreview.self, from: $0) }
                return Upload(messageID: row["message_id"], blobID: row["blob_id"], recipient: row["recipient"],
                              source: URL(fileURLWithPath: row["source_path"]), spool: URL(fileURLWithPath: row["spool_path"]),
                              plainSize: row["plain_size"], size: row["size"], mediaType: row["media_type"], name: row["name"],
                              preview: preview, caption: row["caption"], senderName: row["sender_name"],
                              stage: UploadStage(rawValue: row["stage"]) ?? .created, cipher: Self.uploadCipher(row), groupID: row["group_id"])
            }
        }
    }

    /// The stored cipher of an upload row, if any.
    private static func uploadCipher(_ row: Row) -> UploadCipher? {
        guard let keyBytes = row["file_key"] as Data?, let header = row["stream_header"] as Data?, let stamp = row["source_stamp"] as String?,
              let key = FileKey(bytes: SecretBytes(copying: keyBytes)), header.count == FileCipher.headerSize else { return nil }
        return UploadCipher(key: key, header: Array(header), sourceStamp: stamp)
    }

    /// Stores what upload `id` is sealed with, before its first part goes up.
    func setUploadCipher(_ id: String, _ cipher: UploadCipher) async throws {
        let keyData = cipher.key.bytes.withUnsafeBytes { Data($0) }
        try await pool.write { db in
            try db.execute(sql: "UPDATE uploads SET file_key = ?, stream_header = ?, source_stamp = ? WHERE message_id = ?",
                           arguments: [keyData, Data(cipher.header), cipher.sourceStamp, id])
        }
    }

    /// The ciphertext digests of upload `id`'s parts stored so far, by part number.
    func partDigests(_ id: String) async throws -> [Int: [UInt8]] {
        try await pool.read { db in
            var digests: [Int: [UInt8]] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT part, digest FROM upload_parts WHERE message_id = ?", arguments: [id]) {
                digests[row["part"]] = Array(row["digest"] as Data)
            }
            return digests
        }
    }

    /// Stores the ciphertext digest of part `part` of upload `id`, before the part goes up. A
    /// digest stored already is kept (the caller compared it first).
    func setPartDigest(_ id: String, part: Int, digest: [UInt8]) async throws {
        try await pool.write { db in
            try db.execute(sql: "INSERT OR IGNORE INTO upload_parts (message_id, part, digest) VALUES (?, ?, ?)",
                           arguments: [id, part, Data(digest)])
        }
    }

    /// Moves upload `id` to `stage`.
    func setUploadStage(_ id: String, _ stage: UploadStage) async throws {
        try await pool.write { db in
            try db.execute(sql: "UPDATE uploads SET stage = ? WHERE message_id = ?", arguments: [stage.rawValue, id])
        }
    }

    /// The file is encrypted: the message carrying its reference is stored as the send's body,
    /// and the upload moves to `encrypted`, in one transaction.
    func markEncrypted(_ id: String, message: ChatMessage, body: [UInt8]) async throws {
        try await pool.write { db in
            try db.execute(sql: "UPDATE sent SET body = ?, type = ? WHERE id = ?", arguments: [Data(body), message.type.rawValue, id])
            try db.execute(sql: "UPDATE uploads SET stage = ? WHERE message_id = ?", arguments: [UploadStage.encrypted.rawValue, id])
        }
    }

    /// Why upload `id` is not finished (shown by `outgoing()`); the send stays `uploading`.
    func noteUploadProblem(_ id: String, _ reason: String) async throws {
        try await pool.write { db in
            try db.execute(sql: "UPDATE sent SET last_error = ?, attempts = attempts + 1 WHERE id = ? AND state = 'uploading'",
                           arguments: [reason, id])
        }
    }

    /// The relay lost upload `id` (`reason`): it starts over under blob `blobID` with spool
    /// `spool`, at stage `created`, with no key, header, source stamp or part digests (the next
    /// sealing draws a fresh key), and the send's body (the old reference, with the old key) is
    /// emptied; the send stays `uploading`, showing why. One transaction.
    func restartUpload(_ id: String, blobID: String, spool: URL, reason: String) async throws {
        try await pool.write { db in
            try db.execute(sql: """
                UPDATE uploads SET blob_id = ?, spool_path = ?, stage = ?, file_key = NULL, stream_header = NULL, source_stamp = NULL
                WHERE message_id = ?
                """, arguments: [blobID, spool.path, UploadStage.created.rawValue, id])
            try db.execute(sql: "DELETE FROM upload_parts WHERE message_id = ?", arguments: [id])
            try db.execute(sql: "UPDATE sent SET body = ?, last_error = ? WHERE id = ? AND state = 'uploading'", arguments: [Data(), reason, id])
        }
    }

    /// Unfinished upload `id`, or nil.
    func upload(_ id: String) async throws -> Upload? {
        try await uploads().first { $0.messageID == id }
    }

    /// The blob is complete: the upload row goes and the send is queued with its envelope (or
    /// held unsealed for a changed key), in one transaction.
    func finishUpload(_ id: String, sealed: Sealed?) async throws {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM uploads WHERE message_id = ?", arguments: [id])
            try db.execute(sql: "DELETE FROM upload_parts WHERE message_id = ?", arguments: [id])
            try db.execute(sql: """
                UPDATE sent SET state = ?, envelope = ?, key_id = ?, last_error = ?, next_attempt_at = 0 WHERE id = ?
                """, arguments: [sealed == nil ? OutgoingMessage.State.held.rawValue : OutgoingMessage.State.queued.rawValue,
                                 sealed.map { Data($0.envelope) }, sealed?.keyID, sealed == nil ? ClientError.keyChangedCode : nil, id])
        }
    }

    /// A group file's blob is complete and its message stored as a group send (its `sent` row
    /// and copies): the upload rows go.
    func closeGroupUpload(_ id: String) async throws {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM uploads WHERE message_id = ?", arguments: [id])
            try db.execute(sql: "DELETE FROM upload_parts WHERE message_id = ?", arguments: [id])
        }
    }

    /// Whether group message `id`'s copies are stored (its group send was made).
    func hasCopies(_ id: String) async throws -> Bool {
        try await pool.read { db in try Bool.fetchOne(db, sql: "SELECT 1 FROM group_copies WHERE message_id = ? LIMIT 1", arguments: [id]) ?? false }
    }

    /// The upload cannot finish (`reason`): it goes, and the send is refused with why.
    func abandonUpload(_ id: String, reason: String) async throws {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM uploads WHERE message_id = ?", arguments: [id])
            try db.execute(sql: "DELETE FROM upload_parts WHERE message_id = ?", arguments: [id])
            try db.execute(sql: "UPDATE sent SET state = 'refused', envelope = NULL, last_error = ? WHERE id = ?", arguments: [reason, id])
            // Its blob is erased: the reference stored with it (from stage `encrypted`) keeps no key.
            if let body = try Data.fetchOne(db, sql: "SELECT body FROM sent WHERE id = ?", arguments: [id]),
               let scrubbed = Self.scrubbingFileKeys(Array(body), where: { _ in true }) {
                try db.execute(sql: "UPDATE sent SET body = ? WHERE id = ?", arguments: [Data(scrubbed), id])
            }
        }
    }

    /// Forgets a file send entirely (refused before anything was stored on the relay).
    func forgetUpload(_ id: String) async throws {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM uploads WHERE message_id = ?", arguments: [id])
            try db.execute(sql: "DELETE FROM upload_parts WHERE message_id = ?", arguments: [id])
            try db.execute(sql: "DELETE FROM sent WHERE id = ?", arguments: [id])
        }
    }

    // MARK: Received attachments

    /// One row per attachment `message` carries, stored with it (inline ones first).
    static func storeAttachments(of message: ReceivedMessage, _ db: Database) throws {
        let payload = message.message.payload
        var index = 0
        for inline in payload.attachments ?? [] {
            try db.execute(sql: """
                INSERT OR IGNORE INTO attachments (message_id, idx, plain_size, media_type, name, state) VALUES (?, ?, ?, ?, ?, 'available')
                """, arguments: [message.id, index, inline.data.count, inline.mediaType, inline.name])
            index += 1
        }
        for file in payload.files ?? [] {
            try db.execute(sql: """
                INSERT OR IGNORE INTO attachments (message_id, idx, blob_id, plain_size, media_type, name, state) VALUES (?, ?, ?, ?, ?, ?, 'available')
                """, arguments: [message.id, index, file.blob, file.plainSize, file.mediaType, file.name])
            index += 1
        }
    }

    /// A stored attachment row: where it stands, and the message it came in.
    struct AttachmentRow: Sendable {
        let id: AttachmentID
        let blobID: String?
        let state: String
        let path: String?
        let reason: String?
    }

    /// The attachments of message `id`, in order.
    func attachmentRows(of id: String) async throws -> [AttachmentRow] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM attachments WHERE message_id = ? ORDER BY idx", arguments: [id]).map(Self.attachmentRow)
        }
    }

    /// Attachments not saved yet whose download was tried and did not finish, and blobs saved
    /// but not acknowledged yet (both tried again by `flush`), oldest message first.
    func interruptedDownloads() async throws -> [AttachmentRow] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: """
                SELECT * FROM attachments WHERE (state = 'available' AND reason IS NOT NULL) OR (state = 'saved' AND reason = 'unacknowledged')
                ORDER BY message_id, idx
                """)
                .map(Self.attachmentRow)
        }
    }

    private static func attachmentRow(_ row: Row) -> AttachmentRow {
        AttachmentRow(id: AttachmentID(messageID: row["message_id"], index: row["idx"]), blobID: row["blob_id"], state: row["state"],
                      path: row["path"], reason: row["reason"])
    }

    /// Records where attachment `id` stands (`available`, `saved`, `gone`, `corrupt`).
    func setAttachment(_ id: AttachmentID, state: String, path: String? = nil, reason: String? = nil) async throws {
        try await pool.write { db in
            try db.execute(sql: "UPDATE attachments SET state = ?, path = ?, reason = ? WHERE message_id = ? AND idx = ?",
                           arguments: [state, path, reason, id.messageID, id.index])
        }
    }

    // MARK: File keys in stored bodies

    /// The key a stored reference carries once its file is done with (spec/attachments.md
    /// §6.4): 32 zero bytes, in place of the file key, so that the stored body still decodes
    /// and shows the file's name, media type, size and preview, but opens nothing.
    static let scrubbedFileKey = FileKey(bytes: SecretBytes(copying: [UInt8](repeating: 0, count: FileKey.byteCount)))!

    /// Whether `key` is ``scrubbedFileKey`` (compared in constant time).
    static func isScrubbed(_ key: FileKey) -> Bool {
        key.bytes.withUnsafeBytes { key in scrubbedFileKey.bytes.withUnsafeBytes { constantTimeEquals(key, $0) } }
    }

    /// `body` with the key of each reference in `payload.files` whose index `scrub` accepts
    /// replaced by ``scrubbedFileKey``; nil when it does not decode or nothing changes.
    static func scrubbingFileKeys(_ body: [UInt8], where scrub: (Int) -> Bool) -> [UInt8]? {
        guard var message = try? ChatMessage.decode(body), let files = message.payload.files else { return nil }
        var changed = false
        var scrubbed: [FileReference] = []
        for (index, file) in files.enumerated() {
            guard scrub(index), !isScrubbed(file.key),
                  let reference = try? FileReference(blob: file.blob, sealed: SealedFile(key: scrubbedFileKey, digest: file.digest, size: file.size,
                                                                                      plainSize: file.plainSize),
                                                    mediaType: file.mediaType, name: file.name, preview: file.preview) else {
                scrubbed.append(file)
                continue
            }
            scrubbed.append(reference)
            changed = true
        }
        guard changed else { return nil }
        message.payload.files = scrubbed
        return try? message.encoded()
    }

    /// Scrubs from received message `id`'s stored body the keys of its files that are done
    /// with: saved and acknowledged, or gone from the relay. True when the body changed.
    @discardableResult
    func scrubReceivedFileKeys(_ id: String) async throws -> Bool {
        try await pool.write { db in
            guard let body = try Data.fetchOne(db, sql: "SELECT body FROM inbox WHERE id = ?", arguments: [id]),
                  let message = try? ChatMessage.decode(Array(body)) else { return false }
            let inline = message.payload.attachments?.count ?? 0
            let done = Set(try Int.fetchAll(db, sql: """
                SELECT idx FROM attachments WHERE message_id = ? AND blob_id IS NOT NULL
                AND (state = 'gone' OR (state = 'saved' AND reason IS NULL))
                """, arguments: [id]).map { $0 - inline })
            guard let scrubbed = Self.scrubbingFileKeys(Array(body), where: done.contains) else { return false }
            try db.execute(sql: "UPDATE inbox SET body = ? WHERE id = ?", arguments: [Data(scrubbed), id])
            return true
        }
    }

    /// File sends whose stored body still holds a file key though the message went out: the
    /// message id, and the blob ids whose keys are still there. At most `limit`, oldest first.
    func sentFileKeys(limit: Int) async throws -> [(id: String, blobs: [String])] {
        try await pool.read { db in
            var found: [(id: String, blobs: [String])] = []
            let rows = try Row.fetchCursor(db, sql: """
                SELECT id, body FROM sent WHERE type = ? AND state = 'sent' AND length(body) > 0
                ORDER BY created_at, id
                """, arguments: [MessageType.file.rawValue])
            while let row = try rows.next(), found.count < limit {
                guard let message = try? ChatMessage.decode(Array(row["body"] as Data)) else { continue }
                let blobs = (message.payload.files ?? []).filter { !Self.isScrubbed($0.key) }.map(\.blob)
                if !blobs.isEmpty { found.append((row["id"], blobs)) }
            }
            return found
        }
    }

    /// Scrubs from sent message `id`'s stored body the keys of the files in blobs `blobs` (the
    /// relay erased them). True when the body changed.
    @discardableResult
    func scrubSentFileKeys(_ id: String, blobs: Set<String>) async throws -> Bool {
        try await pool.write { db in
            guard let body = try Data.fetchOne(db, sql: "SELECT body FROM sent WHERE id = ?", arguments: [id]),
                  let files = (try? ChatMessage.decode(Array(body)))?.payload.files else { return false }
            guard let scrubbed = Self.scrubbingFileKeys(Array(body), where: { blobs.contains(files[$0].blob) }) else { return false }
            try db.execute(sql: "UPDATE sent SET body = ? WHERE id = ?", arguments: [Data(scrubbed), id])
            return true
        }
    }

    /// The stored message `id` (for its references), or nil.
    func receivedMessage(_ id: String) async throws -> ReceivedMessage? {
        try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT id, sender, body FROM inbox WHERE id = ?", arguments: [id]).flatMap { row in
                let body = Array(row["body"] as Data)
                return (try? ChatMessage.decode(body)).map { ReceivedMessage(id: row["id"], sender: row["sender"], message: $0, body: body) }
            }
        }
    }
}
