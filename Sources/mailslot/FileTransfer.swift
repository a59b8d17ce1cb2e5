import Foundation
import MailslotClient
import MailslotWire
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// `mailslot send --file`: any file the relay takes, as a blob (a small picture inline), with a
// progress bar on a terminal (as `receive`/`listen --save-to` have for the files they download);
// interrupted (Ctrl-C, SIGTERM, the relay gone), it stays in the
// outbox and `mailslot flush` finishes it without starting over.
extension Send {
    /// Media types by extension, for `--file` without `--media-type`.
    static let mediaTypes = imageTypes.merging([
        "mp4": "video/mp4", "mov": "video/quicktime", "webm": "video/webm", "mp3": "audio/mpeg", "m4a": "audio/mp4", "ogg": "audio/ogg",
        "aac": "audio/aac", "wav": "audio/wav", "heic": "image/heic", "pdf": "application/pdf", "zip": "application/zip",
        "txt": "text/plain", "json": "application/json", "csv": "text/csv",
    ]) { old, _ in old }

    /// Sends `path` with `caption`; prints the message id, or exits 75 (queued) or 65 (refused).
    func sendFile(_ path: String, caption: String?, mediaType: String?, to uid: String) async throws {
        let url = URL(fileURLWithPath: path)
        let type = mediaType ?? Self.mediaTypes[url.pathExtension.lowercased()] ?? "application/octet-stream"
        let client = try Profile(options).client()
        let output = Output(json: options.json)
        let transfer: FileSend
        do {
            transfer = try await client.send(file: OutgoingFile(url: url, mediaType: type), caption: caption, to: uid)
        } catch ClientError.keyChanged(let recipient) where recipient == uid {
            try output.held(try await client.outgoing().last { $0.recipient == uid && $0.state == .held }?.id, to: uid)
        }
        let bar = isatty(STDERR_FILENO) != 0 && !options.json ? ProgressBar(label: url.lastPathComponent) : nil
        let watcher = Task {
            for await progress in transfer.progress { bar?.show(progress) }
            bar?.finish()
        }
        // Ctrl-C or SIGTERM stop the upload before its next part: the send stays in the outbox,
        // and `flush` sends only what the relay does not have. The part in flight gets two
        // seconds; then the process ends all the same (75), as a kill would leave it.
        let json = options.json, id = transfer.messageID, recipient = uid
        let interrupt = Interrupts {
            transfer.cancel()
            DispatchQueue.global().asyncAfter(deadline: .now() + 2) {
                Output(json: json).emit(["id": id, "to": recipient, "state": "queued", "reason": "interrupted"], text: id)
                FileHandle.standardError.write(Data("\nmailslot: queued: `mailslot flush` finishes it (interrupted)\n".utf8))
                Glibc.exit(75)
            }
        }
        defer { interrupt.stop() }
        let outcome: MailslotClient.SendOutcome
        do { outcome = try await transfer.outcome() } catch ClientError.keyChanged(let recipient) where recipient == uid {
            await watcher.value
            try output.held(transfer.messageID, to: uid)
        }
        await watcher.value
        if case .queued = outcome {
            try output.outcome(outcome, to: uid, queuedMessage: "queued: `mailslot flush` finishes it")
        } else {
            try output.outcome(outcome, to: uid)
        }
    }
}

extension SaveOptions {
    /// The policy for these options; on a terminal (stderr) and without `--json`, each file
    /// downloaded as it arrives gets a progress bar like `send --file`'s (``DownloadBars``).
    func policy(json: Bool) throws -> AttachmentPolicy {
        var policy = try policy()
        if isatty(STDERR_FILENO) != 0 && !json {
            let bars = DownloadBars()
            policy.progress = { attachment, progress in bars.show(attachment, progress) }
        }
        return policy
    }
}

/// The progress bars of the files `receive` and `listen` download, one at a time (downloads run
/// one after the other): `clip.mp4  downloading  37%  …`, then `decrypting`, a line per file.
final class DownloadBars: Sendable {
    private let current = Mutex<(id: AttachmentID, bar: ProgressBar)?>(nil)

    init() {}

    func show(_ attachment: ReceivedAttachment, _ progress: TransferProgress) {
        let bar = current.withLock { current -> ProgressBar in
            if let current, current.id == attachment.id { return current.bar }
            current?.bar.finish()  // one that stopped early (failed, or left for later)
            let bar = ProgressBar(label: Self.label(attachment.name ?? attachment.mediaType))
            current = (attachment.id, bar)
            return bar
        }
        bar.show(progress)
        if progress.stage == .decrypting, progress.bytes == progress.total {
            let ended = current.withLock { current -> Bool in
                guard current?.id == attachment.id else { return false }
                current = nil
                return true
            }
            if ended { bar.finish() }
        }
    }

    /// The sender's file name made fit for a terminal line: no control or format characters
    /// (which could move the cursor or reorder the line), at most 40 characters.
    static func label(_ name: String) -> String {
        let kept = name.unicodeScalars.filter { !CharacterSet.controlCharacters.contains($0) }
        let label = String(String.UnicodeScalarView(kept))
        return label.count > 40 ? String(label.prefix(39)) + "…" : label
    }
}

/// A one-line progress bar on stderr (`clip.mp4  uploading  37%  24.1/64.0 MiB  180 MB/s`),
/// redrawn at most ten times a second.
final class ProgressBar: Sendable {
    private let label: String
    private let state = Mutex<(drawn: Double, started: Double, stage: String)>((0, 0, ""))

    init(label: String) { self.label = label }

    func show(_ progress: TransferProgress) {
        let now = Date().timeIntervalSince1970
        let line: String? = state.withLock { state in
            if state.stage != progress.stage.rawValue { state = (0, now, progress.stage.rawValue) }
            guard now - state.drawn >= 0.1 || progress.bytes == progress.total else { return nil }
            state.drawn = now
            let percent = progress.total > 0 ? Int(progress.bytes * 100 / progress.total) : 100
            let mib = 1024.0 * 1024.0
            let rate = Double(progress.bytes) / max(now - state.started, 0.001) / 1_000_000
            return String(format: "\r%@  %@  %3d%%  %.1f/%.1f MiB  %.0f MB/s\u{1B}[K", label, progress.stage.rawValue, percent,
                          Double(progress.bytes) / mib, Double(progress.total) / mib, rate)
        }
        if let line { FileHandle.standardError.write(Data(line.utf8)) }
    }

    func finish() { FileHandle.standardError.write(Data("\n".utf8)) }
}

/// Runs `handler` on SIGINT or SIGTERM until stopped (the default actions then come back).
final class Interrupts {
    private let sources: [any DispatchSourceSignal]

    init(_ handler: @escaping @Sendable () -> Void) {
        sources = [SIGINT, SIGTERM].map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler(handler: handler)
            source.resume()
            return source
        }
    }

    func stop() {
        for source in sources { source.cancel() }
        signal(SIGINT, SIG_DFL)
        signal(SIGTERM, SIG_DFL)
    }
}
