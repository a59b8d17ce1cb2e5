import Foundation
import Logging
import MailslotWire

/// A Mailslot client for bots and apps: signs in with custom tokens from the app's backend,
/// publishes and pins keys, seals and sends (through a durable outbox), and receives with
/// ack-then-delete: every message is stored locally before the relay is told to erase it.
public actor MailslotClient {
    let api: RelayAPI
    let store: ClientStore
    let tokenProvider: @Sendable () async throws -> String
    let logger: Logger
    /// Messages being sealed again right now (``resend(_:)``, a flush told of stale keys).
    var resealing: Set<String> = []
    /// Contacts pinned without a signed prekey whose bundle was fetched again since this client
    /// started, to learn whether they publish one now (``seal(_:id:as:to:)``).
    var upgradeChecks: Set<String> = []
    /// When expired skipped keys were last dropped from ratchets that receive nothing.
    var lastSkippedKeyPrune: Double = 0
    /// Whether a one-time prekey top-up is running (``replenishPrekeys(remaining:)``).
    var toppingUpPrekeys = false
    /// How many one-time prekeys may still be made, whatever the relay says it holds.
    var prekeyBudget = PrekeyBudget()
    /// Where received files go and which are fetched without being asked.
    let attachmentPolicy: AttachmentPolicy
    /// The folder of the database: the outbox spool and the default files folder are in it.
    let storeFolder: URL
    /// File sends being uploaded right now (a `flush` and a send must not run one twice at once).
    var runningUploads: Set<String> = []
    /// Attachments being downloaded right now.
    var runningDownloads: Set<AttachmentID> = []
    /// ``maxUnhandled``; smaller in tests, to see the back-pressure without hundreds of messages.
    var unhandledLimit = MailslotClient.maxUnhandled
    /// The size of multi-recipient create this relay takes, lowered when it refuses one as too
    /// large (``deliverBatched(_:)``): later sends start at a size that worked.
    var batchLimit = BatchLimit()
    /// The `active: true` typing indicators sent to each group lately (spec/groups.md §4.5).
    var typingRate = TypingRate()
    /// The clock ``typingRate`` is measured on; tests move it instead of sleeping.
    var typingClock: @Sendable () -> ContinuousClock.Instant = { ContinuousClock.now }

    /// A client of the relay at `relay`, keeping its state in the SQLite file at `databasePath`
    /// (and, beside it, the outbox spool of files being sent and, by default, the `files/`
    /// folder of files received: see ``AttachmentPolicy``). `tokenProvider` returns a fresh
    /// custom token; it is called to sign in, and again whenever the session can no longer be refreshed.
    ///
    /// ```swift
    /// let client = try MailslotClient(relay: URL(string: "https://relay.example")!,
    ///                                 databasePath: appSupport.appendingPathComponent("mailslot.sqlite").path) {
    ///     try await backend.customToken()          // signed by your backend for this user
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - relay: The relay's base URL.
    ///   - databasePath: The client's SQLite file; its folder is created (mode 0700) when missing.
    ///     One client per file: it holds this device's secret keys.
    ///   - attachments: Where received files go, and which are fetched without being asked.
    ///   - logger: Where the client logs (never a token, key or message content).
    ///   - tokenProvider: Returns a fresh custom token for this client's user (spec/tokens.md).
    /// - Throws: The store's error when the database cannot be opened or migrated.
    public init(relay: URL, databasePath: String, attachments: AttachmentPolicy = AttachmentPolicy(),
                logger: Logger = Logger(label: "mailslot-client"), tokenProvider: @escaping @Sendable () async throws -> String) throws {
        api = RelayAPI(base: relay)
        store = try ClientStore(path: databasePath)
        attachmentPolicy = attachments
        storeFolder = URL(fileURLWithPath: databasePath).standardizedFileURL.deletingLastPathComponent()
        self.tokenProvider = tokenProvider
        self.logger = logger
    }

    // MARK: Signing in

    /// Signs in with a fresh token, creates identity keys on first use and publishes them, and
    /// registers again the push targets this client keeps (``registerPush(_:id:tag:)``).
    ///
    /// Calling it once at start is enough: afterwards the client refreshes its session by itself
    /// and signs in again (with a new token from the provider) when the session cannot be refreshed.
    ///
    /// ```swift
    /// let uid = try await client.signIn()
    /// print("signed in as", uid, "fingerprint", try await client.ownFingerprint())
    /// ```
    ///
    /// - Returns: The uid the token signed in.
    /// - Throws: What the token provider throws; ``ClientError/relay(problem:)`` when the relay
    ///   refuses the token (expired, unknown issuer, wrong audience); ``ClientError/unreachable(reason:)``.
    ///   A token for another user than the one whose keys this store holds is refused, and the
    ///   session it opened is ended.
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
        try await api.putKeys(try await currentBundle(of: identity), session: grant.session)
        try await store.markPublished(identity)
        await replenishPrekeys()
        // The relay removes registrations with the sign-in that wrote them: this one writes them again.
        await registerKeptPushTargets(owner: grant.uid, session: grant.session)
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
    /// identity key changed until the user calls ``trust(_:safetyNumber:)``.
    public func contact(_ uid: String) async throws -> Contact {
        guard Identifier.isValidUID(uid) else { throw ClientError.invalidUID(text: uid) }
        if let known = try await store.contact(uid) {
            // A changed key waits for the user; so does a key whose comparison failed.
            guard known.trust != .changed, known.trust != .disputed else { throw ClientError.keyChanged(uid: uid) }
            return known
        }
        let bundle = try await fetchBundle(uid)
        try await store.pin(bundle)
        guard let pinned = try await store.contact(uid) else { throw ClientError.noKeys(uid: uid) }
        return pinned
    }

    /// Fetches `uid`'s bundle and compares it with the pin: a new identity key marks the contact
    /// as changed (and is kept on offer for ``trust(_:safetyNumber:)``); a new mailbox key under the same
    /// identity is taken.
    public func refreshKeys(of uid: String) async throws -> Contact {
        let bundle = try await fetchBundle(uid)
        guard let known = try await store.contact(uid) else {
            try await store.pin(bundle)
            return try await contact(uid)
        }
        if bundle.identityKey != known.identityKey {
            try await store.markChanged(uid, offered: bundle, replacing: known.identityKey)
            throw ClientError.keyChanged(uid: uid)
        }
        // The relay serves the pinned identity again: a change it showed before is withdrawn.
        if known.trust == .changed { try await store.withdrawChange(uid) }
        try await store.updateMailboxKey(bundle)
        return try await contact(uid)
    }

    private func fetchBundle(_ uid: String) async throws -> KeyBundle {
        let data: Data
        do { data = try await authorized { try await api.keys(of: uid, session: $0) } } catch ClientError.relay(let problem) where problem.code == .notFound {
            throw ClientError.noKeys(uid: uid)
        }
        do { return try KeyBundle.decode(Array(data), for: uid) } catch { throw ClientError.invalidKeys(uid: uid, code: error.code) }
    }

    /// Replaces this device's mailbox key with a new one and publishes it. The old secret key is
    /// kept for the longest message lifetime, so messages already sealed to it still open; senders
    /// learn of the new key from the relay (`409 stale_keys`) and seal to it from then on.
    public func rotateMailboxKey() async throws {
        let rotated = try await store.rotateMailboxKey()
        // Not published until the relay took it: the next receive or flush tries again.
        let bundle = try await currentBundle(of: rotated)
        try await authorized { try await api.putKeys(bundle, session: $0) }
        try await store.markPublished(rotated)
    }

    /// This user's own fingerprint (30 digits in groups of five), to read out to contacts.
    public func ownFingerprint() async throws -> String {
        let me = try await identity()
        return SafetyNumber.fingerprint(uid: me.uid, identityKey: me.signing.publicKey).joined(separator: " ")
    }

    /// Every known contact.
    public func contacts() async throws -> [Contact] { try await store.contacts() }

    /// Unsends a message this client sent that the recipient has not received yet; the files it
    /// carries as blobs are erased on the relay too.
    public func unsend(_ id: String, to recipient: String) async throws {
        try await authorized { try await api.delete(owner: recipient, id: id, session: $0) }
        if let stored = try await store.outgoingBody(id), let message = try? ChatMessage.decode(stored.body) {
            for file in message.payload.files ?? [] {
                _ = try? await authorized { try await api.deleteBlob(file.blob, session: $0) }
            }
        }
    }

    /// Blocks `author` from writing to this client's mailbox: the relay refuses their messages
    /// (`403 blocked`) until ``unblock(_:)``. Blocking someone already blocked is not an error.
    /// - Throws: ``ClientError/invalidUID(text:)`` for a text that is not a uid; the relay's
    ///   refusal (``ClientError/relay(problem:)``: `block_list_full`, …).
    public func block(_ author: String) async throws {
        guard Identifier.isValidUID(author) else { throw ClientError.invalidUID(text: author) }
        let me = try await identity()
        try await authorized { try await api.block(owner: me.uid, author: author, session: $0) }
    }

    /// Lets `author` write to this client's mailbox again (spec/protocol.md §4.12).
    /// - Returns: Whether `author` was blocked; unblocking someone who was not is not an error.
    /// - Throws: ``ClientError/invalidUID(text:)`` for a text that is not a uid; the relay's
    ///   refusal or unreachability.
    @discardableResult
    public func unblock(_ author: String) async throws -> Bool {
        guard Identifier.isValidUID(author) else { throw ClientError.invalidUID(text: author) }
        let me = try await identity()
        do {
            try await authorized { try await api.unblock(owner: me.uid, author: author, session: $0) }
            return true
        } catch ClientError.relay(let problem) where problem.code == .notFound {
            return false
        }
    }
}
