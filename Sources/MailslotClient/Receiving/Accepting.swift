import Foundation
import MailslotWire

// Receiving, over HTTP or the live stream: each delivered message is opened, verified and stored
// (or stored as rejected, with why) before it is acknowledged, so the relay erases only what this
// device has kept. A message that does not open because it was sealed to keys this device never
// had (a reinstall, a key older than the longest message lifetime) is not dropped in silence: its
// author is sent an end-to-end `unreadable` receipt, and marks the message undelivered.
extension MailslotClient {
    /// What came of one delivered message.
    struct Accepted: Sendable {
        /// The message to show (stored, or a typing indicator); nil when it was rejected or known.
        var message: ReceivedMessage?
        /// A notice to the author that the message did not open, waiting unreleased in the outbox:
        /// released and sent only after the acknowledgement (``notify(_:)``), so that the author's
        /// resend finds the old copy erased.
        var notice: ClientStore.Queued?
    }

    /// Fetches every waiting message over HTTP, stores each (or records why it was rejected),
    /// then acknowledges it so the relay erases it. Returns the newly stored messages.
    public func receive() async throws -> [ReceivedMessage] {
        let me = try await identity()
        await keepKeysCurrent()
        var received: [ReceivedMessage] = []
        var cursor: String?
        repeat {
            let page = try await authorized { try await api.list(me.uid, after: cursor, session: $0) }
            for record in page.messages {
                let accepted = try await accept(record, as: me)
                if let message = accepted.message { received.append(message) }
                try await authorized { try await api.delete(owner: me.uid, id: record.id, session: $0) }
                if let notice = accepted.notice { await notify(notice) }
            }
            cursor = page.next
        } while cursor != nil
        return received
    }

    /// Opens, verifies and stores one delivered message — or stores why it was rejected — so
    /// that it can be acknowledged. No message when it was rejected or was stored before (a
    /// redelivery); a typing indicator is returned, to be shown, but never stored.
    func accept(_ record: MessageRecord, as me: Identity) async throws -> Accepted {
        if try await store.knows(record.id) { return Accepted() }  // a redelivery after a crash before the ack
        guard let text = record.envelope, let envelope = Base64URL.decode(text) else {
            try await store.storeRejected(id: record.id, author: record.author, reason: "envelope_missing")
            return Accepted()
        }
        let opened: OpenedEnvelope
        do { opened = try await open(envelope, id: record.id, as: me) } catch {
            try await store.storeRejected(id: record.id, author: record.author, reason: error.code)
            guard error == .cannotDecrypt else { return Accepted() }
            // Delivered again (its ack was lost): the notice queued the first time, still waiting.
            if try await store.hasNotice(for: record.id) { return Accepted(notice: try await store.waitingNotice(for: record.id)) }
            return Accepted(notice: try await queueUnreadableNotice(for: record, as: me))
        }
        guard opened.sender == record.author else {
            try await store.storeRejected(id: record.id, author: record.author, reason: "author_mismatch")
            return Accepted()
        }
        let signedByPinnedKey: Bool
        do {
            let sender = try await contact(opened.sender)
            signedByPinnedKey = sender.identityKey == opened.senderKey
            // Signed by another key than the pinned one: check what the relay serves now.
            if !signedByPinnedKey { _ = try? await refreshKeys(of: opened.sender) }
        } catch ClientError.keyChanged {
            signedByPinnedKey = false
        } catch ClientError.noKeys {
            try await store.storeRejected(id: record.id, author: record.author, reason: "sender_has_no_keys")
            return Accepted()
        }
        if let receipt = opened.message.payload.receipt, opened.message.type == .receipt, receipt.kind == .unreadable {
            // Even under a key not trusted yet: the notice only marks messages sent to its own
            // (relay-authenticated) author, and they go out again only to keys the user trusts.
            try await store.markUndelivered(receipt.messageIDs, recipient: opened.sender, reason: "unreadable")
        }
        guard signedByPinnedKey else {
            try await store.storeRejected(id: record.id, author: record.author, reason: ClientError.keyChangedCode)
            return Accepted()
        }
        let message = ReceivedMessage(id: record.id, sender: opened.sender, message: opened.message, body: opened.body)
        if opened.message.type == .typing { return Accepted(message: message) }  // shown, never stored
        try await store.storeReceived(message)
        return Accepted(message: message)
    }

    /// Opens with this device's mailbox keys, current and previous; when none fits, once more with
    /// the keys as stored now, in case they were rotated since `me` was read.
    private func open(_ envelope: [UInt8], id: String, as me: Identity) async throws(EnvelopeError) -> OpenedEnvelope {
        do { return try me.open(envelope, id: id) } catch .cannotDecrypt {
            guard let current = try? await store.identity(), current.mailbox.publicKey != me.mailbox.publicKey else { throw .cannotDecrypt }
            return try current.open(envelope, id: id)
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
            sealed = try seal(notice, id: id, as: me, to: try await contact(record.author))
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
        return sealed.map { ClientStore.Queued(id: id, recipient: record.author, sealed: $0) }
    }

    /// Releases a notice once the message it speaks of was acknowledged, and sends it.
    func notify(_ notice: ClientStore.Queued) async {
        try? await store.release(notice.id)
        _ = await deliver(notice)
    }
}
