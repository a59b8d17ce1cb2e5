import Foundation
import MailslotWire

// Sending through the outbox. Every message is stored before the relay is asked, so nothing is
// lost when it cannot be reached; and every envelope names the recipient keys it was sealed to
// (`key_id`), so a relay whose recipient has published other keys since refuses it
// (`409 stale_keys`, spec/protocol.md) instead of storing a message nobody can open. The client
// then fetches the keys again: a new mailbox key under the same identity is taken and the
// message sealed again under the same id; a new identity key holds the message until the user
// trusts it (``MailslotClient/trust(_:safetyNumber:)``).
extension MailslotClient {
    /// Seals a message for `recipient` under a new time-ordered id, stores it in the outbox, and
    /// tries to deliver it.
    ///
    /// ```swift
    /// switch try await client.send(text: "hello", to: "bob") {
    /// case .sent, .queued: break                      // delivered, or `flush()` delivers it later
    /// case .held(_, let recipient): askToCompareSafetyNumbers(with: recipient)
    /// case .refused(_, let reason): show("refused: \(reason)")
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - payload: What the message carries (text, receipt, location, …).
    ///   - type: The message type (spec/envelope.md §3).
    ///   - recipient: The recipient's uid.
    ///   - name: A display name for the sender, sent inside the message.
    /// - Returns: What happened: ``SendOutcome/sent(id:)``; ``SendOutcome/queued(id:reason:)``
    ///   when the relay could not be reached or asked to wait; ``SendOutcome/held(id:recipient:)``
    ///   when the recipient's identity key changed (stored unsealed; sent when the user trusts
    ///   the new key); ``SendOutcome/refused(id:reason:)`` when the relay refused it for good.
    /// - Throws: Only when nothing was stored: ``ClientError/invalidUID(text:)``,
    ///   ``ClientError/notSignedIn``, ``ClientError/cannotSeal(code:)``, ``ClientError/noKeys(uid:)``
    ///   (the recipient has no keys), or the relay's refusal to serve the recipient's keys.
    @discardableResult
    public func send(_ payload: Payload, type: MessageType = .text, to recipient: String, name: String? = nil) async throws -> SendOutcome {
        try await send(payload, type: type, to: recipient, name: name, wake: nil)
    }

    /// ``send(_:type:to:name:)``, saying whether the message may wake the recipient's devices
    /// through their push registrations (spec/push.md §3). Typing indicators and receipts never
    /// wake anyone (`MessageType.wakes`); `wake: false` keeps any other message from waking them
    /// too — it is stored and delivered as usual, to a device that connects by itself. An
    /// identical retry keeps what the first try said.
    ///
    /// ```swift
    /// try await client.send(Payload(text: "synced"), to: "bob", wake: false)   // not worth a wake-up
    /// ```
    ///
    /// - Parameters:
    ///   - payload: What the message carries.
    ///   - type: The message type (spec/envelope.md §3).
    ///   - recipient: The recipient's uid.
    ///   - name: A display name for the sender, sent inside the message.
    ///   - wake: False: no wake-up for this message. True or nil: as its type says.
    /// - Returns: What happened, as ``send(_:type:to:name:)``.
    /// - Throws: As ``send(_:type:to:name:)``.
    @discardableResult
    public func send(_ payload: Payload, type: MessageType = .text, to recipient: String, name: String? = nil,
                     wake: Bool?) async throws -> SendOutcome {
        guard Identifier.isValidUID(recipient) else { throw ClientError.invalidUID(text: recipient) }
        let me = try await identity()
        let message = ChatMessage(type: type, sender: Sender(id: me.uid, name: name), payload: payload,
                                  timestamp: Int64(Date().timeIntervalSince1970 * 1000))
        let id = MessageID.generate()
        switch try await enqueue(message, id: id, to: recipient, as: me, wake: wake == false ? false : nil) {
        case .queued(let queued): return try await outcome(of: deliver(queued))
        case .held: return .held(id: id, recipient: recipient)
        }
    }

    /// Sends a plain text message: ``send(_:type:to:name:)`` with a text payload.
    ///
    /// ```swift
    /// let outcome = try await client.send(text: "on my way", to: "bob")
    /// ```
    ///
    /// - Parameters:
    ///   - text: The message text.
    ///   - recipient: The recipient's uid.
    /// - Returns: What happened to the message (``SendOutcome``); it is stored in the outbox
    ///   whatever the outcome.
    /// - Throws: Only when nothing was stored, as ``send(_:type:to:name:)``.
    @discardableResult
    public func send(text: String, to recipient: String) async throws -> SendOutcome {
        try await send(Payload(text: text), to: recipient)
    }

    /// Retries every queued message that is due; returns how many are still queued.
    ///
    /// Unfinished file sends are resumed first (each sends only the parts the relay does not
    /// have); then attachments whose download was interrupted are fetched again, and blobs saved
    /// but not yet acknowledged are acknowledged. File sends still uploading count as queued.
    @discardableResult
    public func flush() async throws -> Int {
        try await flush(now: Date())
    }

    /// ``flush()`` as if it were `now`: a later time makes every queued message due (the CLI's
    /// `flush` sends at once whatever the backoff), an earlier one none.
    package func flush(now: Date) async throws -> Int {
        await keepKeysCurrent()
        await resumeUploads()
        for queued in try await store.due(now: now.timeIntervalSince1970) {
            _ = await deliver(queued)
        }
        await flushGroupCopies(now: now)
        await resumeDownloads()
        return try await store.outgoing().filter { $0.state == .queued || $0.state == .uploading }.count
    }

    /// Sent and queued messages, oldest first, each with where it stands.
    public func outgoing() async throws -> [OutgoingMessage] { try await store.outgoing() }

    /// Sends message `id` again, under the same id, sealed to the recipient's current keys: one
    /// the recipient could not open (``OutgoingMessage/State/undelivered``), one held for a key
    /// change, or one refused because the recipient had no keys at the time. Returns
    /// ``SendOutcome/held(id:recipient:)`` while the recipient's new key is not trusted. A file
    /// send still uploading is resumed now (started over, with a new blob and key, if the relay
    /// lost its upload).
    /// - Throws: ``ClientError/notResendable(id:)`` when message `id` is not one of those.
    @discardableResult
    public func resend(_ id: String) async throws -> SendOutcome {
        if let upload = try await store.upload(id) {
            // A file send still uploading: resumed now, or started over if the relay lost it
            // (Attachments/FileSending.swift).
            return try await runUpload(upload, progress: ProgressSink(nil), stop: StopSignal())
        }
        // Not a queued one: its envelope may be stored already (an answer lost), and another
        // envelope under its id would be refused as a conflict. `flush` retries those.
        guard let stored = try await store.outgoingBody(id),
              stored.state == .undelivered || stored.state == .held
                || (stored.state == .refused && stored.lastError == ProblemCode.staleKeys.rawValue),
              resealing.insert(id).inserted else {
            throw ClientError.notResendable(id: id)
        }
        defer { resealing.remove(id) }
        let contact: Contact
        do { contact = try await self.contact(stored.recipient) } catch ClientError.keyChanged {
            return .held(id: id, recipient: stored.recipient)
        }
        let sealed = try await seal(try decodeStored(stored.body), id: id, as: try await identity(), to: contact)
        if stored.state == .undelivered {
            // The copy that did not open may still wait on the relay (its recipient has not
            // acknowledged it yet): taken back first, as its author may, or the new envelope under
            // its id would be a conflict. Refused (403) when it is gone already.
            _ = try? await authorized { try await api.delete(owner: stored.recipient, id: id, session: $0) }
        }
        try await store.requeue(id, sealed: sealed)
        await eraseOldCopies()
        let queued = ClientStore.Queued(id: id, recipient: stored.recipient, sealed: sealed, wake: try await store.wakes(id), resealed: true)
        return try outcome(of: await deliver(queued, sealing: true))
    }

    /// Publishes this device's keys if the relay may not have them (a mailbox key rotation whose
    /// publication failed, a signed prekey due for replacement), and erases previous mailbox keys
    /// past their lifetime. Best effort: called before each receive and flush, it must not stop them.
    func keepKeysCurrent() async {
        do {
            if try await store.erasePreviousKeys() > 0 { try await store.checkpoint() }
            let now = Date().timeIntervalSince1970
            if now - lastSkippedKeyPrune >= 3600 {  // ratchets that receive nothing keep no key past its lifetime
                lastSkippedKeyPrune = now
                if try await store.dropExpiredSkippedKeys(now: now) > 0 { try await store.checkpoint() }
            }
            guard let me = try await store.identity() else { return }
            let bundle = try await currentBundle(of: me)  // replaces a signed prekey that is due
            guard try await !store.isPublished(me) else { return }
            try await authorized { try await api.putKeys(bundle, session: $0) }
            try await store.markPublished(me)
        } catch {
            logger.info("could not bring the published keys up to date", metadata: ["error": "\(Self.describe(error))"])
        }
    }

    /// Truncates the WAL after ratchet writes, so that the ratchet states they replaced and the
    /// prekey secrets they erased leave no older copy in the `-wal` file: forward secrecy holds only
    /// if the old keys are gone from the disk too (spec/ratchet.md §7). It costs a checkpoint per
    /// message sealed or opened in a ratchet. Best effort: a busy database is tried again next time.
    func eraseOldCopies() async {
        try? await store.checkpoint()
    }

    /// `me`'s bundle to publish: the keys with the current signed prekey, made or replaced as due.
    func currentBundle(of me: Identity) async throws -> KeyBundle {
        let prekey = try await store.currentSignedPrekey()
        return me.bundle(signedPrekey: PublishedPrekey(id: prekey.id, key: prekey.pair.publicKey))
    }

    /// Tops the relay's supply of this device's one-time prekeys up to ``prekeySupply`` when fewer
    /// than ``prekeyLowWater`` are left (`remaining`, from a `ready` frame; asked when nil). Best
    /// effort: a sender who finds none starts the ratchet with the signed prekey alone.
    /// One top-up at a time (frames may come while one runs), and never more prekeys than
    /// ``PrekeyBudget`` allows, whatever counts the relay sends.
    func replenishPrekeys(remaining: Int? = nil) async {
        guard !toppingUpPrekeys else { return }
        toppingUpPrekeys = true
        defer { toppingUpPrekeys = false }
        do {
            let me = try await identity()
            var count = remaining
            if count == nil { count = try await authorized { try await api.prekeyCount(owner: me.uid, session: $0) } }
            guard let count, count < Self.prekeyLowWater else { return }
            // The count was range-checked when decoded (0 … 2³²−1); what is made is clamped all
            // the same, so that no number from the relay makes more than the supply.
            let allowed = prekeyBudget.take(Self.prekeysToMake(remaining: count), at: .now)
            guard allowed > 0 else {
                logger.info("not topping up the one-time prekeys: the relay asked for more than an honest one can use")
                return
            }
            let made = try await store.makeOneTimePrekeys(allowed)
            for batch in stride(from: 0, to: made.count, by: PrekeyUpload.maximumBatch) {
                let prekeys = made[batch..<min(made.count, batch + PrekeyUpload.maximumBatch)].map { Prekey(id: $0.id, key: $0.key) }
                _ = try await authorized { try await api.uploadPrekeys(prekeys, owner: me.uid, session: $0) }
            }
        } catch {
            logger.info("could not top up the one-time prekeys", metadata: ["error": "\(Self.describe(error))"])
        }
    }

    /// How many one-time prekeys to make when the relay holds `remaining`: up to the supply,
    /// never more, never fewer than none — whatever `remaining` is.
    static func prekeysToMake(remaining: Int) -> Int {
        remaining <= 0 ? prekeySupply : max(0, prekeySupply - min(remaining, prekeySupply))
    }

    /// How many one-time prekeys the client keeps on the relay (spec/ratchet.md §6).
    static let prekeySupply = 100
    /// Below this many left, the client uploads more: the relay's low-water mark, below which it
    /// sends a listening client a `prekeys` frame (spec/protocol.md §8.4).
    static let prekeyLowWater = PrekeyCount.lowWater

    // MARK: The outbox

    /// Where ``enqueue(_:id:to:as:)`` put a message.
    enum Enqueued {
        /// Sealed and queued.
        case queued(ClientStore.Queued)
        /// Stored unsealed: the recipient's identity key changed.
        case held
    }

    /// What one delivery attempt came to.
    enum Delivery {
        /// As ``SendOutcome`` says.
        case done(SendOutcome)
        /// The recipient's identity key changed meanwhile: held until trusted.
        case held(id: String, recipient: String)
    }

    /// Seals `message` to `recipient`'s pinned keys and stores it in the outbox — or, when the
    /// recipient's identity key changed, stores it held, unsealed.
    /// `wake`: false for a message not worth waking the recipient's devices; nil leaves it to
    /// the type (`MessageType.wakes`).
    func enqueue(_ message: ChatMessage, id: String, to recipient: String, as me: Identity, wake: Bool? = nil) async throws -> Enqueued {
        let body: [UInt8]
        do {
            try message.validate()  // a held message must be sealable once the key is trusted
            body = try message.encoded()
        } catch { throw ClientError.cannotSeal(code: error.code) }
        let contact: Contact
        do { contact = try await self.contact(recipient) } catch ClientError.keyChanged {
            try await store.enqueue(id: id, recipient: recipient, message: message, body: body, sealed: nil, wake: wake)
            return .held
        }
        let sealed: ClientStore.Sealed
        do { sealed = try await seal(message, id: id, as: me, to: contact) } catch ClientError.keyChanged {
            try await store.enqueue(id: id, recipient: recipient, message: message, body: body, sealed: nil, wake: wake)
            return .held
        }
        try await store.enqueue(id: id, recipient: recipient, message: message, body: body, sealed: sealed, wake: wake)
        await eraseOldCopies()
        return .queued(.init(id: id, recipient: recipient, sealed: sealed, wake: (wake ?? true) && message.type.wakes))
    }

    /// Seals `message` for `contact`: in the active ratchet with it when its bundle has a signed
    /// prekey (a new ratchet first, with a one-time prekey claimed from the relay when one is
    /// left), as a version 1 envelope otherwise (spec/ratchet.md §6). A note to oneself is version
    /// 1 too: one store cannot hold both ends of a ratchet under one id. Throws
    /// ``ClientError/keyChanged(_:)`` when the bundle fetched before a new ratchet shows another
    /// identity key.
    func seal(_ message: ChatMessage, id: String, as me: Identity, to contact: Contact) async throws -> ClientStore.Sealed {
        var contact = contact
        guard contact.uid != me.uid else { return try sealVersion1(message, id: id, as: me, to: contact) }
        for attempt in 0..<2 {
            let hasRatchet = try await store.hasActiveRatchet(with: contact)
            let needsRatchet = attempt > 0 || !hasRatchet
            // The signed prekey rotates under an unchanged key id, so no `stale_keys` tells of it:
            // the bundle is fetched again before each new ratchet (a pinned version 1 bundle, once
            // per run, to learn of a move to ratchets). Offline, the last verified one serves.
            if contact.signedPrekey == nil ? upgradeChecks.insert(contact.uid).inserted : needsRatchet {
                do { contact = try await refreshKeys(of: contact.uid) } catch ClientError.keyChanged {
                    throw ClientError.keyChanged(uid: contact.uid)
                } catch {
                    logger.info("sealing with the keys last verified", metadata: ["recipient": "\(contact.uid)", "error": "\(Self.describe(error))"])
                }
            }
            guard let signedPrekey = contact.signedPrekey else { return try sealVersion1(message, id: id, as: me, to: contact) }
            do {
                if needsRatchet {
                    let oneTimePrekey = await claimPrekey(of: contact.uid)
                    let ratchet = try Ratchet.initiate(identity: me.signing, peerIdentity: contact.identityKey, signedPrekey: signedPrekey,
                                                       oneTimePrekey: oneTimePrekey)
                    try await store.startRatchet(ratchet, with: contact)
                }
                // Nil: no active ratchet, or one at the end of its counter (deactivated): start anew.
                if let envelope = try await store.sealInActiveRatchet(message, id: id, as: me, to: contact) {
                    return .init(envelope: envelope, keyID: contact.keyID)
                }
            } catch let error as EnvelopeError { throw ClientError.cannotSeal(code: error.code) }
        }
        throw ClientError.cannotSeal(code: EnvelopeError.noRatchet.code)
    }

    private func sealVersion1(_ message: ChatMessage, id: String, as me: Identity, to contact: Contact) throws -> ClientStore.Sealed {
        do {
            let envelope = try Envelope.seal(message, id: id, from: me.uid, identity: me.signing, to: contact.uid, mailboxKey: contact.mailboxKey)
            return .init(envelope: envelope, keyID: contact.keyID)
        } catch { throw ClientError.cannotSeal(code: error.code) }
    }

    /// One of `uid`'s one-time prekeys, claimed from the relay; nil when none is left or the relay
    /// cannot say now (offline, rate-limited): the ratchet then starts with the signed prekey alone.
    private func claimPrekey(of uid: String) async -> PublishedPrekey? {
        do {
            return try await authorized { try await api.claimPrekey(for: uid, session: $0) }.map { PublishedPrekey(id: $0.id, key: $0.key) }
        } catch {
            logger.info("no one-time prekey claimed", metadata: ["recipient": "\(uid)", "error": "\(Self.describe(error))"])
            return nil
        }
    }

    func decodeStored(_ body: [UInt8]) throws -> ChatMessage {
        do { return try ChatMessage.decode(body) } catch { throw ClientError.cannotSeal(code: error.code) }
    }

    /// The outcome of a delivery for the caller: a message held meanwhile is an outcome, not a failure.
    func outcome(of delivery: Delivery) throws -> SendOutcome {
        switch delivery {
        case .done(let outcome): return outcome
        case .held(let id, let recipient): return .held(id: id, recipient: recipient)
        }
    }

    /// One try to hand a queued message to the relay. Stale keys are fetched again and the
    /// message sealed again at most `reseals` times in a row (keys that change faster than that
    /// leave it queued for a later try). `sealing`: the caller holds the message in ``resealing``.
    func deliver(_ queued: ClientStore.Queued, reseals: Int = 2, sealing: Bool = false) async -> Delivery {
        do {
            _ = try await authorized {
                try await api.send(to: queued.recipient, id: queued.id, envelope: queued.sealed.envelope,
                                   keyID: queued.sealed.keyID, wake: queued.wake, session: $0)
            }
            try await store.markSent(queued.id)
            return .done(.sent(id: queued.id))
        } catch ClientError.relay(let problem) where problem.code == .staleKeys && reseals > 0 {
            return await resealForCurrentKeys(queued, reseals: reseals - 1, sealing: sealing)
        } catch ClientError.relay(let problem) where problem.code == .conflict && queued.resealed {
            // The copy sealed to the old keys is still on the relay: once its recipient has
            // acknowledged it (or it expired), this one goes in.
            return await retryLater(queued.id, ClientError.relay(problem: problem))
        } catch ClientError.relay(let problem) where Self.isFinal(problem) {
            try? await store.markRefused(queued.id, error: problem.code.rawValue)
            return .done(.refused(id: queued.id, reason: .relay(problem.code)))
        } catch {
            return await retryLater(queued.id, error)
        }
    }

    /// The relay said the recipient publishes other keys now: fetch them and seal again.
    private func resealForCurrentKeys(_ queued: ClientStore.Queued, reseals: Int, sealing: Bool) async -> Delivery {
        // One reseal of a message at a time (a flush and a resend may meet at an await): two
        // envelopes under one id would have the relay refuse one as a conflict.
        if !sealing {
            guard resealing.insert(queued.id).inserted else { return .done(.queued(id: queued.id, reason: .resealing)) }
        }
        defer { if !sealing { resealing.remove(queued.id) } }
        do {
            let contact = try await refreshKeys(of: queued.recipient)
            guard let stored = try await store.outgoingBody(queued.id) else { throw ClientError.notResendable(id: queued.id) }
            let sealed = try await seal(try decodeStored(stored.body), id: queued.id, as: try await identity(), to: contact)
            try await store.requeue(queued.id, sealed: sealed)
            await eraseOldCopies()
            logger.info("the recipient's keys changed; sealed again", metadata: ["id": "\(queued.id)"])
            return await deliver(.init(id: queued.id, recipient: queued.recipient, sealed: sealed, wake: queued.wake, resealed: true),
                                 reseals: reseals, sealing: true)
        } catch ClientError.keyChanged {
            try? await store.markHeld(queued.id, error: ClientError.keyChangedCode)
            return .held(id: queued.id, recipient: queued.recipient)
        } catch ClientError.noKeys {
            // The recipient withdrew its keys: nothing can be sealed to it any more.
            try? await store.markRefused(queued.id, error: ProblemCode.staleKeys.rawValue)
            return .done(.refused(id: queued.id, reason: .relay(.staleKeys)))
        } catch {
            return await retryLater(queued.id, error)
        }
    }

    private func retryLater(_ id: String, _ error: any Error) async -> Delivery {
        // The outbox keeps the description (for `history`); the outcome says it typed.
        try? await store.markFailed(id, error: Self.describe(error), now: Date().timeIntervalSince1970)
        return .done(.queued(id: id, reason: SendOutcome.Reason(error)))
    }

    /// Refusals that retrying cannot change. A 401 is retried with a new session, a 429 later,
    /// and `stale_keys` with the recipient's current keys.
    static func isFinal(_ problem: Problem) -> Bool {
        (400..<500).contains(problem.code.status) && ![401, 429].contains(problem.code.status) && problem.code != .staleKeys
    }

    static func describe(_ error: any Error) -> String {
        switch error {
        case ClientError.relay(let problem): problem.code.rawValue
        case ClientError.unreachable(let why): "unreachable: \(why)"
        case ClientError.keyChanged: ClientError.keyChangedCode
        default: "\(error)"
        }
    }
}
