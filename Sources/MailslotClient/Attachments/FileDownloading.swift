import Foundation
import MailslotWire
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Receiving files (docs/design/attachments.md §6.3). A stored message's attachments are rows of
// their own; small ones (the policy's size, and every inline one) are saved as they arrive,
// larger ones on demand. A blob's ciphertext is fetched one part per ranged request (two in
// flight) into a hidden `.mailslot-<blob>.part` file in the destination folder, hashed as it is
// written (an interrupted download resumes from its length, hashing that prefix again), then
// its digest checked and decrypted in one pass to a temporary file that is linked to its final
// name only after the last check — under a name that is never an existing file's. Only
// then is the blob acknowledged, so the relay erases it. A blob the relay no longer has is `gone`;
// one that fails a check is `corrupt`, is not acknowledged (it expires), and nothing is saved.
extension MailslotClient {
    /// The attachments of stored message `messageID` (inline ones first), each with where it stands.
    public func attachments(of messageID: String) async throws -> [ReceivedAttachment] {
        guard let message = try await store.receivedMessage(messageID) else { return [] }
        let rows = try await store.attachmentRows(of: messageID)
        return rows.compactMap { row in Self.attachment(row, in: message.message) }
    }

    /// Saves attachment `id` into `directory` (the policy's folder when nil) and returns where it
    /// stands afterwards: ``ReceivedAttachment/State/saved(_:)``, or ``ReceivedAttachment/State/gone``
    /// or ``ReceivedAttachment/State/corrupt(_:)`` (final: nothing saved). A saved one is not
    /// fetched again. Throws when the download could not finish now (the relay unreachable, a
    /// local file error): what was fetched is kept, and the next call (or ``MailslotClient/flush()``)
    /// resumes it. `progress` hears of the bytes as they come and as they are checked.
    @discardableResult
    public func download(_ id: AttachmentID, into directory: URL? = nil,
                         progress: (@Sendable (TransferProgress) -> Void)? = nil) async throws -> ReceivedAttachment {
        guard let message = try await store.receivedMessage(id.messageID),
              let row = try await store.attachmentRows(of: id.messageID).first(where: { $0.id == id }),
              let current = Self.attachment(row, in: message.message) else {
            throw ClientError.invalidResponse(detail: "no attachment \(id)")
        }
        switch current.state {
        case .saved, .gone: return current
        case .available, .corrupt: break
        }
        guard runningDownloads.insert(id).inserted else { return current }
        defer { runningDownloads.remove(id) }
        let folder = try prepareFolder(directory)
        let inline = message.message.payload.attachments ?? []
        do {
            if id.index < inline.count {
                let attachment = inline[id.index]
                let path = try Self.saveInline(attachment.data, named: SafeFileName.make(attachment.name, mediaType: attachment.mediaType,
                                                                                         fallback: "file-\(id.messageID.prefix(8))-\(id.index)"), in: folder)
                try await store.setAttachment(id, state: "saved", path: path.path)
            } else {
                let reference = (message.message.payload.files ?? [])[id.index - inline.count]
                try await fetchBlob(id, reference, into: folder, progress: progress)
            }
        } catch {
            try? await store.setAttachment(id, state: "available", reason: Self.describe(error))
            throw error
        }
        await scrubReceivedFileKeys(of: id.messageID)
        return try await attachments(of: id.messageID).first { $0.id == id } ?? current
    }

    /// Saves what the policy says to save of a message just stored, and returns it with its
    /// attachments. Failures are kept on the attachment (shown, retried by `flush`), never thrown.
    func withAttachments(_ message: ReceivedMessage) async -> ReceivedMessage {
        guard message.message.payload.attachments != nil || message.message.payload.files != nil else { return message }
        var result = message
        for attachment in (try? await attachments(of: message.id)) ?? []
        where attachment.isInline || attachment.plainSize < attachmentPolicy.downloadAutomaticallyBelow {
            var observe: (@Sendable (TransferProgress) -> Void)?
            if !attachment.isInline, let listener = attachmentPolicy.progress {
                observe = { listener(attachment, $0) }
            }
            do {
                try await download(attachment.id, progress: observe)
            } catch {
                logger.info("an attachment could not be saved now", metadata: ["id": "\(attachment.id)", "error": "\(Self.describe(error))"])
            }
        }
        result.attachments = (try? await attachments(of: message.id)) ?? []
        return result
    }

    /// Tries again the downloads that were interrupted, and the acknowledgements that did not
    /// reach the relay (best effort: called by `flush`).
    func resumeDownloads() async {
        for row in (try? await store.interruptedDownloads()) ?? [] {
            if row.state == "saved", let blob = row.blobID {
                if await acknowledge(blob: blob) {
                    try? await store.setAttachment(row.id, state: "saved", path: row.path)
                    await scrubReceivedFileKeys(of: row.id.messageID)
                }
            } else {
                _ = try? await download(row.id)
            }
        }
    }

    /// Fetches, checks, decrypts and saves one blob, then acknowledges it.
    private func fetchBlob(_ id: AttachmentID, _ reference: FileReference, into folder: URL,
                           progress: (@Sendable (TransferProgress) -> Void)?) async throws {
        // A key scrubbed from the stored body (spec/attachments.md §6.4) means the file was done with.
        guard !ClientStore.isScrubbed(reference.key) else {
            try await store.setAttachment(id, state: "gone", reason: ProblemCode.notFound.rawValue)
            return
        }
        let record: BlobRecord
        do { record = try await authorized { try await api.blob(reference.blob, session: $0) } } catch ClientError.relay(let problem) where problem.code == .notFound {
            try await store.setAttachment(id, state: "gone", reason: problem.code.rawValue)
            return
        }
        // The relay's size must be the reference's: another blob under this id is refused unread.
        guard record.size == reference.size else {
            try await store.setAttachment(id, state: "corrupt", reason: FileError.badLength.code)
            return
        }
        let partial = folder.appendingPathComponent(".mailslot-\(reference.blob).part")
        let digest: [UInt8]
        do {
            var fetched = try await fetchCiphertext(reference, partSize: record.partSize, to: partial, progress: progress)
            if fetched.resumed, !constantTimeEquals(fetched.digest, reference.digest.bytes) {
                // The prefix an earlier try left may be what a crash made of it (the spool is not
                // synced): fetched again whole, once, before the blob is judged.
                try? FileManager.default.removeItem(at: partial)
                fetched = try await fetchCiphertext(reference, partSize: record.partSize, to: partial, progress: progress)
            }
            digest = fetched.digest
        } catch ClientError.relay(let problem) where problem.code == .notFound {
            try? FileManager.default.removeItem(at: partial)
            try await store.setAttachment(id, state: "gone", reason: problem.code.rawValue)
            return
        }
        let stem = SafeFileName.make(reference.name, mediaType: reference.mediaType, fallback: "file-\(reference.blob.prefix(8))")
        let sealed = reference.sealed
        // Off the actor and off Swift's cooperative pool: decrypting a large file takes seconds.
        // The digest was computed as the bytes arrived: the decryption is the only pass.
        let opened: Result<URL, FileError> = try await FileWork.run {
            var attempt = 0
            while true {
                let destination = folder.appendingPathComponent(SafeFileName.candidate(stem, attempt: attempt))
                do throws(FileError) {
                    try FileCipher.decryptFile(at: partial, sealed, digested: digest, to: destination) { report in
                        progress?(TransferProgress(stage: .decrypting, bytes: report.done, total: report.total))
                    }
                    return .success(destination)
                } catch {
                    guard error == .destinationExists, attempt < 10_000 else { return .failure(error) }
                    attempt += 1
                }
            }
        }
        switch opened {
        case .success(let path):
            try? FileManager.default.removeItem(at: partial)
            try await store.setAttachment(id, state: "saved", path: path.path, reason: "unacknowledged")
            if await acknowledge(blob: reference.blob) { try await store.setAttachment(id, state: "saved", path: path.path) }
        case .failure(.io(let what, let errno)):
            throw FileError.io(what, errno: errno)  // local: kept as it is, tried again later
        case .failure(let error):
            // The ciphertext is not what the sender sealed: nothing saved, nothing acknowledged.
            try? FileManager.default.removeItem(at: partial)
            try await store.setAttachment(id, state: "corrupt", reason: error.code)
        }
    }

    /// How many ranged requests a download keeps in flight: one arrives while the one before is
    /// written and hashed.
    static let rangesInFlight = 2

    /// Appends the ciphertext's missing bytes to `partial`, one part per ranged request with up
    /// to ``rangesInFlight`` requests at once, hashing them as they are written (a prefix left by
    /// an interrupted download is hashed first). Returns the digest of the whole ciphertext and
    /// whether a prefix was there.
    private func fetchCiphertext(_ reference: FileReference, partSize: Int64, to partial: URL,
                                 progress: (@Sendable (TransferProgress) -> Void)?) async throws -> (digest: [UInt8], resumed: Bool) {
        let size = reference.size
        let spool = try await FileWork.run { try DownloadSpool(at: partial, size: size) }
        var offset = spool.length
        let resumed = offset > 0
        // One part per request (at most 16 MiB, whatever the relay says its parts are).
        let step: Int64 = max(Int64(FileCipher.sealedChunkSize), min(partSize, 16 << 20))
        progress?(TransferProgress(stage: .downloading, bytes: offset, total: size))
        var pending: [(range: Range<Int64>, task: Task<Data, any Error>)] = []
        defer { for request in pending { request.task.cancel() } }
        var requested = offset
        while offset < size {
            try Task.checkCancellation()
            while pending.count < Self.rangesInFlight, requested < size {
                let range = requested..<min(requested + step, size)
                requested = range.upperBound
                pending.append((range, Task { try await self.authorized { try await self.api.blobContent(reference.blob, range: range, size: size, session: $0) } }))
            }
            let request = pending.removeFirst()
            let bytes = try await request.task.value
            guard request.range.lowerBound == offset, Int64(bytes.count) == request.range.count else {
                throw ClientError.invalidResponse(detail: "a range of blob \(reference.blob) came out of place")
            }
            try await FileWork.run { try spool.append(bytes) }
            offset = request.range.upperBound
            progress?(TransferProgress(stage: .downloading, bytes: offset, total: size))
        }
        return (try await FileWork.run { try spool.finish() }, resumed)
    }

    /// Tells the relay this device has blob `blob`; a `404` counts as done (erased already).
    /// False when the relay could not be told now (`flush` tries again).
    private func acknowledge(blob: String) async -> Bool {
        do {
            try await authorized { try await api.acknowledgeBlob(blob, session: $0) }
            return true
        } catch ClientError.relay(let problem) where problem.code == .notFound {
            return true
        } catch {
            logger.info("a saved blob could not be acknowledged now", metadata: ["blob": "\(blob)", "error": "\(Self.describe(error))"])
            return false
        }
    }

    /// The folder to save into, created private to the user (0700) when missing.
    private func prepareFolder(_ directory: URL?) throws -> URL {
        let folder = (directory ?? attachmentPolicy.directory ?? storeFolder.appendingPathComponent("files", isDirectory: true)).standardizedFileURL
        if !FileManager.default.fileExists(atPath: folder.path) {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        }
        return folder
    }

    /// Writes an inline attachment under a free name: to a temporary file, synced, then linked
    /// (which refuses an existing name atomically: the next candidate is tried).
    private static func saveInline(_ data: [UInt8], named stem: String, in folder: URL) throws -> URL {
        let temporary = folder.appendingPathComponent(".mailslot-\(UUID().uuidString).tmp")
        guard FileManager.default.createFile(atPath: temporary.path, contents: Data(data), attributes: [.posixPermissions: 0o600]) else {
            throw FileError.io("cannot write \(temporary.path)", errno: errno)
        }
        defer { unlink(temporary.path) }
        let handle = try FileHandle(forUpdating: temporary)
        try handle.synchronize()
        try handle.close()
        for attempt in 0..<10_000 {
            let destination = folder.appendingPathComponent(SafeFileName.candidate(stem, attempt: attempt))
            if link(temporary.path, destination.path) == 0 { return destination }
            guard errno == EEXIST else { throw FileError.io("cannot link \(destination.path)", errno: errno) }
        }
        throw FileError.destinationExists
    }

    /// A stored row as the app sees it.
    static func attachment(_ row: ClientStore.AttachmentRow, in message: ChatMessage) -> ReceivedAttachment? {
        let inline = message.payload.attachments ?? [], files = message.payload.files ?? []
        let state: ReceivedAttachment.State
        switch row.state {
        case "saved": state = .saved(URL(fileURLWithPath: row.path ?? ""))
        case "gone": state = .gone
        case "corrupt": state = .corrupt(row.reason ?? "file_corrupt")
        default: state = .available(reason: row.reason)
        }
        if row.id.index < inline.count {
            let attachment = inline[row.id.index]
            return ReceivedAttachment(id: row.id, isInline: true, mediaType: attachment.mediaType, name: attachment.name,
                                      plainSize: Int64(attachment.data.count), preview: nil, state: state)
        }
        guard row.id.index - inline.count < files.count else { return nil }
        let file = files[row.id.index - inline.count]
        return ReceivedAttachment(id: row.id, isInline: false, mediaType: file.mediaType, name: file.name, plainSize: file.plainSize,
                                  preview: file.preview, state: state)
    }
}
