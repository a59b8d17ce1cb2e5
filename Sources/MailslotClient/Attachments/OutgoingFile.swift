import Foundation
import MailslotWire
import Synchronization

/// A file to send with ``MailslotClient/send(file:caption:to:name:)``: read from disk in chunks,
/// never whole, so it may be as large as the relay allows.
public struct OutgoingFile: Sendable, Equatable {
    /// The file on disk. It must not change until the send has finished encrypting it.
    public var url: URL
    /// Its media type, e.g. `video/mp4` (a label for the recipient; `application/octet-stream`
    /// when nothing better is known).
    public var mediaType: String
    /// The name the recipient sees (sanitised on their side); nil sends the last path component.
    public var name: String?
    /// A small picture shown before the download (at most `FilePreview.maxBytes`).
    public var preview: FilePreview?

    /// A file to send.
    public init(url: URL, mediaType: String = "application/octet-stream", name: String? = nil, preview: FilePreview? = nil) {
        self.url = url
        self.mediaType = mediaType
        self.name = name
        self.preview = preview
    }
}

/// How far a transfer is: `bytes` of `total` in the current stage.
public struct TransferProgress: Sendable, Equatable {
    /// What is being done.
    public enum Stage: String, Sendable, Equatable {
        /// Reading the file and writing its ciphertext to the outbox spool (totals: the file).
        case encrypting
        /// Sending the ciphertext's parts to the relay (totals: the ciphertext).
        case uploading
        /// Sending the chat message that carries the file's reference.
        case sending
        /// Receiving the ciphertext's parts (totals: the ciphertext).
        case downloading
        /// Decrypting the ciphertext, whose digest was checked as it arrived, to its file (totals:
        /// the ciphertext).
        case decrypting
    }
    /// The stage.
    public let stage: Stage
    /// Bytes done in this stage.
    public let bytes: Int64
    /// Bytes this stage handles in all.
    public let total: Int64
}

/// A file send under way: its message id at once, its progress as it goes, and its outcome.
///
/// The send goes on whether or not anyone reads ``progress``; the stream ends when the outcome
/// is known. Whatever happens to this process, the send is in the outbox: ``MailslotClient/flush()``
/// resumes an upload where the relay's record of received parts says it stopped.
public struct FileSend: Sendable {
    /// The message id (the same on the recipient's side).
    public let messageID: String
    /// Progress reports, at most a few per part; finishes with the outcome.
    public let progress: AsyncStream<TransferProgress>
    let task: Task<MailslotClient.SendOutcome, any Error>
    let stop: StopSignal

    /// What became of the send: ``MailslotClient/SendOutcome/sent(id:)``;
    /// ``MailslotClient/SendOutcome/queued(id:reason:)`` when the relay could not be reached or
    /// asked to wait (the upload stays in the outbox, shown by ``MailslotClient/outgoing()`` as
    /// ``OutgoingMessage/State/uploading`` until ``MailslotClient/flush()`` finishes it);
    /// ``MailslotClient/SendOutcome/refused(id:reason:)`` when it cannot be finished (the file
    /// changed while it was read, the relay lost the upload). Throws
    /// ``ClientError/keyChanged(uid:)`` when the upload is done and the message is held for the
    /// recipient's changed key.
    public func outcome() async throws -> MailslotClient.SendOutcome { try await task.value }

    /// Stops the upload before its next part (the part in flight, at most one, is finished
    /// first): the send stays in the outbox, `queued` with the reason `interrupted`, and
    /// ``MailslotClient/flush()`` finishes it. Cooperative on purpose: cancelling a Swift task
    /// while a URLSession request of it completes can deadlock on Linux (swift-corelibs-foundation).
    public func cancel() { stop.set() }
}

/// A request to stop a transfer between parts: set once, read before each part.
final class StopSignal: Sendable {
    private let flag = Mutex(false)

    init() {}

    /// Asks the transfer to stop.
    func set() { flag.withLock { $0 = true } }

    /// Whether it was asked to stop.
    var isSet: Bool { flag.withLock { $0 } }
}
