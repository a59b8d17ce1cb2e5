import Foundation
import MailslotWire
import Synchronization

// Sending a file (docs/design/attachments.md §6.1–§6.2). A small picture goes inline, inside its
// message, as before. Anything else goes as a blob, in steps that are each stored before the
// next one starts: the send is stored (`uploads` + `sent` in state `uploading`); the relay
// creates the blob; the file is encrypted to a spool file in the outbox folder and the message
// carrying its reference is stored; the parts the relay does not have yet are uploaded, one at
// a time (memory: one part), each as soon as encryption has written it (a pipeline: see
// `sealAndUpload`); then the message is sealed and sent through the outbox like any
// other. A crash or a lost network at any step leaves the send in `outgoing()`, and `flush()`
// resumes it: the relay's record of received parts says what is missing, so at most the part
// in flight is sent again.
extension MailslotClient {
    /// The largest picture tried inline: with the envelope's overhead and base64 it still fits
    /// the relay's default envelope limit (64 KiB). Anything larger goes as a blob.
    static let inlinePictureLimit: Int64 = 45_000

    /// Sends `file` to `recipient`, with an optional caption. A picture (`image/*`) small enough
    /// for the relay's envelope limit goes inline in a `picture` message; anything else is
    /// encrypted on this device, uploaded as a blob in parts, and referenced in a `file` message.
    ///
    /// The send is stored in the outbox before this returns; it goes on in the background, and
    /// ``FileSend/outcome()`` says how it ended. A crash or a lost network leaves it in
    /// ``outgoing()``, and ``flush()`` resumes it where the relay's record of parts says.
    ///
    /// ```swift
    /// let file = OutgoingFile(url: reportURL, mediaType: "application/pdf")
    /// let send = try await client.send(file: file, caption: "the report", to: "bob")
    /// for await step in send.progress { print(step.stage, step.bytes, "of", step.total) }
    /// print(try await send.outcome())              // .sent(id:) once the message is stored
    /// ```
    ///
    /// - Parameters:
    ///   - file: The file on disk, its media type, and optionally a name and a preview.
    ///   - caption: Text sent with the file, in the same message.
    ///   - recipient: The recipient's uid.
    ///   - senderName: A display name for the sender, sent inside the message.
    /// - Returns: The running send: its message id, its ``FileSend/progress``, its
    ///   ``FileSend/outcome()``, and ``FileSend/cancel()``.
    /// - Throws: Only for what no retry fixes: ``ClientError/invalidUID(text:)``, a file that
    ///   cannot be read or is no regular file (``ClientError/unreadableFile(path:)``), a recipient
    ///   without keys (``ClientError/noKeys(uid:)``), an invalid media type, name or preview
    ///   (``ClientError/cannotSeal(code:)``), or a file larger than the relay takes
    ///   (``ClientError/relay(problem:)`` with `blob_too_large`; nothing is kept).
    public func send(file: OutgoingFile, caption: String? = nil, to recipient: String, name senderName: String? = nil) async throws -> FileSend {
        guard Identifier.isValidUID(recipient) else { throw ClientError.invalidUID(text: recipient) }
        let me = try await identity()
        // The reference's rules (media type, name, preview), checked now rather than after the upload.
        let (label, plainSize, size) = try checkedFile(file)
        do { _ = try await contact(recipient) } catch ClientError.keyChanged {
            // Sent all the same: the message is held for the user's trust once the file is up.
        } catch ClientError.unreachable {
            // Pinned later: the send waits in the outbox for the relay anyway.
        }

        if file.mediaType.lowercased().hasPrefix("image/"), plainSize <= Self.inlinePictureLimit,
           let outcome = try await sendInline(file, label: label, caption: caption, to: recipient, senderName: senderName) {
            return outcome
        }
        _ = me
        return try await startUpload(file, label: label, plainSize: plainSize, size: size, caption: caption, to: recipient, group: nil,
                                     senderName: senderName)
    }

    /// Checks `file` against the reference's rules before anything is stored: its label, plain
    /// and sealed sizes.
    func checkedFile(_ file: OutgoingFile) throws -> (label: String?, plainSize: Int64, size: Int64) {
        let name = file.name ?? file.url.lastPathComponent
        let label: String? = name.isEmpty ? nil : name
        let plainSize = try Self.regularFileSize(file.url)
        guard let size = FileCipher.size(plainSize: plainSize) else { throw ClientError.cannotSeal(code: FileError.badLength.code) }
        do {
            _ = try FileReference(blob: BlobLayout.newID(), sealed: SealedFile(key: FileKey(), digest: FileDigest(bytes: [UInt8](repeating: 0, count: 32))!,
                                                                              size: size, plainSize: plainSize),
                                  mediaType: file.mediaType, name: label, preview: file.preview)
        } catch { throw ClientError.cannotSeal(code: error.code) }
        return (label, plainSize, size)
    }

    /// Stores a blob send (to `recipient`, or to `group` with `recipient` ''), asks the relay for
    /// its blob, and runs the upload in the background.
    func startUpload(_ file: OutgoingFile, label: String?, plainSize: Int64, size: Int64, caption: String?, to recipient: String,
                     group: GroupID?, senderName: String?) async throws -> FileSend {
        let upload = ClientStore.Upload(messageID: MessageID.generate(), blobID: BlobLayout.newID(), recipient: recipient,
                                        source: file.url.standardizedFileURL, spool: spoolFolder.appendingPathComponent("\(UUID().uuidString).enc"),
                                        plainSize: plainSize, size: size, mediaType: file.mediaType, name: label, preview: file.preview,
                                        caption: caption, senderName: senderName, stage: .created, groupID: group?.rawValue)
        try await store.insertUpload(upload)
        // The relay is asked for the blob before this returns, so that a file over its limit
        // is refused here, with nothing left behind.
        let created = await register(upload)
        let (stream, continuation) = AsyncStream.makeStream(of: TransferProgress.self, bufferingPolicy: .bufferingNewest(8))
        let stop = StopSignal()
        let task: Task<SendOutcome, any Error>
        switch created {
        case .refused(let error):
            try? await store.forgetUpload(upload.messageID)
            continuation.finish()
            throw error
        case .later(let reason):
            continuation.finish()
            task = Task { .queued(id: upload.messageID, reason: SendOutcome.Reason(recorded: reason)) }
        case .created:
            task = Task {
                defer { continuation.finish() }
                return try await self.runUpload(ClientStore.Upload(upload, stage: .registered), progress: ProgressSink(continuation), stop: stop)
            }
        }
        return FileSend(messageID: upload.messageID, progress: stream, task: task, stop: stop)
    }

    /// A small picture sent inline; nil when the relay found the envelope too large after all
    /// (the file then goes as a blob; the refused try is forgotten).
    private func sendInline(_ file: OutgoingFile, label: String?, caption: String?, to recipient: String, senderName: String?) async throws -> FileSend? {
        guard let data = FileManager.default.contents(atPath: file.url.path) else { throw ClientError.unreadableFile(path: file.url.path) }
        let attachment = Attachment(mediaType: file.mediaType, data: Array(data), name: label)
        let outcome = try await send(Payload(text: caption, attachments: [attachment]), type: .picture, to: recipient, name: senderName)
        if case .refused(let id, let reason) = outcome, reason == .relay(.envelopeTooLarge) {
            try await store.forgetUpload(id)
            return nil
        }
        let (stream, continuation) = AsyncStream.makeStream(of: TransferProgress.self)
        continuation.finish()
        return FileSend(messageID: outcome.id, progress: stream, task: Task { outcome }, stop: StopSignal())
    }

    /// Resumes every unfinished upload (after a crash, a lost network, a refusal to wait out),
    /// then scrubs the keys of sent files whose blobs are erased (`FileKeyScrubbing.swift`).
    func resumeUploads() async {
        guard let uploads = try? await store.uploads() else { return }
        for upload in uploads {
            _ = try? await runUpload(upload, progress: ProgressSink(nil), stop: StopSignal())
        }
        await scrubSentFileKeys()
    }

    /// How the relay answered a blob's creation.
    private enum Registration {
        /// Created (or it was already).
        case created
        /// Not now (the relay unreachable or asking to wait): the reason is noted, `flush` tries again.
        case later(String)
        /// Refused for good: nothing was stored on the relay.
        case refused(any Error)
    }

    /// Creates the blob on the relay and, once it holds it, moves the upload to `registered`.
    private func register(_ upload: ClientStore.Upload) async -> Registration {
        do {
            let request = BlobCreateRequest(id: upload.blobID, size: upload.size, recipients: try await blobRecipients(of: upload))
            let record = try await authorized { try await api.createBlob(request, session: $0) }
            guard record.size == upload.size else { throw ClientError.invalidResponse(detail: "the relay created blob \(record.id) with another size") }
            try await store.setUploadStage(upload.messageID, .registered)
            return .created
        } catch ClientError.relay(let problem) where Self.isFinal(problem) {
            return .refused(ClientError.relay(problem: problem))
        } catch let failure as FileSendFailure {
            return .refused(failure)
        } catch {
            let reason = Self.describe(error)
            try? await store.noteUploadProblem(upload.messageID, reason)
            return .later(reason)
        }
    }

    /// Relay answers meaning that the upload under this blob id cannot go on, though the file can
    /// (spec/attachments.md §6.1): the blob is gone (`404`: erased, deleted, expired and swept),
    /// its unfinished upload expired or lost (`410`), the relay holds other bytes for a part
    /// (`part_conflict`), or the id is taken (`conflict`, on a create). The send starts over.
    static func isLostUpload(_ problem: Problem) -> Bool {
        [.notFound, .uploadExpired, .uploadLost, .partConflict, .conflict].contains(problem.code)
    }

    /// The relay lost an upload (``isLostUpload(_:)``): the answer that said so.
    private struct UploadLost: Error {
        let problem: Problem
    }

    /// Takes an upload to the end: creates its blob (if not done), encrypts (if not done),
    /// uploads the missing parts, then seals and sends the message. Transient failures leave it
    /// in the outbox (`queued`, with why); a refusal or a changed file ends it (`refused`). An
    /// upload the relay lost starts over once per call — a new blob id, a new file key, a fresh
    /// sealing, the message then referencing the new blob; lost again, it waits for the next
    /// `flush`, which starts over again. Never dropped in silence.
    func runUpload(_ upload: ClientStore.Upload, progress: ProgressSink, stop: StopSignal) async throws -> SendOutcome {
        let id = upload.messageID
        guard runningUploads.insert(id).inserted else { return .queued(id: id, reason: .uploadRunning) }
        defer { runningUploads.remove(id) }
        var current = upload, restarted = false
        while true {
            do {
                return try await attemptUpload(current, progress: progress, stop: stop)
            } catch let lost as UploadLost {
                let reason = lost.problem.code.rawValue
                guard !restarted else {
                    let store = store
                    await Task { try? await store.noteUploadProblem(id, reason) }.value
                    return .queued(id: id, reason: .relay(lost.problem.code))
                }
                restarted = true
                logger.info("the relay lost a file's upload: starting over", metadata: ["id": "\(id)", "reason": "\(reason)"])
                current = try await startOver(current, reason: reason)
            }
        }
    }

    /// One try at ``runUpload(_:progress:stop:)``; throws ``UploadLost`` when the relay lost it.
    private func attemptUpload(_ upload: ClientStore.Upload, progress: ProgressSink, stop: StopSignal) async throws -> SendOutcome {
        let id = upload.messageID
        var upload = upload
        do {
            do {
                if upload.stage == .created {
                    switch await register(upload) {
                    case .created: upload = ClientStore.Upload(upload, stage: .registered)
                    case .later(let reason): return .queued(id: id, reason: SendOutcome.Reason(recorded: reason))
                    case .refused(let error): throw error
                    }
                }
                if upload.stage == .registered {
                    try await sealAndUpload(upload, progress: progress, stop: stop)
                } else if try await !uploadParts(upload, progress: progress, stop: stop) {
                    // The spool is gone before any part was stored (a crash before its sync): seal again.
                    try await sealAndUpload(upload, progress: progress, stop: stop)
                }
            } catch ClientError.relay(let problem) where Self.isLostUpload(problem) {
                // Only the blob's own requests say so: a `404` while the message is sealed and
                // sent (below) is about something else.
                throw UploadLost(problem: problem)
            }
            try? FileManager.default.removeItem(at: upload.spool)
            return try await finish(upload, progress: progress)
        } catch let lost as UploadLost {
            throw lost
        } catch let error as FileError {
            // The file changed or vanished while it was read: what the blob would hold is no longer the file.
            return await abandon(upload, reason: error.code)
        } catch let failure as FileSendFailure {
            return await abandon(upload, reason: failure.rawValue)
        } catch ClientError.relay(let problem) where Self.isFinal(problem) || problem.code.status == 410 {
            return await abandon(upload, reason: problem.code.rawValue)
        } catch ClientError.keyChanged(let uid) {
            throw ClientError.keyChanged(uid: uid)
        } catch {
            let reason = stop.isSet || Task.isCancelled || error is CancellationError ? "interrupted" : Self.describe(error)
            // In a task of its own: the store refuses work for a cancelled task, and why the
            // send stopped must be kept all the same.
            let store = store
            await Task { try? await store.noteUploadProblem(id, reason) }.value
            return .queued(id: id, reason: SendOutcome.Reason(recorded: reason))
        }
    }

    /// Starts a lost upload over: a new blob id, no key, header, part digests, spool or message
    /// body (so the next sealing draws a fresh key), stage `created`; the old blob is deleted on
    /// the relay (best effort: it is gone or expires). The send keeps its message id: nothing was
    /// sent under it yet.
    private func startOver(_ upload: ClientStore.Upload, reason: String) async throws -> ClientStore.Upload {
        let fresh = ClientStore.Upload(messageID: upload.messageID, blobID: BlobLayout.newID(), recipient: upload.recipient, source: upload.source,
                                       spool: spoolFolder.appendingPathComponent("\(UUID().uuidString).enc"), plainSize: upload.plainSize,
                                       size: upload.size, mediaType: upload.mediaType, name: upload.name, preview: upload.preview,
                                       caption: upload.caption, senderName: upload.senderName, stage: .created, groupID: upload.groupID)
        try await store.restartUpload(upload.messageID, blobID: fresh.blobID, spool: fresh.spool, reason: reason)
        try? FileManager.default.removeItem(at: upload.spool)
        _ = try? await authorized { try await api.deleteBlob(upload.blobID, session: $0) }
        return fresh
    }

    /// Seals the file into the spool and uploads each part the relay lacks as soon as its last
    /// byte is sealed, while encryption goes on (memory: a chunk for encryption, the part in
    /// flight for the upload; encryption runs ahead into the spool on disk, unbounded, so that it
    /// ends, and the message is stored, as early as it can). Each part's digest is computed as
    /// it is sealed, not read back.
    ///
    /// The key and stream header are stored before the first part goes up. A send resumed
    /// before encryption ended (a crash, a lost network) seals the file again with them, which
    /// gives the same ciphertext, so the parts the relay holds stay valid and only the missing
    /// ones are sent; if the source changed since (size, modification time, inode), the send is
    /// refused (`file_source_changed`), as other bytes under that key and header would repeat
    /// the keystream. A change the stamp misses (within the modification time's granularity, or
    /// a time set back) is caught part by part: each part's digest is stored before it goes up,
    /// and a part sealed again must match it, or the send is refused
    /// (``FileSendFailure/resealedPartDiffers``) before that part or any later one is sent.
    /// Once encryption ends the spool is synced and the message with the reference stored
    /// (stage `encrypted`); a resume from there reads parts from the spool.
    private func sealAndUpload(_ upload: ClientStore.Upload, progress: ProgressSink, stop: StopSignal) async throws {
        let record = try await authorized { try await api.blob(upload.blobID, session: $0) }
        guard record.size == upload.size, let layout = BlobLayout(size: record.size, partSize: record.partSize) else {
            throw ClientError.invalidResponse(detail: "the relay's blob \(record.id) does not have the size of the file sent")
        }
        let received = record.state == .complete ? Set(1...layout.parts) : Set(record.received ?? [])
        let stamp = try Self.sourceStamp(upload.source)
        let cipher: ClientStore.UploadCipher
        if let stored = upload.cipher {
            guard stored.sourceStamp == stamp else { throw FileError.sourceChanged }
            cipher = stored
        } else {
            // Parts from a sealing whose key was never stored cannot be matched: none exist, as
            // the key is stored before the first part goes up.
            guard received.isEmpty else { throw FileError.io("the relay holds parts of an unknown sealing", errno: EEXIST) }
            let key = FileKey()
            guard let encryptor = FileEncryptor(key: key, plainSize: upload.plainSize) else { throw FileError.badLength }
            cipher = ClientStore.UploadCipher(key: key, header: encryptor.header, sourceStamp: stamp)
            try await store.setUploadCipher(upload.messageID, cipher)
        }
        try FileManager.default.createDirectory(at: spoolFolder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])

        let (parts, sealedParts) = AsyncStream.makeStream(of: (number: Int, digest: [UInt8]).self)
        // Off the actor and off Swift's cooperative pool (``FileWork``): encryption takes seconds
        // for a large file, and the client serves other calls meanwhile. It goes on to its end
        // even if the upload stops, so that the message is stored and a resume reads the spool
        // rather than sealing again.
        let encryption = Task.detached { [plainSize = upload.plainSize] () async throws -> SealedFile in
            try await FileWork.run {
                defer { sealedParts.finish() }
                guard let encryptor = FileEncryptor(key: cipher.key, plainSize: plainSize, header: cipher.header) else { throw FileError.badLength }
                return try FileCipher.encryptFile(at: upload.source, to: upload.spool, with: encryptor, partSize: layout.partSize,
                                                  progress: { progress.report(.encrypting, $0, plainSize) },
                                                  part: { sealedParts.yield((number: $0, digest: $1)) })
            }
        }

        // Every part's digest is stored before the part goes up; a sealing resumed from the
        // stored key and header must make every part again exactly as before, or nothing of it
        // is sent (the source stamp misses a change within the modification time's granularity).
        let known = try await store.partDigests(upload.messageID)
        var failure: (any Error)?
        var done = received.reduce(Int64(0)) { $0 + (layout.range(ofPart: $1).map { Int64($0.count) } ?? 0) }
        var stored = received.count
        var spool: FileHandle?
        defer { try? spool?.close() }
        for await part in parts where failure == nil {
            do {
                if let before = known[part.number] {
                    guard constantTimeEquals(before, part.digest) else { throw FileSendFailure.resealedPartDiffers }
                } else if received.contains(part.number) {
                    // On the relay, but its digest never stored (a send from before v7): it cannot be matched.
                    throw FileSendFailure.resealedPartDiffers
                }
                if received.contains(part.number) { continue }
                if stop.isSet { throw CancellationError() }
                try Task.checkCancellation()
                guard let range = layout.range(ofPart: part.number) else { continue }
                if known[part.number] == nil { try await store.setPartDigest(upload.messageID, part: part.number, digest: part.digest) }
                if spool == nil { spool = try FileHandle(forReadingFrom: upload.spool) }
                try spool!.seek(toOffset: UInt64(range.lowerBound))
                let bytes = try spool!.read(upToCount: range.count) ?? Data()
                guard bytes.count == range.count else { throw FileError.io("the outbox spool \(upload.spool.path) is short", errno: EIO) }
                _ = try await authorized { try await api.putPart(upload.blobID, number: part.number, bytes: bytes, digest: part.digest, session: $0) }
                done += Int64(range.count)
                stored += 1
                progress.report(.uploading, done, layout.size, force: true)
            } catch {
                failure = error
            }
        }
        // The stream also ends when this task is cancelled: then some parts were never sent.
        if failure == nil && stored < layout.parts { failure = CancellationError() }
        let sealed: SealedFile
        do { sealed = try await encryption.value } catch {
            try? FileManager.default.removeItem(at: upload.spool)
            throw error
        }
        if let failure = failure as? FileSendFailure {
            // Not the sealing whose parts were stored: no reference to it is kept either.
            try? FileManager.default.removeItem(at: upload.spool)
            throw failure
        }
        try await storeReference(upload, sealed)
        if let failure { throw failure }
    }

    /// The source file's stamp: size, modification time and inode, which a resumed sealing
    /// checks before it seals the file again under the same key and header.
    static func sourceStamp(_ url: URL) throws -> String {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: url.path),
              let size = (attributes[.size] as? NSNumber)?.int64Value, let modified = attributes[.modificationDate] as? Date else {
            throw FileError.io("cannot read \(url.path)", errno: ENOENT)
        }
        let inode = (attributes[.systemFileNumber] as? NSNumber)?.uint64Value ?? 0
        return "\(size):\(modified.timeIntervalSince1970.bitPattern):\(inode)"
    }

    /// Encryption ended: the message with the file's reference is stored (stage `encrypted`).
    private func storeReference(_ upload: ClientStore.Upload, _ sealed: SealedFile) async throws {
        guard sealed.plainSize == upload.plainSize else {
            try? FileManager.default.removeItem(at: upload.spool)
            throw FileError.sourceChanged
        }
        let me = try await identity()
        // A group file's message names the group's state (again when it goes: finishGroupFile).
        var group: GroupReference?
        if let id = upload.groupID.flatMap(GroupID.init(rawValue:)) { group = GroupReference(try await groupFileState(id, me: me.uid)) }
        let message: ChatMessage, body: [UInt8]
        do {
            let reference = try FileReference(blob: upload.blobID, sealed: sealed, mediaType: upload.mediaType, name: upload.name, preview: upload.preview)
            message = ChatMessage(type: .file, sender: Sender(id: me.uid, name: upload.senderName),
                                  payload: Payload(text: upload.caption, files: [reference]), timestamp: Int64(Date().timeIntervalSince1970 * 1000),
                                  group: group)
            try message.validate()
            body = try message.encoded()
        } catch { throw ClientError.cannotSeal(code: error.code) }
        try await store.markEncrypted(upload.messageID, message: message, body: body)
    }

    /// Uploads the parts the relay does not have, in order, one at a time. False when the spool
    /// is missing and the relay has no part yet (encrypting again is safe then).
    private func uploadParts(_ upload: ClientStore.Upload, progress: ProgressSink, stop: StopSignal) async throws -> Bool {
        let record = try await authorized { try await api.blob(upload.blobID, session: $0) }
        guard record.size == upload.size, let layout = BlobLayout(size: record.size, partSize: record.partSize) else {
            throw ClientError.invalidResponse(detail: "the relay's blob \(record.id) does not have the size of the file sent")
        }
        if record.state == .complete { return true }
        let received = Set(record.received ?? [])
        guard let handle = try? FileHandle(forReadingFrom: upload.spool) else {
            guard received.isEmpty else { throw FileError.io("the outbox spool \(upload.spool.path) is gone", errno: ENOENT) }
            return false
        }
        defer { try? handle.close() }
        var done = received.reduce(Int64(0)) { $0 + (layout.range(ofPart: $1).map { Int64($0.count) } ?? 0) }
        progress.report(.uploading, done, layout.size, force: true)
        for number in 1...layout.parts where !received.contains(number) {
            if stop.isSet { throw CancellationError() }
            try Task.checkCancellation()
            guard let range = layout.range(ofPart: number) else { continue }
            try handle.seek(toOffset: UInt64(range.lowerBound))
            let bytes = try handle.read(upToCount: Int(range.count)) ?? Data()
            guard bytes.count == range.count else { throw FileError.io("the outbox spool \(upload.spool.path) is short", errno: EIO) }
            let answer = try await authorized { try await api.putPart(upload.blobID, number: number, bytes: bytes, session: $0) }
            done += Int64(range.count)
            progress.report(.uploading, done, layout.size, force: true)
            if answer.state == .complete { break }
        }
        return true
    }

    /// The blob is complete: the message is sealed (or held for a changed key) and sent.
    private func finish(_ upload: ClientStore.Upload, progress: ProgressSink) async throws -> SendOutcome {
        progress.report(.sending, 0, 1, force: true)
        guard let stored = try await store.outgoingBody(upload.messageID) else { throw ClientError.notResendable(id: upload.messageID) }
        let message = try decodeStored(stored.body)
        if let group = upload.groupID.flatMap(GroupID.init(rawValue:)) {
            let outcome = try await finishGroupFile(upload, message: message, group: group)
            progress.report(.sending, 1, 1, force: true)
            return outcome
        }
        let sealed: ClientStore.Sealed?
        do {
            sealed = try await seal(message, id: upload.messageID, as: try await identity(), to: try await contact(upload.recipient))
        } catch ClientError.keyChanged {
            sealed = nil
        }
        try await store.finishUpload(upload.messageID, sealed: sealed)
        await eraseOldCopies()
        guard let sealed else { return .held(id: upload.messageID, recipient: upload.recipient) }
        let queued = ClientStore.Queued(id: upload.messageID, recipient: upload.recipient, sealed: sealed, wake: try await store.wakes(upload.messageID))
        let outcome = try outcome(of: await deliver(queued))
        progress.report(.sending, 1, 1, force: true)
        return outcome
    }

    /// Ends an upload that cannot finish: the send is refused with `reason`, the spool removed,
    /// and the blob erased on the relay (best effort: it expires anyway).
    private func abandon(_ upload: ClientStore.Upload, reason: String) async -> SendOutcome {
        logger.info("a file send cannot finish", metadata: ["id": "\(upload.messageID)", "reason": "\(reason)"])
        try? await store.abandonUpload(upload.messageID, reason: reason)
        try? FileManager.default.removeItem(at: upload.spool)
        _ = try? await authorized { try await api.deleteBlob(upload.blobID, session: $0) }
        return .refused(id: upload.messageID, reason: SendOutcome.Reason(recorded: reason))
    }

    /// The outbox's spool folder, beside the database: ciphertexts waiting to be uploaded.
    var spoolFolder: URL { storeFolder.appendingPathComponent("outbox", isDirectory: true) }

    /// The size of the regular file at `url`; anything else is refused.
    static func regularFileSize(_ url: URL) throws -> Int64 {
        guard url.isFileURL, let attributes = try? FileManager.default.attributesOfItem(atPath: url.path),
              attributes[.type] as? FileAttributeType == .typeRegular, let size = (attributes[.size] as? NSNumber)?.int64Value,
              FileManager.default.isReadableFile(atPath: url.path) else {
            throw ClientError.unreadableFile(path: url.path)
        }
        return size
    }
}

extension ClientStore.Upload {
    /// The same upload at another stage.
    init(_ upload: ClientStore.Upload, stage: ClientStore.UploadStage) {
        self.init(messageID: upload.messageID, blobID: upload.blobID, recipient: upload.recipient, source: upload.source, spool: upload.spool,
                  plainSize: upload.plainSize, size: upload.size, mediaType: upload.mediaType, name: upload.name, preview: upload.preview,
                  caption: upload.caption, senderName: upload.senderName, stage: stage, cipher: upload.cipher, groupID: upload.groupID)
    }
}

/// Where progress reports go (a ``FileSend``'s stream, or nowhere when `flush` resumes), at most
/// one per MiB and stage except the ones forced (a part done, a stage's end).
final class ProgressSink: Sendable {
    private let continuation: AsyncStream<TransferProgress>.Continuation?
    private let last = Mutex<(TransferProgress.Stage?, Int64)>((nil, 0))

    init(_ continuation: AsyncStream<TransferProgress>.Continuation?) { self.continuation = continuation }

    func report(_ stage: TransferProgress.Stage, _ bytes: Int64, _ total: Int64, force: Bool = false) {
        guard let continuation else { return }
        let due = last.withLock { last in
            guard force || last.0 != stage || bytes - last.1 >= 1 << 20 || bytes == total else { return false }
            last = (stage, bytes)
            return true
        }
        if due { continuation.yield(TransferProgress(stage: stage, bytes: bytes, total: total)) }
    }
}
