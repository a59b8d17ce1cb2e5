import Foundation
import Logging
import MailslotWire

/// A Mailslot client for bots and apps: signs in with custom tokens from the app's backend,
/// publishes and pins keys, seals and sends (through a durable outbox), and receives with
/// ack-then-delete: every message is stored locally before the relay is told to erase it.
public actor MailslotClient {
    /// What happened to a message handed to ``send(_:to:)``.
    public enum SendOutcome: Sendable, Equatable {
        /// The relay stored it.
        case sent(id: String)
        /// It is in the outbox (the relay could not be reached, or asked to wait: rate limit, full
        /// mailbox); ``flush()`` retries it with the same id and the same envelope.
        case queued(id: String, reason: String)
        /// The relay refused it for good (blocked, conflict, invalid): it leaves the outbox.
        case refused(id: String, reason: String)
    }

    let api: RelayAPI
    let store: ClientStore
    let tokenProvider: @Sendable () async throws -> String
    let logger: Logger

    /// A client of the relay at `relay`, keeping its state in the SQLite file at `databasePath`.
    /// `tokenProvider` returns a fresh custom token; it is called to sign in, and again whenever
    /// the session can no longer be refreshed.
    public init(relay: URL, databasePath: String, logger: Logger = Logger(label: "mailslot-client"),
                tokenProvider: @escaping @Sendable () async throws -> String) throws {
        api = RelayAPI(base: relay)
        store = try ClientStore(path: databasePath)
        self.tokenProvider = tokenProvider
        self.logger = logger
    }

    // MARK: Signing in

    /// Signs in with a fresh token, creates identity keys on first use and publishes them.
    /// Returns the uid the token signed in.
    @discardableResult
    public func signIn() async throws -> String {
        let grant = try await api.signIn(token: try await tokenProvider())
        // The store's user first: a token for someone else must not leave its session here.
        let identity: Identity
        do {
            identity = try await store.identity(creatingFor: grant.uid)
        } catch {
            try? await api.signOut(session: grant.session)
            throw error
        }
        try await store.saveSession(grant)
        try await api.putKeys(identity.bundle(), session: grant.session)
        return grant.uid
    }

    /// Ends the session at the relay and forgets it locally. Keys and messages stay.
    public func signOut() async throws {
        if let current = try await store.session() { try? await api.signOut(session: current.session) }
        try await store.clearSession()
    }

    /// The current session secret: refreshed when it is about to expire; when refreshing fails,
    /// signed in again with a new token from the provider.
    func session() async throws -> String {
        if let current = try await store.session(), current.expiresAt > Date().timeIntervalSince1970 + 30 {
            return current.session
        }
        if let current = try await store.session() {
            do {
                let grant = try await api.refresh(current.refresh)
                try await store.saveSession(grant)
                return grant.session
            } catch ClientError.relay(let problem) {
                logger.info("refresh refused; signing in again", metadata: ["code": "\(problem.code.rawValue)"])
            }
        }
        try await signIn()
        guard let fresh = try await store.session() else { throw ClientError.notSignedIn }
        return fresh.session
    }

    /// Runs `call` with a session, retrying once with a new session if the relay says the
    /// session is no longer valid (expired early, revoked).
    func authorized<T: Sendable>(_ call: (String) async throws -> T) async throws -> T {
        let current = try await session()
        do { return try await call(current) } catch ClientError.relay(let problem) where problem.code.status == 401 {
            try await store.clearSession()
            return try await call(try await session())
        }
    }

    func identity() async throws -> Identity {
        guard let identity = try await store.identity() else { throw ClientError.notSignedIn }
        return identity
    }

    /// The uid this client signed in as, if it has.
    public var uid: String? { get async { try? await store.identity()?.uid } }

    // MARK: Keys and contacts

    /// The contact's pinned keys; fetched and pinned on first use. Refuses a contact whose
    /// identity key changed until the user calls ``trust(_:)``.
    public func contact(_ uid: String) async throws -> Contact {
        guard Identifier.isValidUID(uid) else { throw ClientError.invalidUID(uid) }
        if let known = try await store.contact(uid) {
            guard known.trust != .changed else { throw ClientError.keyChanged(uid) }
            return known
        }
        let bundle = try await fetchBundle(uid)
        try await store.pin(bundle)
        guard let pinned = try await store.contact(uid) else { throw ClientError.noKeys(uid) }
        return pinned
    }

    /// Fetches `uid`'s bundle and compares it with the pin: a new identity key marks the contact
    /// as changed (and is kept on offer for ``trust(_:)``); a new mailbox key under the same
    /// identity is taken.
    public func refreshKeys(of uid: String) async throws -> Contact {
        let bundle = try await fetchBundle(uid)
        guard let known = try await store.contact(uid) else {
            try await store.pin(bundle)
            return try await contact(uid)
        }
        if bundle.identityKey != known.identityKey {
            try await store.markChanged(uid, offered: bundle)
            throw ClientError.keyChanged(uid)
        }
        try await store.updateMailboxKey(bundle)
        return try await contact(uid)
    }

    private func fetchBundle(_ uid: String) async throws -> KeyBundle {
        let data: Data
        do { data = try await authorized { try await api.keys(of: uid, session: $0) } } catch ClientError.relay(let problem) where problem.code == .notFound {
            throw ClientError.noKeys(uid)
        }
        do { return try KeyBundle.decode(Array(data), for: uid) } catch { throw ClientError.invalidKeys(uid, error.code) }
    }

    /// Trusts `uid`'s current keys after the user compared the safety number out of band; a
    /// changed contact takes the keys it offered.
    @discardableResult
    public func trust(_ uid: String) async throws -> Contact {
        guard let trusted = try await store.trust(uid) else { return try await contact(uid) }
        return trusted
    }

    /// The safety number to compare with `uid`, in twelve groups of five digits.
    public func safetyNumber(with uid: String) async throws -> String {
        let me = try await identity()
        var them = try await store.contact(uid)
        if them == nil { them = try await contact(uid) }
        guard let them else { throw ClientError.noKeys(uid) }
        return SafetyNumber.display(SafetyNumber.of((me.uid, me.signing.publicKey), (them.uid, them.identityKey)))
    }

    /// This user's own fingerprint (30 digits in groups of five), to read out to contacts.
    public func ownFingerprint() async throws -> String {
        let me = try await identity()
        return SafetyNumber.fingerprint(uid: me.uid, identityKey: me.signing.publicKey).joined(separator: " ")
    }

    /// Every known contact.
    public func contacts() async throws -> [Contact] { try await store.contacts() }

    // MARK: Sending

    /// Seals `message` for `recipient` under a new time-ordered id, stores it in the outbox, and
    /// tries to deliver it. A relay that cannot be reached leaves it queued.
    @discardableResult
    public func send(_ payload: Payload, type: MessageType = .text, to recipient: String, name: String? = nil) async throws -> SendOutcome {
        let me = try await identity()
        let contact = try await contact(recipient)
        let id = MessageID.generate()
        let message = ChatMessage(type: type, sender: Sender(id: me.uid, name: name), payload: payload,
                                  timestamp: Int64(Date().timeIntervalSince1970 * 1000))
        let envelope: [UInt8]
        let body: [UInt8]
        do {
            body = try message.encoded()
            envelope = try Envelope.seal(message, id: id, from: me.uid, identity: me.signing, to: recipient, mailboxKey: contact.mailboxKey)
        } catch { throw ClientError.cannotSeal(error.code) }
        try await store.enqueue(id: id, recipient: recipient, message: message, body: body, envelope: envelope)
        return await deliver(id: id, recipient: recipient, envelope: envelope)
    }

    /// Sends a plain text message.
    @discardableResult
    public func send(text: String, to recipient: String) async throws -> SendOutcome {
        try await send(Payload(text: text), to: recipient)
    }

    /// Retries every queued message that is due; returns how many are still queued.
    @discardableResult
    public func flush(now: Date = Date()) async throws -> Int {
        for queued in try await store.due(now: now.timeIntervalSince1970) {
            _ = await deliver(id: queued.id, recipient: queued.recipient, envelope: queued.envelope)
        }
        return try await store.outgoing().filter { $0.state == .queued }.count
    }

    /// Sent and queued messages, oldest first.
    public func outgoing() async throws -> [OutgoingMessage] { try await store.outgoing() }

    private func deliver(id: String, recipient: String, envelope: [UInt8]) async -> SendOutcome {
        do {
            _ = try await authorized { try await api.send(to: recipient, id: id, envelope: envelope, session: $0) }
            try await store.markSent(id)
            return .sent(id: id)
        } catch ClientError.relay(let problem) where Self.isFinal(problem) {
            try? await store.markRefused(id, error: problem.code.rawValue)
            return .refused(id: id, reason: problem.code.rawValue)
        } catch {
            let reason = Self.describe(error)
            try? await store.markFailed(id, error: reason, now: Date().timeIntervalSince1970)
            return .queued(id: id, reason: reason)
        }
    }

    /// Refusals that retrying cannot change. A 401 is retried with a new session, a 429 later.
    static func isFinal(_ problem: Problem) -> Bool {
        (400..<500).contains(problem.code.status) && problem.code.status != 401 && problem.code.status != 429
    }

    static func describe(_ error: any Error) -> String {
        switch error {
        case ClientError.relay(let problem): problem.code.rawValue
        case ClientError.unreachable(let why): "unreachable: \(why)"
        default: "\(error)"
        }
    }

    /// Unsends a message this client sent that the recipient has not received yet.
    public func unsend(_ id: String, to recipient: String) async throws {
        try await authorized { try await api.delete(owner: recipient, id: id, session: $0) }
    }

    /// Blocks `author` from writing to this client's mailbox.
    public func block(_ author: String) async throws {
        let me = try await identity()
        try await authorized { try await api.block(owner: me.uid, author: author, session: $0) }
    }

    // MARK: Receiving

    /// Fetches every waiting message over HTTP, stores each (or records why it was rejected),
    /// then acknowledges it so the relay erases it. Returns the newly stored messages.
    public func receive() async throws -> [ReceivedMessage] {
        let me = try await identity()
        var received: [ReceivedMessage] = []
        var cursor: String?
        repeat {
            let page = try await authorized { try await api.list(me.uid, after: cursor, session: $0) }
            for record in page.messages {
                if let message = try await accept(record, as: me) { received.append(message) }
                try await authorized { try await api.delete(owner: me.uid, id: record.id, session: $0) }
            }
            cursor = page.next
        } while cursor != nil
        return received
    }

    /// Opens, verifies and stores one delivered message — or stores why it was rejected — so
    /// that it can be acknowledged. Nil when it was rejected or was stored before (a
    /// redelivery); a typing indicator is returned, to be shown, but never stored.
    func accept(_ record: MessageRecord, as me: Identity) async throws -> ReceivedMessage? {
        if try await store.knows(record.id) { return nil }  // a redelivery after a crash before the ack
        guard let text = record.envelope, let envelope = Base64URL.decode(text) else {
            try await store.storeRejected(id: record.id, author: record.author, reason: "envelope_missing")
            return nil
        }
        let opened: OpenedEnvelope
        do { opened = try Envelope.open(envelope, id: record.id, recipient: me.uid, keys: me.mailbox) } catch {
            try await store.storeRejected(id: record.id, author: record.author, reason: error.code)
            return nil
        }
        guard opened.sender == record.author else {
            try await store.storeRejected(id: record.id, author: record.author, reason: "author_mismatch")
            return nil
        }
        do {
            let sender = try await contact(opened.sender)
            if sender.identityKey != opened.senderKey {
                // Signed by another key than the pinned one: check what the relay serves now.
                _ = try? await refreshKeys(of: opened.sender)
                try await store.storeRejected(id: record.id, author: record.author, reason: "key_changed")
                return nil
            }
        } catch ClientError.keyChanged {
            try await store.storeRejected(id: record.id, author: record.author, reason: "key_changed")
            return nil
        } catch ClientError.noKeys {
            try await store.storeRejected(id: record.id, author: record.author, reason: "sender_has_no_keys")
            return nil
        }
        let message = ReceivedMessage(id: record.id, sender: opened.sender, message: opened.message, body: opened.body)
        if opened.message.type == .typing { return message }  // shown, never stored
        try await store.storeReceived(message)
        return message
    }

    /// Stored messages, oldest first; from one contact when `from` is given.
    public func history(from sender: String? = nil) async throws -> [ReceivedMessage] { try await store.inbox(from: sender) }

    /// Messages that failed to open or verify, with the reason (an envelope error code,
    /// `author_mismatch`, `key_changed`, …).
    public func rejected() async throws -> [(id: String, author: String, reason: String)] { try await store.rejected() }
}
