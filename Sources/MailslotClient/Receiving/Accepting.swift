import Foundation
import MailslotWire

// Receiving, over HTTP or the live stream: each delivered message is opened, verified and stored
// (or stored as rejected, with why) before it is acknowledged, so the relay erases only what this
// device has kept. A message that does not open because it was sealed to keys this device never
// had (a reinstall, a key older than the longest message lifetime) is not dropped in silence: its
// author is sent an end-to-end `unreadable` receipt, and marks the message undelivered — if the
// author is a contact (spec/envelope.md §4.2 item 4): a stranger's garbage draws nothing.

/// ``MailslotClient/receive()`` stopped on a failure after it had stored messages: they are
/// here, to be shown like a normal result, with what stopped it. Every one of them is stored (and
/// in ``MailslotClient/history(from:)``); the ones not acknowledged come again at the next
/// receive, which acknowledges them without returning them again.
public struct ReceiveInterrupted: Error, Sendable, CustomStringConvertible {
    /// The messages stored in this run before the failure, in the order they came.
    public let received: [ReceivedMessage]
    /// What stopped the run: a ``ClientError`` (an acknowledgement refused by the relay, the relay
    /// unreachable) or a local store failure.
    public let failure: any Error

    /// A run that stored `received` and then failed with `failure`.
    public init(received: [ReceivedMessage], failure: any Error) {
        self.received = received
        self.failure = failure
    }

    /// The failure, and how many messages came before it.
    public var description: String { "\(failure) (after \(received.count) messages stored)" }
}

extension MailslotClient {
    /// What came of one delivered message.
    struct Accepted: Sendable {
        /// The message to show (stored, or a typing indicator); nil when it was rejected or known.
        var message: ReceivedMessage?
        /// A notice to the author that the message did not open, waiting unreleased in the outbox:
        /// released and sent only after the acknowledgement (``notify(_:)``), so that the author's
        /// resend finds the old copy erased.
        var notice: ClientStore.Queued?
        /// Group messages held before and shown now that this one moved their group on
        /// (Groups/GroupReceiving.swift): stored, to be returned too.
        var others: [ReceivedMessage] = []
    }

    /// Fetches every waiting message over HTTP, stores each (or records why it was rejected),
    /// then acknowledges it so the relay erases it. Returns the messages the app has not been
    /// given yet: those stored earlier but never handed over (a ``messages(onState:)`` loop that
    /// stopped before handling them, a crash before a `receive` returned), then the new ones.
    /// The messages returned count as handled: an app that must not lose one to a crash while
    /// handling it iterates ``messages(onState:)`` instead, which hands them over one at a time.
    ///
    /// An acknowledgement answered `404` counts as done: the message is gone from the relay
    /// already (unsent, expired, acknowledged by another device). Any other failure stops the
    /// run, and what was stored before it is not lost from the output: when at least one message
    /// was stored, the failure comes as ``ReceiveInterrupted``, which carries them — show them,
    /// then report its ``ReceiveInterrupted/failure``. (With none stored, the failure is thrown
    /// as itself.) A message stored but not acknowledged comes again at the next `receive`: it is
    /// then acknowledged, and not returned a second time.
    ///
    /// ```swift
    /// do {
    ///     for message in try await client.receive() { show(message) }
    /// } catch let interrupted as ReceiveInterrupted {
    ///     interrupted.received.forEach(show)           // stored before the failure
    ///     log(interrupted.failure)
    /// }
    /// ```
    ///
    /// - Returns: The messages not handed to the app before, oldest first.
    /// - Throws: ``ReceiveInterrupted`` when a failure came after at least one message was
    ///   stored; otherwise the failure itself (``ClientError/notSignedIn``,
    ///   ``ClientError/unreachable(reason:)``, ``ClientError/relay(problem:)``, …).
    public func receive() async throws -> [ReceivedMessage] {
        let me = try await identity()
        await keepKeysCurrent()
        // Stored before and never handed over: returned first, in the order they were stored.
        var received: [ReceivedMessage] = try await store.unhandled(limit: Int(Int32.max))
        do {
            var cursor: String?
            repeat {
                let page = try await authorized { try await api.list(me.uid, after: cursor, session: $0) }
                for record in page.messages {
                    let accepted = try await accept(record, as: me)
                    if let message = accepted.message { received.append(message) }
                    received.append(contentsOf: accepted.others)
                    try await acknowledge(record.id, owner: me.uid)
                    if let notice = accepted.notice { await notify(notice) }
                }
                // The relay's cursors move forward (spec/protocol.md §4.9): one that does not
                // would have this loop ask for ever.
                if let next = page.next, let previous = cursor, let nextSeq = Int64(next), let previousSeq = Int64(previous), nextSeq <= previousSeq {
                    throw ClientError.invalidResponse(detail: "the relay's next cursor \(next) does not follow \(previous)")
                }
                cursor = page.next
            } while cursor != nil
        } catch {
            guard received.isEmpty else {
                await eraseOldCopies()
                var withFiles: [ReceivedMessage] = []
                for message in received { withFiles.append(await withAttachments(message)) }
                // Handed over with the failure: handled (a store failure here leaves them to come again).
                try? await store.markHandled(received.map(\.id))
                throw ReceiveInterrupted(received: withFiles, failure: error)
            }
            throw error
        }
        // New messages may have started ratchets, each using up one of the relay's one-time prekeys.
        if !received.isEmpty { await replenishPrekeys() }
        await eraseOldCopies()
        // Acknowledged first, then the files saved as the policy says: a download, however long,
        // never holds a message on the relay.
        var withFiles: [ReceivedMessage] = []
        for message in received { withFiles.append(await withAttachments(message)) }
        try await store.markHandled(received.map(\.id))
        return withFiles
    }

    /// Tells the relay to erase message `id`, stored here. `404` is success: the message is gone
    /// already (unsent by its author, expired, or acknowledged by another device).
    private func acknowledge(_ id: String, owner: String) async throws {
        do {
            try await authorized { try await api.delete(owner: owner, id: id, session: $0) }
        } catch ClientError.relay(let problem) where problem.code == .notFound {
            logger.info("acknowledged a message the relay no longer had", metadata: ["id": "\(id)"])
        }
    }

    /// Opens, verifies and stores one delivered message — or stores why it was rejected — so
    /// that it can be acknowledged. No message when it was rejected or was stored before (a
    /// redelivery); a typing indicator is returned, to be shown, but never stored.
    func accept(_ record: MessageRecord, as me: Identity) async throws -> Accepted {
        if try await store.knows(record.id) { return Accepted() }  // a redelivery after a crash before the ack
        guard let text = record.envelope, let envelope = Base64URL.decode(text) else {
            try await store.storeRejected(id: record.id, author: record.author, reason: .envelopeMissing)
            return Accepted()
        }
        do {
            switch try await unseal(envelope, id: record.id, as: me) {
            case .version1(let opened): return try await acceptVersion1(opened, record, as: me)
            case .version2(let sealed): return try await acceptVersion2(sealed, record, as: me)
            }
        } catch let error as EnvelopeError {
            try await store.storeRejected(id: record.id, author: record.author, reason: RejectedMessage.Reason(code: error.code))
            guard Self.isUnreadable(error) else { return Accepted() }
            // Delivered again (its ack was lost): the notice queued the first time, still waiting.
            if try await store.hasNotice(for: record.id) { return Accepted(notice: try await store.waitingNotice(for: record.id)) }
            // No notice to a stranger (nor over the bounds): before anything is fetched, pinned or
            // claimed for it. Kept as rejected, and acknowledged, all the same.
            guard try await store.mayNotify(record.author, createdAt: record.createdAt) else {
                logger.info("no notice for a message that did not open", metadata: ["id": "\(record.id)", "reason": "not a contact, or bounded"])
                return Accepted()
            }
            return Accepted(notice: try await queueUnreadableNotice(for: record, as: me))
        }
    }

    /// Refusals that mean "this device cannot read it" rather than "it is bad": the author is
    /// told, and sends it again to the current keys in a new ratchet (spec/ratchet.md §6).
    static func isUnreadable(_ error: EnvelopeError) -> Bool {
        ClientStore.unreadableCodes.contains(error.code)
    }

    private func acceptVersion1(_ opened: OpenedEnvelope, _ record: MessageRecord, as me: Identity) async throws -> Accepted {
        guard opened.sender == record.author else { return try await reject(record, .authorMismatch) }
        // Once a contact has written in ratchets, a version 1 envelope from it is a downgrade.
        guard try await !store.usesRatchets(opened.sender) else { return try await reject(record, .downgrade) }
        guard let pinned = try await isPinned(opened.senderKey, of: opened.sender) else { return try await reject(record, .senderHasNoKeys) }
        if let receipt = opened.message.payload.receipt, opened.message.type == .receipt, receipt.kind == .unreadable {
            // Even under a key not trusted yet: the notice only marks messages sent to its own
            // (relay-authenticated) author, and they go out again only to keys the user trusts.
            try await undelivered(receipt.messageIDs, reportedBy: opened.sender, in: nil)
        }
        guard pinned else { return try await reject(record, .keyChanged) }
        let message = ReceivedMessage(id: record.id, sender: opened.sender, message: opened.message, body: opened.body)
        if opened.message.type == .typing { return try await groupTyping(message) }  // shown, never stored
        try await store.storeReceived(message)
        if message.message.group != nil { return try await decideGroup(record.id, as: me) }
        return Accepted(message: message)
    }

    /// A version 2 envelope: the author and the pinned key are checked before the ratchet is
    /// touched, then it opens, advances its ratchet and is stored in one transaction.
    private func acceptVersion2(_ sealed: RatchetEnvelope, _ record: MessageRecord, as me: Identity) async throws -> Accepted {
        guard sealed.sender == record.author else { return try await reject(record, .authorMismatch) }
        // A first contact is pinned (its bundle fetched) only for a message that opens: one that
        // does not throws its envelope error here, and is kept as rejected, with no notice.
        if try await store.contact(sealed.sender) == nil { _ = try await store.openWithoutKeeping(sealed, as: me) }
        guard let pinned = try await isPinned(sealed.senderKey, of: sealed.sender) else { return try await reject(record, .senderHasNoKeys) }
        guard pinned else {
            // Under a key not trusted yet an `unreadable` notice is still read, as in version 1 —
            // it only marks messages sent to its own author — but no ratchet is kept with that key.
            if let notice = try? await store.openWithoutKeeping(sealed, as: me), notice.message.type == .receipt,
               let receipt = notice.message.payload.receipt, receipt.kind == .unreadable {
                try await undelivered(receipt.messageIDs, reportedBy: notice.sender, in: nil)
            }
            return try await reject(record, .keyChanged)
        }
        let opened = try await store.openInRatchet(sealed, as: me)
        if let receipt = opened.message.payload.receipt, opened.message.type == .receipt, receipt.kind == .unreadable {
            try await undelivered(receipt.messageIDs, reportedBy: opened.sender, in: sealed.ratchetID)
        }
        let message = ReceivedMessage(id: record.id, sender: opened.sender, message: opened.message, body: opened.body)
        if opened.message.type == .typing { return try await groupTyping(message) }
        if message.message.group != nil { return try await decideGroup(record.id, as: me) }
        return Accepted(message: message)
    }

    /// A group message just stored held: decided with every other held one; what is shown now.
    private func decideGroup(_ id: String, as me: Identity) async throws -> Accepted {
        let shown = try await decideGroupMessages(as: me)
        return Accepted(message: shown.first { $0.id == id }, others: shown.filter { $0.id != id })
    }

    /// A typing indicator, never stored: in a group, shown only from a member of it as this device knows it.
    private func groupTyping(_ message: ReceivedMessage) async throws -> Accepted {
        guard let reference = message.message.group else { return Accepted(message: message) }
        guard let stored = try await store.group(reference.id.rawValue), stored.status == .member,
              let state = try? GroupState.decode(folded: stored.state), state.isMember(message.sender) else { return Accepted() }
        var shown = message
        shown.group = GroupContext(id: reference.id, name: state.name, version: reference.version)
        return Accepted(message: shown)
    }

    /// The contact could not read these messages: they are marked undelivered, and the next
    /// message to it goes in a ratchet its device holds — the one the notice came in, if it came
    /// in one, or else a new one.
    private func undelivered(_ ids: [String], reportedBy contact: String, in ratchet: [UInt8]?) async throws {
        if try await store.markUndelivered(ids, recipient: contact, reason: "unreadable") > 0 {
            try await store.deactivateRatchets(with: contact, except: ratchet)
        }
    }

    /// Whether `key` is the identity key pinned for `sender` (pinning it on first use); nil when
    /// the sender has no keys at all. Another key has the relay's keys checked again first.
    private func isPinned(_ key: IdentityPublicKey, of sender: String) async throws -> Bool? {
        do {
            let contact = try await contact(sender)
            if contact.identityKey == key { return true }
            _ = try? await refreshKeys(of: sender)
            return false
        } catch ClientError.keyChanged {
            return false
        } catch ClientError.noKeys {
            return nil
        }
    }

    private func reject(_ record: MessageRecord, _ reason: RejectedMessage.Reason) async throws -> Accepted {
        try await store.storeRejected(id: record.id, author: record.author, reason: reason)
        return Accepted()
    }

    /// Opens the outer layer with this device's mailbox keys, current and previous; when none
    /// fits, once more with the keys as stored now, in case they were rotated since `me` was read.
    private func unseal(_ envelope: [UInt8], id: String, as me: Identity) async throws(EnvelopeError) -> UnsealedEnvelope {
        do { return try me.unseal(envelope, id: id) } catch .cannotDecrypt {
            guard let current = try? await store.identity(), current.mailbox.publicKey != me.mailbox.publicKey else { throw .cannotDecrypt }
            return try current.unseal(envelope, id: id)
        }
    }

    /// Seals an `unreadable` receipt for the author of `record` and stores it, unreleased, in the
    /// outbox (held when the author's own key changed). Nil when there is nobody to tell (the
    /// author has no usable keys) or the author has enough notices waiting. Any other failure
    /// (the relay unreachable, busy) is thrown: the message is then not acknowledged, and comes
    /// again, so its author is not left uninformed.
    private func queueUnreadableNotice(for record: MessageRecord, as me: Identity) async throws -> ClientStore.Queued? {
        let notice = ChatMessage(type: .receipt, sender: Sender(id: me.uid),
                                 payload: Payload(receipt: Receipt(kind: .unreadable, messageIDs: [record.id])),
                                 timestamp: Int64(Date().timeIntervalSince1970 * 1000))
        let id = MessageID.generate()
        let sealed: ClientStore.Sealed?
        do {
            sealed = try await seal(notice, id: id, as: me, to: try await contact(record.author))
        } catch ClientError.keyChanged {
            sealed = nil  // held until the user trusts the author's new key
        } catch let error as ClientError {
            switch error {
            case .noKeys, .invalidKeys, .cannotSeal, .invalidUID:
                logger.info("cannot tell the author that a message did not open", metadata: ["id": "\(record.id)", "error": "\(Self.describe(error))"])
                return nil
            default: throw error
            }
        }
        let body = try notice.encoded()
        guard try await store.enqueueNotice(notice, noticeID: id, for: record.id, to: record.author, body: body, sealed: sealed) else {
            return nil
        }
        return sealed.map { ClientStore.Queued(id: id, recipient: record.author, sealed: $0, wake: notice.type.wakes) }
    }

    /// Releases a notice once the message it speaks of was acknowledged, and sends it.
    func notify(_ notice: ClientStore.Queued) async {
        try? await store.release(notice.id)
        _ = await deliver(notice)
    }
}
