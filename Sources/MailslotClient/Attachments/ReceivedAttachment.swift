import Foundation
import MailslotWire

/// Names one attachment of a received message: the message and its place in it (the inline
/// attachments first, in order, then the files sent as blobs).
public struct AttachmentID: Sendable, Hashable, CustomStringConvertible {
    /// The message id.
    public let messageID: String
    /// The attachment's place in the message, from 0.
    public let index: Int

    /// Attachment `index` of message `messageID`.
    public init(messageID: String, index: Int) {
        self.messageID = messageID
        self.index = index
    }

    /// `MESSAGE-ID/INDEX`.
    public var description: String { "\(messageID)/\(index)" }
}

/// A file a received message carries, inline or as a blob, and where it stands on this device.
public struct ReceivedAttachment: Sendable, Equatable, Identifiable {
    /// Where a received file stands.
    public enum State: Sendable, Equatable {
        /// Not saved yet: ``MailslotClient/download(_:into:progress:)`` saves it (an inline one from the
        /// message, a blob from the relay). `reason` says why an automatic download did not
        /// finish (the relay unreachable, …), or is nil when none was tried (over the size the
        /// policy downloads by itself).
        case available(reason: String?)
        /// Verified, decrypted and saved at this path; a blob was then acknowledged to the relay.
        case saved(URL)
        /// The relay no longer has the blob (expired, deleted by its sender, or never completed).
        case gone
        /// The blob failed its checks (the error code of spec/attachments.md: digest, decryption,
        /// length): nothing was saved, and the blob was not acknowledged.
        case corrupt(String)
    }

    /// Which attachment.
    public let id: AttachmentID
    /// Whether it came inside the message (a small picture) rather than as a blob.
    public let isInline: Bool
    /// The media type the sender gave: a label, never trusted.
    public let mediaType: String
    /// The file name the sender gave, as given (saved files get a sanitised name).
    public let name: String?
    /// The file's size in bytes.
    public let plainSize: Int64
    /// The sender's small preview picture, if any.
    public let preview: FilePreview?
    /// Where it stands.
    public let state: State
}

/// Where received files go and which are fetched without being asked
/// (``MailslotClient/init(relay:databasePath:attachments:logger:tokenProvider:)``).
public struct AttachmentPolicy: Sendable, Equatable {
    /// The folder files are saved in (created private to the user, 0700); nil: `files/` beside
    /// the client's database.
    public var directory: URL?
    /// Files smaller than this many bytes (and every inline one) are downloaded and saved as
    /// they arrive; larger ones wait for ``MailslotClient/download(_:into:progress:)``. 0: never; `.max`: always.
    public var downloadAutomaticallyBelow: Int64
    /// Hears of the progress of the files downloaded as they arrive (blobs only: an inline one is
    /// in its message): the attachment, as it stood when its download began, and how far it is
    /// (stages ``TransferProgress/Stage/downloading`` then ``TransferProgress/Stage/decrypting``).
    /// Called off the caller's task; nil: nobody listens. Not part of the policy's equality.
    public var progress: (@Sendable (ReceivedAttachment, TransferProgress) -> Void)?

    /// A policy; by default files under 16 MiB are saved in `files/` beside the database.
    public init(directory: URL? = nil, downloadAutomaticallyBelow: Int64 = 16 * 1024 * 1024,
                progress: (@Sendable (ReceivedAttachment, TransferProgress) -> Void)? = nil) {
        self.directory = directory
        self.downloadAutomaticallyBelow = downloadAutomaticallyBelow
        self.progress = progress
    }

    /// Same folder and size (the progress listener is not compared).
    public static func == (lhs: AttachmentPolicy, rhs: AttachmentPolicy) -> Bool {
        lhs.directory == rhs.directory && lhs.downloadAutomaticallyBelow == rhs.downloadAutomaticallyBelow
    }
}
