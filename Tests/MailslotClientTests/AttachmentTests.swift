import Foundation
@testable import MailslotClient
@testable import MailslotRelay
import MailslotTestSupport
import MailslotWire
import Synchronization
import Testing

/// Files sent as blobs between clients, through a real relay with 1 MiB parts: round trips byte
/// for byte, resumed uploads and downloads, and blobs that are gone or not what was sealed.
@Suite struct AttachmentTests {
    /// A relay cutting blobs into 1 MiB parts, so that a few MiB make several parts.
    static func withBlobRelay<T>(_ body: (TestRelay) async throws -> T) async throws -> T {
        // One relay even on a cluster: blobs without S3 are files in one relay's data folder, which
        // the others cannot serve (BlobClusterTests covers two relays on one bucket).
        try await withTestRelay(store: try .configured.singleNode, configure: { $0.blobPartBytes = 1 << 20 }, body)
    }

    @Test func aMultiPartFileArrivesByteForByteAndLeavesNothingOnTheRelay() async throws {
        try await Self.withBlobRelay { relay in
            let alice = try relay.client("alice")
            let bob = try relay.client("bob", attachments: AttachmentPolicy(directory: URL(fileURLWithPath: relay.folder + "/saved"),
                                                                          downloadAutomaticallyBelow: .max))
            try await alice.signIn()
            try await bob.signIn()
            let bytes = randomBytes(3 * (1 << 20) + 12_345)
            let source = try Self.file(bytes, in: relay, named: "clip.mp4")

            let transfer = try await alice.send(file: OutgoingFile(url: source, mediaType: "video/mp4"), caption: "look", to: "bob")
            var stages: [TransferProgress] = []
            for await progress in transfer.progress { stages.append(progress) }
            #expect(try await transfer.outcome() == .sent(id: transfer.messageID))
            let upload = try #require(stages.last { $0.stage == .uploading })
            #expect(upload.bytes == upload.total && upload.total == FileCipher.size(plainSize: Int64(bytes.count)))
            #expect(try await alice.outgoing().first { $0.id == transfer.messageID }?.state == .sent)
            #expect(try FileManager.default.contentsOfDirectory(atPath: relay.folder + "/alice/outbox").isEmpty, "the spool is removed")
            #expect(relay.counter("mailslot_blob_parts_received_total") == 4)

            let received = try #require(try await bob.receive().first)
            #expect(received.message.type == .file && received.message.payload.text == "look")
            let attachment = try #require(received.attachments.first)
            #expect(attachment.name == "clip.mp4" && attachment.mediaType == "video/mp4" && attachment.plainSize == Int64(bytes.count))
            guard case .saved(let path) = attachment.state else { Issue.record("not saved: \(attachment.state)"); return }
            #expect(path.path == relay.folder + "/saved/clip.mp4")
            #expect(FileManager.default.contents(atPath: path.path) == Data(bytes))
            #expect(try FileManager.default.contentsOfDirectory(atPath: relay.folder + "/saved") == ["clip.mp4"], "no temporary left")

            // Acknowledged: the relay erased the blob; its author finds it gone.
            let blob = try #require(received.message.payload.files?.first?.blob)
            #expect(try await relay.call("GET", "/v1/blobs/\(blob)", session: try await relay.signIn("alice").session).status == 404)
        }
    }

    @Test func anInterruptedUploadResumesWithOnlyTheMissingParts() async throws {
        try await Self.withBlobRelay { relay in
            let alice = try relay.client("alice")
            let bob = try relay.client("bob", attachments: AttachmentPolicy(downloadAutomaticallyBelow: .max))
            try await alice.signIn()
            try await bob.signIn()
            let bytes = randomBytes(24 * (1 << 20))
            let parts = 25  // 24 MiB of plaintext and the stream's overhead, in 1 MiB parts

            // Stopped once the first part is stored (the way Ctrl-C stops the CLI).
            let transfer = try await alice.send(file: OutgoingFile(url: try Self.file(bytes, in: relay, named: "big.bin")), to: "bob")
            for await progress in transfer.progress where progress.stage == .uploading && progress.bytes > 0 {
                transfer.cancel()
                break
            }
            guard case .queued(_, let reason) = try await transfer.outcome() else { Issue.record("not queued"); return }
            #expect(reason == .interrupted)
            let pending = try #require(try await alice.outgoing().first { $0.id == transfer.messageID })
            #expect(pending.state == .uploading && pending.lastError == "interrupted", "shown as unfinished, and why")
            let storedBefore = Int(relay.counter("mailslot_blob_parts_received_total"))
            try #require(storedBefore < parts, "the upload stopped before its end")

            // The flush sends exactly the parts the relay does not have: none twice.
            let putsBefore = relay.partUploads()
            #expect(try await alice.flush() == 0)
            #expect(Int(relay.counter("mailslot_blob_parts_received_total")) == parts)
            #expect(relay.partUploads() - putsBefore == parts - storedBefore, "only the missing parts were sent")
            #expect(relay.partUploads() <= parts + 1, "at most the part in flight was sent twice")
            #expect(try await alice.outgoing().first { $0.id == transfer.messageID }?.state == .sent)
            let received = try #require(try await bob.receive().first?.attachments.first)
            guard case .saved(let path) = received.state else { Issue.record("not saved: \(received.state)"); return }
            #expect(FileManager.default.contents(atPath: path.path) == Data(bytes))
        }
    }

    /// Encryption and upload run as a pipeline: a crash can come after some parts are on the
    /// relay but before encryption ended (no spool synced, no message stored). Made here from an
    /// interrupted send by putting its row back to that state (stage `registered`, spool gone).
    static func cutOffWhileSealing(_ relay: TestRelay, _ alice: MailslotClient, _ bytes: [UInt8]) async throws -> (id: String, source: URL, stored: Int) {
        let source = try Self.file(bytes, in: relay, named: "big.bin")
        let transfer = try await alice.send(file: OutgoingFile(url: source), to: "bob")
        for await progress in transfer.progress where progress.stage == .uploading && progress.bytes > 0 {
            transfer.cancel()
            break
        }
        guard case .queued = try await transfer.outcome() else { throw CancellationError() }
        let stored = Int(relay.counter("mailslot_blob_parts_received_total"))
        try await alice.store.setUploadStage(transfer.messageID, .registered)
        for spool in try FileManager.default.contentsOfDirectory(atPath: relay.folder + "/alice/outbox") {
            try FileManager.default.removeItem(atPath: relay.folder + "/alice/outbox/" + spool)
        }
        return (transfer.messageID, source, stored)
    }

    @Test func aSendCutOffWhileSealingSealsTheSameBytesAgainAndSendsOnlyTheMissingParts() async throws {
        try await Self.withBlobRelay { relay in
            let alice = try relay.client("alice")
            let bob = try relay.client("bob", attachments: AttachmentPolicy(downloadAutomaticallyBelow: .max))
            try await alice.signIn()
            try await bob.signIn()
            let bytes = randomBytes(12 * (1 << 20))
            let parts = 13
            let (id, _, storedBefore) = try await Self.cutOffWhileSealing(relay, alice, bytes)
            try #require(storedBefore > 0 && storedBefore < parts, "some parts on the relay, not all")

            let putsBefore = relay.partUploads()
            #expect(try await alice.flush() == 0)
            #expect(relay.partUploads() - putsBefore == parts - storedBefore, "only the missing parts were sent")
            #expect(try await alice.outgoing().first { $0.id == id }?.state == .sent)
            // Sealed again with the stored key and header: the parts from before fit the new ones.
            let received = try #require(try await bob.receive().first?.attachments.first)
            guard case .saved(let path) = received.state else { Issue.record("not saved: \(received.state)"); return }
            #expect(FileManager.default.contents(atPath: path.path) == Data(bytes))
        }
    }

    @Test func aSourceChangedBeforeTheResumedSealingIsRefusedNotSealedAgain() async throws {
        try await Self.withBlobRelay { relay in
            let alice = try relay.client("alice")
            try await alice.signIn()
            try await relay.client("bob").signIn()
            let (id, source, _) = try await Self.cutOffWhileSealing(relay, alice, randomBytes(12 * (1 << 20)))
            // Same size, other bytes: sealing them under the stored key and header would repeat the keystream.
            try Data(randomBytes(12 * (1 << 20))).write(to: source)
            let putsBefore = relay.partUploads()
            _ = try await alice.flush()
            let send = try #require(try await alice.outgoing().first { $0.id == id })
            #expect(send.state == .refused && send.lastError == "file_source_changed")
            #expect(relay.partUploads() == putsBefore, "nothing sealed again, nothing sent")
        }
    }

    /// A change the source stamp cannot see (same size, inode and modification time, set back
    /// with `utimensat`): the resumed sealing makes other parts under the stored key and header,
    /// and the stored part digests refuse them before any goes up.
    @Test func aSourceChangedUnderTheSameStampIsRefusedByThePartDigests() async throws {
        try await Self.withBlobRelay { relay in
            let alice = try relay.client("alice")
            try await alice.signIn()
            try await relay.client("bob").signIn()
            let size = 12 * (1 << 20)
            let (id, source, storedBefore) = try await Self.cutOffWhileSealing(relay, alice, randomBytes(size))
            try #require(storedBefore > 0, "some parts of the first sealing are on the relay")
            let blob = try #require(try await alice.store.uploads().first { $0.messageID == id }?.blobID)
            let digests = try await alice.store.partDigests(id)
            #expect(digests.count >= storedBefore, "every part's digest stored before it went up")

            var before = stat()
            try #require(stat(source.path, &before) == 0)
            let handle = try FileHandle(forWritingTo: source)  // in place: the same inode
            try handle.write(contentsOf: Data(randomBytes(size)))
            try handle.close()
            var times = [before.st_atim, before.st_mtim]
            try #require(utimensat(AT_FDCWD, source.path, &times, 0) == 0)
            let stamp = try await alice.store.uploads().first { $0.messageID == id }?.cipher?.sourceStamp
            try #require(try MailslotClient.sourceStamp(source) == stamp, "the stamp does not show the change")

            let putsBefore = relay.partUploads()
            _ = try await alice.flush()
            let send = try #require(try await alice.outgoing().first { $0.id == id })
            #expect(send.state == .refused && send.lastError == FileSendFailure.resealedPartDiffers.rawValue)
            #expect(relay.partUploads() == putsBefore, "no part of the other sealing reached the relay")
            let (uploadsLeft, digestsLeft) = (try await alice.store.uploads(), try await alice.store.partDigests(id))
            #expect(uploadsLeft.isEmpty && digestsLeft.isEmpty, "key and digests forgotten")
            #expect(try await relay.call("GET", "/v1/blobs/\(blob)", session: try await relay.signIn("alice").session).status == 404,
                    "the blob is erased")
            #expect(try FileManager.default.contentsOfDirectory(atPath: relay.folder + "/alice/outbox").isEmpty, "no spool left")
        }
    }

    /// An upload the relay no longer holds — its unfinished upload expired (`410`), or the blob
    /// erased (`404`) — starts over on `flush` or `resend`: a new blob, a new key, the message
    /// referring to the new blob, the file arriving whole.
    static func lostUploadStartsOver(expire: Bool) async throws {
        let clock = TestClock()
        try await withTestRelay(store: try .configured.singleNode, configure: { $0.blobPartBytes = 1 << 20; $0.blobUploadTTL = 60; $0.clock = clock.relayClock }) { relay in
            let alice = try relay.client("alice")
            let bob = try relay.client("bob", attachments: AttachmentPolicy(downloadAutomaticallyBelow: .max))
            try await alice.signIn()
            try await bob.signIn()
            let bytes = randomBytes(6 * (1 << 20))
            let transfer = try await alice.send(file: OutgoingFile(url: try Self.file(bytes, in: relay, named: "lost.bin")), to: "bob")
            for await progress in transfer.progress where progress.stage == .uploading && progress.bytes > 0 {
                transfer.cancel()
                break
            }
            guard case .queued = try await transfer.outcome() else { Issue.record("not queued"); return }
            let before = try #require(try await alice.store.upload(transfer.messageID))
            let oldKey = try #require(before.cipher?.key)
            let session = try await relay.signIn("alice").session

            let outcome: MailslotClient.SendOutcome
            if expire {
                clock.advance(by: .seconds(61))
                let answer = try await relay.call("GET", "/v1/blobs/\(before.blobID)", session: session)
                #expect(answer.status == 410 && answer.problem == .uploadExpired)
                #expect(try await alice.flush() == 0)
                outcome = try #require(try await alice.outgoing().first { $0.id == transfer.messageID }).state == .sent
                    ? .sent(id: transfer.messageID) : .queued(id: transfer.messageID, reason: .failed(detail: "not sent"))
            } else {
                #expect(try await relay.call("DELETE", "/v1/blobs/\(before.blobID)", session: session).status == 204)
                outcome = try await alice.resend(transfer.messageID)
            }
            #expect(outcome == .sent(id: transfer.messageID))
            #expect(try await alice.store.upload(transfer.messageID) == nil)

            let received = try #require(try await bob.receive().first)
            let reference = try #require(received.message.payload.files?.first)
            #expect(received.id == transfer.messageID)
            #expect(reference.blob != before.blobID, "a new blob")
            #expect(reference.key != oldKey, "a new file key: nothing sealed twice under one keystream")
            guard case .saved(let path) = received.attachments.first?.state else { Issue.record("not saved"); return }
            #expect(FileManager.default.contents(atPath: path.path) == Data(bytes))
        }
    }

    @Test func anExpiredUploadStartsOverOnFlush() async throws {
        try await Self.lostUploadStartsOver(expire: true)
    }

    @Test func anErasedUploadStartsOverOnResend() async throws {
        try await Self.lostUploadStartsOver(expire: false)
    }

    /// spec/attachments.md §6.4, tried as a thief would: the database files taken once a file is
    /// saved and acknowledged (the recipient's) or its blob erased (the sender's, after a flush
    /// learns it) hold the file's key nowhere, raw or in base64url; the messages still show the
    /// file's name, type, size and preview.
    @Test func theStoresForgetAFileKeyOnceTheFileIsDoneWith() async throws {
        try await Self.withBlobRelay { relay in
            let alice = try relay.client("alice")
            let bob = try relay.client("bob", attachments: AttachmentPolicy(downloadAutomaticallyBelow: .max))
            try await alice.signIn()
            try await bob.signIn()
            let bytes = randomBytes(1_500_000)
            let preview = try FilePreview(mediaType: "image/png", data: randomBytes(300))
            let file = OutgoingFile(url: try Self.file(bytes, in: relay, named: "scan.pdf"), mediaType: "application/pdf", preview: preview)
            let transfer = try await alice.send(file: file, to: "bob")
            #expect(try await transfer.outcome() == .sent(id: transfer.messageID))
            let received = try #require(try await bob.receive().first)
            let key = try #require(received.message.payload.files?.first?.key)
            guard case .saved = received.attachments.first?.state else { Issue.record("not saved"); return }

            #expect(!(try Self.storeHolds(key, relay.folder + "/bob")), "saved and acknowledged: the recipient keeps no key")
            let shown = try #require(try await bob.history().first { $0.id == received.id }?.attachments.first)
            #expect(shown.name == "scan.pdf" && shown.mediaType == "application/pdf" && shown.plainSize == Int64(bytes.count) && shown.preview == preview)
            #expect(try Self.storeHolds(key, relay.folder + "/alice"), "the sender has not learnt of the erasure yet")
            _ = try await alice.flush()
            #expect(!(try Self.storeHolds(key, relay.folder + "/alice")), "the blob erased: the sender keeps no key")
            #expect(try await alice.outgoing().first { $0.id == transfer.messageID }?.state == .sent)
        }
    }

    @Test func aBlobThatIsNotWhatWasSealedIsCorruptAndNotAcknowledged() async throws {
        try await Self.withBlobRelay { relay in
            let alice = try relay.client("alice"), bob = try relay.client("bob")
            try await alice.signIn()
            try await bob.signIn()
            // A blob holding one ciphertext, referenced with the digest of another.
            let (ciphertext, sealed) = try FileCipher.seal(randomBytes(100_000))
            let other = try FileCipher.seal(randomBytes(100_000), key: sealed.key).file
            let blob = try await Self.upload(ciphertext, as: "alice", to: ["bob"], in: relay)
            let reference = try FileReference(blob: blob, sealed: SealedFile(key: sealed.key, digest: other.digest, size: sealed.size,
                                                                            plainSize: sealed.plainSize), mediaType: "application/pdf", name: "doc.pdf")
            try await alice.send(Payload(files: [reference]), type: .file, to: "bob")

            let received = try #require(try await bob.receive().first)
            #expect(received.attachments.first?.state == .corrupt("file_digest_mismatch"))
            #expect(try FileManager.default.contentsOfDirectory(atPath: relay.folder + "/bob/files").isEmpty, "nothing saved, no temporary left")
            // Not acknowledged: the relay still counts bob as a recipient.
            let record = try await relay.call("GET", "/v1/blobs/\(blob)", session: try await relay.signIn("alice").session).decoded(BlobRecord.self)
            #expect(record.recipients == ["bob"])
            #expect(try await bob.attachments(of: received.id).first?.state == .corrupt("file_digest_mismatch"), "kept as corrupt")
        }
    }

    @Test func aBlobTheRelayNoLongerHasShowsAsGone() async throws {
        try await Self.withBlobRelay { relay in
            let alice = try relay.client("alice")
            let bob = try relay.client("bob", attachments: AttachmentPolicy(downloadAutomaticallyBelow: 0))
            try await alice.signIn()
            try await bob.signIn()
            let transfer = try await alice.send(file: OutgoingFile(url: try Self.file(randomBytes(200_000), in: relay, named: "a.bin")), to: "bob")
            #expect(try await transfer.outcome() == .sent(id: transfer.messageID))

            let received = try #require(try await bob.receive().first)
            let attachment = try #require(received.attachments.first)
            #expect(attachment.state == .available(reason: nil), "over the policy's size: waits to be asked for")
            let reference = try #require(received.message.payload.files?.first)
            #expect(try Self.storeHolds(reference.key, relay.folder + "/bob"), "not downloaded yet: the key is needed")
            // Its author deletes it before bob asks.
            #expect(try await relay.call("DELETE", "/v1/blobs/\(reference.blob)", session: try await relay.signIn("alice").session).status == 204)
            #expect(try await bob.download(attachment.id).state == .gone)
            #expect(try await bob.attachments(of: received.id).first?.state == .gone)
            // Gone, the key is of no use: the recipient's store forgets it, and keeps the rest.
            #expect(!(try Self.storeHolds(reference.key, relay.folder + "/bob")), "gone: the key is forgotten")
            #expect(try await bob.attachments(of: received.id).first?.name == "a.bin")
        }
    }

    @Test func anInterruptedDownloadResumesFromWhatItHas() async throws {
        try await Self.withBlobRelay { relay in
            let prefix: Int64 = 2 << 20
            let (sent, size) = try await Self.resumedDownload(named: "v.bin", in: relay) { spool, reference in
                // What an interrupted download leaves: the first 2 MiB of the ciphertext.
                let head = try await relay.call("GET", "/v1/blobs/\(reference.blob)/content", session: try await relay.signIn("bob").session,
                                                headers: ["Range": "bytes=0-\(prefix - 1)"])
                #expect(head.status == 206)
                try head.body.write(to: spool)
            }
            #expect(sent == Double(size - prefix), "only the rest was fetched")
        }
    }

    /// The spool of a download is hashed as it is written and not synced: a prefix that a crash
    /// damaged is caught by the digest (the prefix is hashed again on resume), and the blob is
    /// fetched again whole, once, rather than judged corrupt.
    @Test func aDamagedPrefixIsFetchedAgainAndTheFileStillVerified() async throws {
        try await Self.withBlobRelay { relay in
            let prefix = 1 << 20
            let (sent, size) = try await Self.resumedDownload(named: "d.bin", in: relay) { spool, _ in
                try Data(randomBytes(prefix)).write(to: spool)
            }
            #expect(sent == Double(2 * size - Int64(prefix)), "the rest, then the whole blob again")
        }
    }

    /// Alice sends bob a 3 MiB file `name`, which bob receives without downloading it; `leave`
    /// writes what an interrupted download left (the `.part` spool in bob's folder); then bob
    /// downloads it, and the file must be saved whole and alone. Returns the blob bytes the relay
    /// sent for that download and the blob's size.
    static func resumedDownload(named name: String, in relay: TestRelay,
                                leaving leave: (_ spool: URL, _ reference: FileReference) async throws -> Void) async throws -> (sent: Double, size: Int64) {
        let alice = try relay.client("alice")
        let saved = URL(fileURLWithPath: relay.folder + "/saved")
        let bob = try relay.client("bob", attachments: AttachmentPolicy(directory: saved, downloadAutomaticallyBelow: 0))
        try await alice.signIn()
        try await bob.signIn()
        let bytes = randomBytes(3 * (1 << 20))
        let transfer = try await alice.send(file: OutgoingFile(url: try Self.file(bytes, in: relay, named: name)), to: "bob")
        #expect(try await transfer.outcome() == .sent(id: transfer.messageID))
        let received = try #require(try await bob.receive().first)
        let reference = try #require(received.message.payload.files?.first)
        try FileManager.default.createDirectory(at: saved, withIntermediateDirectories: true)
        try await leave(saved.appendingPathComponent(".mailslot-\(reference.blob).part"), reference)
        let sentBefore = relay.counter("mailslot_blob_bytes_sent_total")

        let attachment = try await bob.download(try #require(received.attachments.first).id)
        guard case .saved(let path) = attachment.state else { throw FailedDownload(state: "\(attachment.state)") }
        #expect(FileManager.default.contents(atPath: path.path) == Data(bytes))
        #expect(try FileManager.default.contentsOfDirectory(atPath: saved.path) == [name])
        return (relay.counter("mailslot_blob_bytes_sent_total") - sentBefore, reference.size)
    }

    /// A download that ended in another state than saved.
    struct FailedDownload: Error, CustomStringConvertible {
        let state: String
        var description: String { "not saved: \(state)" }
    }

    @Test func theLiveStreamSavesFilesBeforeItShowsTheirMessage() async throws {
        try await Self.withBlobRelay { relay in
            let alice = try relay.client("alice")
            let bob = try relay.client("bob", attachments: AttachmentPolicy(downloadAutomaticallyBelow: 1 << 20))
            try await alice.signIn()
            try await bob.signIn()
            let small = randomBytes(300_000), large = randomBytes(1 << 20)
            var iterator = bob.messages().makeAsyncIterator()
            for (bytes, name) in [(small, "small.bin"), (large, "large.bin")] {
                let transfer = try await alice.send(file: OutgoingFile(url: try Self.file(bytes, in: relay, named: name)), to: "bob")
                #expect(try await transfer.outcome() == .sent(id: transfer.messageID))
            }
            let first = try #require(try await iterator.next()?.attachments.first)
            guard case .saved(let path) = first.state else { Issue.record("not saved: \(first.state)"); return }
            #expect(path.path == relay.folder + "/bob/files/small.bin" && FileManager.default.contents(atPath: path.path) == Data(small))
            #expect(try FileManager.default.attributesOfItem(atPath: relay.folder + "/bob/files")[.posixPermissions] as? Int == 0o700)
            let second = try #require(try await iterator.next())
            #expect(second.attachments.first?.state == .available(reason: nil), "at the policy's size: left for the app to ask")
            #expect(try await bob.history().last?.attachments == second.attachments, "history shows where files stand")
            guard case .saved(let later) = try await bob.download(try #require(second.attachments.first).id).state else {
                Issue.record("not saved"); return
            }
            #expect(FileManager.default.contents(atPath: later.path) == Data(large))
        }
    }

    @Test func savedNamesStayInTheFolderAndNeverReplaceAFile() async throws {
        #expect(SafeFileName.make("../../etc/passwd", mediaType: "text/plain", fallback: "f") == "passwd")
        #expect(SafeFileName.make("..", mediaType: "image/png", fallback: "f") == "f.png")
        #expect(SafeFileName.make(".bashrc", mediaType: "text/plain", fallback: "f") == "bashrc")
        #expect(SafeFileName.make("a\u{0}b\nc\u{202E}d.txt", mediaType: "text/plain", fallback: "f") == "abcd.txt")
        #expect(SafeFileName.make("C:\\x\\y.doc", mediaType: "text/plain", fallback: "f") == "y.doc")
        #expect(SafeFileName.make(nil, mediaType: "video/mp4", fallback: "file-abc") == "file-abc.mp4")
        #expect(SafeFileName.make(String(repeating: "é", count: 300), mediaType: "text/plain", fallback: "f").utf8.count <= 255)
        #expect(SafeFileName.candidate("clip.mp4", attempt: 2) == "clip (2).mp4")
        #expect(SafeFileName.candidate("README", attempt: 1) == "README (1)")

        try await Self.withBlobRelay { relay in
            let alice = try relay.client("alice")
            let saved = URL(fileURLWithPath: relay.folder + "/saved")
            let bob = try relay.client("bob", attachments: AttachmentPolicy(directory: saved, downloadAutomaticallyBelow: .max))
            try await alice.signIn()
            try await bob.signIn()
            try FileManager.default.createDirectory(at: saved, withIntermediateDirectories: true)
            try Data("mine".utf8).write(to: saved.appendingPathComponent("x"))
            let bytes = randomBytes(70_000)
            let source = try Self.file(bytes, in: relay, named: "x")
            for _ in 0..<2 {
                let transfer = try await alice.send(file: OutgoingFile(url: source, name: "../../x"), to: "bob")
                #expect(try await transfer.outcome() == .sent(id: transfer.messageID))
            }
            let paths = try await bob.receive().compactMap { message -> String? in
                if case .saved(let url) = message.attachments.first?.state { return url.path }
                return nil
            }
            #expect(paths == [saved.path + "/x (1)", saved.path + "/x (2)"])
            #expect(FileManager.default.contents(atPath: saved.path + "/x") == Data("mine".utf8), "never overwritten")
            #expect(FileManager.default.contents(atPath: saved.path + "/x (2)") == Data(bytes))
        }
    }

    // MARK: Helpers

    /// Whether the client database files in `folder` (the database, its WAL and shared memory,
    /// read as raw bytes, as a thief would take them) hold `key`, raw or in base64url.
    static func storeHolds(_ key: FileKey, _ folder: String) throws -> Bool {
        let raw = key.bytes.withUnsafeBytes { Array($0) }
        let needles = [raw, Array(Base64URL.encode(raw).utf8)]
        for suffix in ["", "-wal", "-shm"] {
            guard let data = FileManager.default.contents(atPath: folder + "/client.sqlite" + suffix) else { continue }
            let bytes = Array(data)
            for needle in needles where bytes.count >= needle.count {
                for start in 0...(bytes.count - needle.count) where bytes[start] == needle[0] && Array(bytes[start..<start + needle.count]) == needle {
                    return true
                }
            }
        }
        return false
    }

    /// Writes `bytes` to a new file in the test's folder.
    static func file(_ bytes: [UInt8], in relay: TestRelay, named name: String) throws -> URL {
        let folder = URL(fileURLWithPath: relay.folder + "/sources-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let url = folder.appendingPathComponent(name)
        try Data(bytes).write(to: url)
        return url
    }

    /// Uploads `ciphertext` as a new blob of `author` for `recipients`, over plain HTTP; its id.
    static func upload(_ ciphertext: [UInt8], as author: String, to recipients: [String], in relay: TestRelay) async throws -> String {
        let session = try await relay.signIn(author).session
        let id = BlobLayout.newID()
        let created = try await relay.call("POST", "/v1/blobs", session: session,
                                           json: BlobCreateRequest(id: id, size: Int64(ciphertext.count), recipients: recipients))
        let record = try created.decoded(BlobRecord.self)
        let layout = try #require(BlobLayout(size: record.size, partSize: record.partSize))
        for number in 1...layout.parts {
            let range = try #require(layout.range(ofPart: number))
            let part = Array(ciphertext[Int(range.lowerBound)..<Int(range.upperBound)])
            let answer = try await relay.call("PUT", "/v1/blobs/\(id)/parts/\(number)", session: session, body: Data(part),
                                              headers: ["Content-Type": "application/octet-stream", BlobLayout.digestHeader: Base64URL.encode(blake2b(part))])
            try #require(answer.status == 200, "\(answer.summary)")
        }
        return id
    }
}
