import Foundation

/// Why the client itself ended a file send: the `reason` of
/// ``MailslotClient/SendOutcome/refused(id:reason:)`` and the `lastError` of its
/// ``OutgoingMessage`` (state `refused`) are this value's `rawValue`. The relay's refusals keep
/// their problem codes, and a file that could not be sealed its `FileError` code
/// (spec/attachments.md §2.3).
public enum FileSendFailure: String, Error, Sendable, Equatable, CaseIterable {
    /// `file_resealed_part_differs`: a send resumed after a crash sealed the file again with the
    /// stored key and stream header, and a part came out other than the part sealed the first
    /// time (whose digest was stored before it went up): the file changed since, which neither
    /// its size nor its modification time showed. Sending it would put other bytes under the same
    /// keystream (spec/attachments.md §6.1), so nothing of that sealing was sent: the blob is
    /// erased, the key and digests forgotten, and the file must be sent again, which seals it
    /// with a fresh key into a new blob.
    case resealedPartDiffers = "file_resealed_part_differs"
    /// `group_left`: a file sent to a group whose sender is no longer a member of it (removed, or
    /// left) before the message could go: nothing is sent to the group, and the blob is erased
    /// (docs/design/groups.md §5).
    case leftGroup = "group_left"
}
