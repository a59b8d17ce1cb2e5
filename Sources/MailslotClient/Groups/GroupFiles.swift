import Foundation
import MailslotWire

// Files to a group (docs/design/groups.md §5; spec/groups.md §4.3): ONE blob per file, whose
// recipients are the group's members but the sender, uploaded once; then the `file` message
// carrying its reference (and key) goes through the group send to every member, each copy in its
// pairwise session. The upload is the 1:1 one (Attachments/FileSending.swift), stored in
// `uploads` with `group_id` and resumed by `flush` the same way; only who the blob is for and how
// the message goes differ. A member removed between the upload and the message stays a blob
// recipient but gets no copy, hence no key: the blob is opaque to it and expires for it. A
// member added after the upload is not a recipient: no history. Each recipient acknowledges the
// blob once saved; the last acknowledgement erases it.
extension MailslotClient {
    /// Sends `file` to every member of `group`: one upload, one blob for all of them, and one
    /// `file` message with its reference sealed to each member (``send(_:type:toGroup:name:)``).
    ///
    /// Unlike ``send(file:caption:to:name:)``, a small picture is not sent inline: inside the
    /// message it would be stored once per member on the relay, as a blob it is stored once.
    ///
    /// ```swift
    /// let send = try await client.send(file: OutgoingFile(url: photos, mediaType: "application/zip"), toGroup: trip.id)
    /// print(try await send.outcome())                          // .sent(id:) once every copy is stored
    /// let copies = try await client.copies(of: send.messageID) // each member's copy
    /// ```
    ///
    /// - Returns: The running send. Its ``FileSend/outcome()`` sums up the copies: `sent` when
    ///   every copy was stored (copies to members removed meanwhile are dropped), else `queued`
    ///   while one waits for the relay, else `held` (a member's identity key changed: the copy
    ///   goes once trusted), else `refused`; ``copies(of:)`` has each member's copy. A send cut
    ///   off goes on at ``flush()``, like a 1:1 file.
    /// - Throws: Before anything is stored: ``ClientError/unknownGroup(_:)``,
    ///   ``ClientError/notGroupMember(_:)``, ``ClientError/unreadableFile(path:)``,
    ///   ``ClientError/cannotSeal(code:)``, ``ClientError/relay(problem:)`` (`blob_too_large`,
    ///   or more recipients than the relay's `--max-blob-recipients`).
    public func send(file: OutgoingFile, caption: String? = nil, toGroup group: GroupID, name senderName: String? = nil) async throws -> FileSend {
        let me = try await identity()
        let state = try await memberState(group, me: me.uid)
        guard state.members.contains(where: { $0 != me.uid }) else { throw ClientError.groupChangeNotAllowed(reason: "the group has no other member") }
        let (label, plainSize, size) = try checkedFile(file)
        return try await startUpload(file, label: label, plainSize: plainSize, size: size, caption: caption, to: "", group: group,
                                     senderName: senderName)
    }

    /// The blob's recipients: `upload`'s recipient, or its group's members but this user as
    /// folded now (the members when the file is sealed).
    func blobRecipients(of upload: ClientStore.Upload) async throws -> [String] {
        guard let group = upload.groupID.flatMap(GroupID.init(rawValue:)) else { return [upload.recipient] }
        let me = try await identity()
        return try await groupFileState(group, me: me.uid).members.filter { $0 != me.uid }
    }

    /// `group`'s state for a file send; ``FileSendFailure/leftGroup`` when this user is out of
    /// it, which ends the send (its blob erased).
    func groupFileState(_ group: GroupID, me: String) async throws -> GroupState {
        do { return try await memberState(group, me: me) } catch ClientError.notGroupMember, ClientError.unknownGroup { throw FileSendFailure.leftGroup }
    }

    /// The blob of a group file is complete: its message goes to every member through the group
    /// send (under the upload's message id, naming the group's state now), and the upload rows
    /// go. A send whose copies are stored already (a crash after it) only delivers them.
    func finishGroupFile(_ upload: ClientStore.Upload, message: ChatMessage, group: GroupID) async throws -> SendOutcome {
        let me = try await identity()
        let outcome: GroupSendOutcome
        if try await store.hasCopies(upload.messageID) {
            outcome = try await deliverCopies(of: upload.messageID)
        } else {
            let state = try await groupFileState(group, me: me.uid)
            let current = ChatMessage(type: message.type, sender: message.sender, payload: message.payload, timestamp: message.timestamp,
                                      group: GroupReference(state))
            outcome = try await fanOut(current, to: state.members, group: group, id: upload.messageID, as: me)
        }
        try await store.closeGroupUpload(upload.messageID)
        return outcome.summary
    }
}

extension GroupSendOutcome {
    /// The copies summed up as one outcome, as ``OutgoingMessage/state`` sums them: queued while
    /// one is queued, else held while one is held, else sent when one was stored (or none is
    /// left), else refused.
    var summary: MailslotClient.SendOutcome {
        let outcomes = copies.sorted { $0.key < $1.key }.map(\.value)
        if let queued = outcomes.first(where: { if case .queued = $0 { true } else { false } }) { return queued }
        if let held = outcomes.first(where: { if case .held = $0 { true } else { false } }) { return held }
        if outcomes.isEmpty || outcomes.contains(where: { if case .sent = $0 { true } else { false } }) { return .sent(id: messageID) }
        return outcomes.first ?? .sent(id: messageID)
    }
}
