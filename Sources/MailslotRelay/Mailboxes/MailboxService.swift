import Foundation
import MailslotWire

/// What the relay does, independent of transport: HTTP routes and WebSocket frames both call
/// these functions, and each one asks the ``AccessRules`` before touching the store. Failures are
/// ``Problem``s with stable codes; nothing already stored changes when a request is refused.
struct MailboxService: Sendable {
    let store: any RelayStore
    let configuration: RelayConfiguration
    let hub: MailboxHub
    let rateLimiter: RateLimiter
    /// The buckets of prekey claims (``claimPrekey(_:owner:now:)``).
    let prekeyClaims: PrekeyClaimLimiter
    let readLimiter: ReadLimiter
    let erasure: ErasureScheduler
    let metrics: RelayMetrics
    /// The send-to-many bodies being read or held on this relay (``sendMany(_:_:now:)``).
    let batchBudget: BatchBudget

    typealias Principal = SessionService.Principal

    // MARK: Messages

    /// Drops an envelope into `recipient`'s mailbox under `id`, stamped with the principal as author.
    /// `keyID`, when given, names the recipient keys it was sealed to: stale ones are refused.
    ///
    /// Everything that can be decided without waiting is decided now, and the write is queued now
    /// — so sends started one after another are stored in that order, and can share a commit. The
    /// pending answer waits for the commit; `created` is false for an identical retry. `wake`
    /// false stores a message that queues no wake-up for the recipient's push registrations
    /// (spec/push.md §3); an identical retry queues none whatever it says.
    func send(_ principal: Principal, to recipient: String, id: String, envelope base64: String, ttlSeconds: Int64?,
              keyID: String? = nil, wake: Bool = true, now: Int64) -> Pending<(record: MessageRecord, created: Bool)> {
        let checked: CheckedCreate
        let ticket: CommitTicket<CreateOutcome>
        do {
            checked = try checkCreate(principal, to: recipient, id: id, envelope: base64, ttlSeconds: ttlSeconds, keyID: keyID, now: now)
            if let retryAfter = rateLimiter.take(principal.uid, now: now) {
                return Pending { [self] in try await rateLimited(principal, checked, retryAfter: retryAfter, now: now) }
            }
            ticket = store.createMessage(recipient: recipient, id: id, author: principal.uid, envelope: base64, size: checked.create.size,
                                         keyID: keyID, now: now, expiresAt: checked.create.expiresAt, limits: createLimits,
                                         // A recipient connected here still gets its wake-up row: if the
                                         // app leaves without acknowledging, the claim wakes it then
                                         // (the claim postpones the row while it stays connected).
                                         wake: wake)
        } catch {
            let refusal = rejected(error)
            return Pending { throw refusal }
        }
        return Pending { [self] in
            do {
                return settle(try await ticket.value, principal, checked)
            } catch {
                throw rejected(error)
            }
        }
    }

    /// Sends to many (spec/protocol.md §4.25): the entries of `request`, each checked and stored
    /// as ``send(_:to:id:envelope:ttlSeconds:keyID:wake:now:)`` would one — the same checks, in
    /// the same order, through the same functions — under one TTL and one `wake`. The request as
    /// a whole is refused only for its TTL (`invalid_ttl`), its number of entries or a repeated
    /// (`to`, `id`) pair (`invalid_entries`). Otherwise every entry gets a result, in entry order:
    /// the admitted ones take a token each from the author's create bucket in entry order (when it
    /// runs dry, the rest are `rate_limited`, each with the wait that covers it and the ones
    /// before it, unless it is an identical retry) and go to the store as one unit, committed in
    /// one transaction. A failure of that transaction (the database out of reach) fails the
    /// request, as it would fail a single create; repeating the request is safe.
    func sendMany(_ principal: Principal, _ request: BatchCreateRequest, now: Int64) -> Pending<[BatchResult]> {
        let admittedAt = ContinuousClock.now
        let entries = request.entries
        do {
            let ttl = request.ttlSeconds ?? configuration.defaultMessageTTL
            guard ttl >= 1, ttl <= configuration.maxMessageTTL else {
                throw Problem(.invalidTTL, "ttl_seconds must be 1 to \(configuration.maxMessageTTL)")
            }
            guard (1...configuration.maxBatchEntries).contains(entries.count) else {
                throw Problem(.invalidEntries, "a send to many has 1 to \(configuration.maxBatchEntries) entries, not \(entries.count)")
            }
            var pairs = Set<BatchPair>(minimumCapacity: entries.count)
            for entry in entries where !pairs.insert(BatchPair(to: entry.to, id: entry.id)).inserted {
                throw Problem(.invalidEntries, "a send to many names each (to, id) pair once")
            }
        } catch {
            let refusal = rejected(error)
            return Pending { throw refusal }
        }
        // Each entry's answer: decided now (a refusal), after a lookup (rate-limited), or by the store.
        enum Decision: Sendable {
            case refused(any Error)
            case rateLimited(CheckedCreate, retryAfter: Int)
            case queued(CheckedCreate, unit: Int)
        }
        var decisions: [Decision] = []
        var admitted: [MessageCreate] = []
        decisions.reserveCapacity(entries.count)
        var short = 0
        for entry in entries {
            do {
                let checked = try checkCreate(principal, to: entry.to, id: entry.id, envelope: entry.envelope, ttlSeconds: request.ttlSeconds,
                                              keyID: entry.keyID, now: now)
                if let retryAfter = rateLimiter.take(principal.uid, now: now, short: short) {
                    short += 1
                    decisions.append(.rateLimited(checked, retryAfter: retryAfter))
                } else {
                    decisions.append(.queued(checked, unit: admitted.count))
                    admitted.append(checked.create)
                }
            } catch {
                decisions.append(.refused(rejected(error)))
            }
        }
        let tickets = admitted.isEmpty ? [] : store.createMessages(admitted, now: now, limits: createLimits, wake: request.wake ?? true)
        return Pending { [self, decisions] in
            var results: [BatchResult] = []
            results.reserveCapacity(entries.count)
            for (entry, decision) in zip(entries, decisions) {
                let outcome: BatchResult.Outcome
                do {
                    switch decision {
                    case .refused(let error):
                        throw error
                    case .rateLimited(let checked, let retryAfter):
                        let (record, created) = try await rateLimited(principal, checked, retryAfter: retryAfter, now: now)
                        outcome = .stored(created: created, message: record)
                    case .queued(let checked, let unit):
                        let value: CreateOutcome
                        do {
                            value = try await tickets[unit].value
                        } catch let refusal as StoreRefusal {
                            throw rejected(refusal)
                        }
                        // The last admitted entry's write is the unit's last: once it is decided,
                        // the batch is committed (mailslot_batch_seconds, docs/operations.md).
                        if unit == tickets.count - 1 { metrics.batchCommitted(admitted: admittedAt, committed: tickets[unit].resolvedAt ?? .now) }
                        let (record, created) = settle(value, principal, checked)
                        outcome = .stored(created: created, message: record)
                    }
                } catch let problem as Problem {
                    outcome = .refused(problem)
                } catch {
                    // Not this entry's refusal: the unit's transaction failed (the database out of
                    // reach, the disk full): the request fails as a single create would.
                    throw rejected(error)
                }
                results.append(BatchResult(to: entry.to, id: entry.id, outcome: outcome))
            }
            return results
        }
    }

    /// A (`to`, `id`) pair of a send to many: each may be named once.
    private struct BatchPair: Hashable {
        let to: String
        let id: String
    }

    /// A create that passed every check the relay makes before the rate limit and the store.
    struct CheckedCreate: Sendable {
        let create: MessageCreate
        /// Whether the sender may read the recipient's mailbox (the answer then carries `seq`).
        let forOwner: Bool
    }

    /// The checks of a create before the rate limit, in the single create's order (spec/protocol.md
    /// §9): the uid and the id, the rule `message/create` for the recipient, then the content —
    /// TTL, envelope text, size and size class, the form of `key_id`. Throws the first refusal.
    private func checkCreate(_ principal: Principal, to recipient: String, id: String, envelope base64: String, ttlSeconds: Int64?,
                             keyID: String?, now: Int64) throws -> CheckedCreate {
        let validation = configuration.sendValidation
        try validation.checkAddress(to: recipient, id: id)
        try require(.create, .message, principal, owner: recipient)
        let checked = try validation.checkContent(envelope: base64, ttlSeconds: ttlSeconds, keyID: keyID)
        return CheckedCreate(create: MessageCreate(recipient: recipient, id: id, author: principal.uid, envelope: base64, size: checked.size,
                                                   keyID: keyID, expiresAt: now + checked.ttl * 1000),
                             forOwner: configuration.rules.allows(.read, .message, principal: principal.uid, owner: recipient))
    }

    /// The answer to a create the rate limit stopped: an identical retry is answered all the same
    /// (a client that lost an answer must not be told to slow down for repeating itself; looked up
    /// only here, off the common path), anything else `rate_limited`.
    private func rateLimited(_ principal: Principal, _ checked: CheckedCreate, retryAfter: Int,
                             now: Int64) async throws -> (record: MessageRecord, created: Bool) {
        let create = checked.create
        if let existing = try await store.message(recipient: create.recipient, id: create.id, now: now),
           existing.author == principal.uid, existing.envelope == create.envelope {
            return (existing.record(forOwner: checked.forOwner), false)
        }
        throw rejected(Problem(.rateLimited, "too many messages; slow down", retryAfter: retryAfter))
    }

    /// The answer to a create the store decided: counted, and an identical retry's token refunded.
    private func settle(_ outcome: CreateOutcome, _ principal: Principal, _ checked: CheckedCreate) -> (record: MessageRecord, created: Bool) {
        switch outcome {
        case .created(let message, let erasedExpired):
            metrics.messagesCreated.increment()
            if erasedExpired {
                metrics.messagesExpired.increment()
                erasure.erased()
            }
            return (message.record(forOwner: checked.forOwner), true)
        case .duplicate(let message):
            rateLimiter.refund(principal.uid)
            return (message.record(forOwner: checked.forOwner), false)
        }
    }

    /// What one create may take of the store.
    private var createLimits: CreateLimits {
        CreateLimits(maxPending: configuration.maxPendingPerMailbox, maxAuthorBytes: configuration.maxAuthorBytes)
    }

    /// A send's refusal or failure, as the client is told it (a store's refusal becomes its
    /// ``Problem``; a full disk found at commit is `storage_full`), counted by reason.
    private func rejected(_ error: any Error) -> any Error {
        let error = (error as? StoreRefusal).map(problem) ?? error
        let problem = Problem.answering(error)
        metrics.rejected(reason: problem.code.rawValue)
        if problem.code == .rateLimited { metrics.rateLimited.increment() }
        return error
    }

    /// An answer that holds one of the mailbox's reads (``ReadLimiter``) until it is written.
    struct Read<T: Sendable>: Sendable {
        let value: T
        let permit: ReadLimiter.Permit
    }

    /// Starts a read of `owner`'s mailbox, or refuses it when as many are in progress as allowed,
    /// of the mailbox or of the relay (spec/protocol.md §5.6).
    private func startRead(_ owner: String) throws -> ReadLimiter.Permit {
        switch readLimiter.start(owner) {
        case .success(let permit): return permit
        case .failure(.mailbox):
            throw Problem(.tooManyReads, "\(readLimiter.limit) reads of this mailbox are in progress; read their answers first",
                          retryAfter: 1)
        case .failure(.relay):
            throw Problem(.tooManyReads, "the relay has as many reads in progress as it allows; try again shortly", retryAfter: 1)
        }
    }

    /// One message, for its owner.
    func message(_ principal: Principal, owner: String, id: String, now: Int64) async throws -> Read<MessageRecord> {
        try Self.check(uid: owner)
        try Self.check(messageID: id)
        try require(.read, .message, principal, owner: owner)
        let permit = try startRead(owner)
        guard let message = try await store.message(recipient: owner, id: id, now: now) else {
            throw Problem(.notFound, "no such message")
        }
        metrics.messagesRead.increment()
        return Read(value: message.record(forOwner: true), permit: permit)
    }

    /// A page of the mailbox, oldest first, for its owner: at most `limit` messages and about
    /// ``RelayConfiguration/maxPageBytes`` of envelopes; `next` when more are waiting.
    func list(_ principal: Principal, owner: String, after cursor: String?, limit: Int?, now: Int64) async throws -> Read<MessagePage> {
        try Self.check(uid: owner)
        try require(.read, .mailbox, principal, owner: owner)
        var after: Int64 = 0
        if let cursor {
            guard let value = Int64(cursor), value >= 0, String(value) == cursor else {
                throw Problem(.invalidCursor, "after must be a cursor from a previous page")
            }
            after = value
        }
        let pageSize = limit ?? 100
        guard (1...Defaults.maxPageSize).contains(pageSize) else {
            throw Problem(.badRequest, "limit must be 1 to \(Defaults.maxPageSize)")
        }
        let permit = try startRead(owner)
        let (page, more) = try await store.messages(recipient: owner, after: after, limit: pageSize, maxBytes: configuration.maxPageBytes,
                                                    now: now)
        let next = more ? page.last.map { String($0.seq) } : nil
        metrics.messagesRead.increment(by: page.count)
        return Read(value: MessagePage(messages: page.map { $0.record(forOwner: true) }, next: next), permit: permit)
    }

    /// The owner's metadata update: a processing lease. The envelope never changes.
    func patch(_ principal: Principal, owner: String, id: String, _ patch: MessagePatch, now: Int64) async throws -> MessageRecord {
        try Self.check(uid: owner)
        try Self.check(messageID: id)
        try require(.update, .message, principal, owner: owner)
        guard let seconds = patch.leaseSeconds, (0...3600).contains(seconds) else {
            throw Problem(.invalidLease, "lease_seconds must be 0 (release) to 3600")
        }
        let holder = patch.leaseHolder ?? ""
        guard holder.utf8.count <= 64 else { throw Problem(.invalidLease, "lease_holder is at most 64 bytes") }
        switch try await store.setLease(recipient: owner, id: id, until: seconds == 0 ? nil : now + seconds * 1000, holder: holder, now: now) {
        case .updated(let message): return message.record(forOwner: true)
        case .notFound: throw Problem(.notFound, "no such message")
        case .held: throw Problem(.conflict, "another holder's lease on this message is still running")
        }
    }

    /// Erases a message: the owner's acknowledgement or the author's unsend. Anyone else gets 403
    /// whether or not the message exists. An owner's acknowledgement is queued at once (like
    /// ``send(_:to:id:envelope:ttlSeconds:keyID:now:)``); anyone else's unsend first looks the
    /// message up. The store publishes the erasure to the hub (``CommitObserver``): a message
    /// waiting in a subscription's memory is not delivered.
    func delete(_ principal: Principal, owner: String, id: String, now: Int64) -> Pending<Void> {
        do {
            try Self.check(uid: owner)
            try Self.check(messageID: id)
        } catch {
            return Pending { throw error }
        }
        // The owner's ack needs no look at the message first; anyone else may delete only as its author.
        if configuration.rules.allows(.delete, .message, principal: principal.uid, owner: owner, author: nil) {
            let ticket = store.deleteMessage(recipient: owner, id: id, author: nil, now: now)
            return Pending { [self] in try settleErasure(try await ticket.value, isOwner: true) }
        }
        return Pending { [self] in
            let author = try await store.message(recipient: owner, id: id, now: now)?.author
            try require(.delete, .message, principal, owner: owner, author: author)
            // An author's unsend erases only a message that author wrote, even if the id was reused meanwhile.
            let erased = try await store.deleteMessage(recipient: owner, id: id, author: principal.uid, now: now).value
            try settleErasure(erased, isOwner: false)
        }
    }

    /// Counts a committed erasure; only the owner may learn that the message is not there (any more).
    private func settleErasure(_ erased: Bool, isOwner: Bool) throws {
        erasure.erased()  // also when the row was expired: it was deleted all the same
        guard erased else { throw Problem(isOwner ? .notFound : .forbidden, isOwner ? "no such message" : "you may not do this") }
        (isOwner ? metrics.messagesAcked : metrics.messagesUnsent).increment()
    }

    // MARK: Subscriptions

    /// Checks that the principal may subscribe to `owner`'s mailbox.
    func authorizeSubscription(_ principal: Principal, owner: String) throws {
        try Self.check(uid: owner)
        try require(.read, .mailbox, principal, owner: owner)
    }

    /// Begins a subscription to `owner`'s mailbox: checks that the principal may, and — only with
    /// other relays on the store (PostgreSQL) — draws the generation that orders it among the
    /// mailbox's subscriptions on every relay, telling them (their older subscription ends). Nil
    /// on a store no other relay shares: nothing is written, the hub orders subscriptions itself.
    func beginSubscription(_ principal: Principal, owner: String) async throws -> Int64? {
        try authorizeSubscription(principal, owner: owner)
        return try await store.cluster?.announceSubscription(to: owner)
    }

    /// What the `ready` frame says: the unexpired messages waiting, and the owner's one-time
    /// prekeys (spec/protocol.md §8.4).
    func subscriptionCounts(owner: String, now: Int64) async throws -> (pending: Int, prekeys: Int) {
        let pending = try await store.pendingCount(recipient: owner, now: now)
        return (pending, try await store.prekeyCount(uid: owner))
    }

    /// A subscription's backlog: `owner`'s unexpired messages after `seq`, at most `limit` and
    /// about `maxBytes` of envelopes; `more` when others wait. (No read permit: a subscription
    /// reads one page at a time, bounded by its window.)
    func backlog(owner: String, after seq: Int64, limit: Int, maxBytes: Int, now: Int64) async throws -> (messages: [StoredMessage], more: Bool) {
        try await store.messages(recipient: owner, after: seq, limit: limit, maxBytes: maxBytes, now: now)
    }

    // MARK: Documents, keys, block lists

    func document(_ principal: Principal, owner: String) async throws -> Data {
        try Self.check(uid: owner)
        try require(.read, .userDocument, principal, owner: owner)
        guard let body = try await store.document(uid: owner) else { throw Problem(.notFound, "no document yet") }
        return body
    }

    func putDocument(_ principal: Principal, owner: String, body: Data, now: Int64) async throws {
        try Self.check(uid: owner)
        try require(.update, .userDocument, principal, owner: owner)
        guard body.count <= configuration.maxDocumentBytes else {
            throw Problem(.bodyTooLarge, "the document is at most \(configuration.maxDocumentBytes) bytes")
        }
        guard (try? JSONSerialization.jsonObject(with: body)) is [String: Any] else {
            throw Problem(.invalidDocument, "the document must be a JSON object")
        }
        try await store.putDocument(uid: owner, body: body, now: now)
        erasure.erased()  // the replaced version must not linger in the WAL either
    }

    func deleteDocument(_ principal: Principal, owner: String) async throws {
        try Self.check(uid: owner)
        try require(.delete, .userDocument, principal, owner: owner)
        guard try await store.deleteDocument(uid: owner) else { throw Problem(.notFound, "no document") }
        erasure.erased()
    }

    /// Erases the owner's key bundle and, with it, the one-time prekeys.
    func deleteKeyBundle(_ principal: Principal, owner: String) async throws {
        try Self.check(uid: owner)
        try require(.delete, .keyBundle, principal, owner: owner)
        let deleted = try await store.deleteKeyBundle(uid: owner)
        erasure.erased()  // the prekeys went too, bundle or not
        guard deleted else { throw Problem(.notFound, "no key bundle") }
    }

    /// A page of the authors `owner` has blocked, in byte order, after `cursor` (an author of
    /// the previous page); `next` when more follow.
    func blockList(_ principal: Principal, owner: String, after cursor: String?, limit: Int?) async throws -> BlockPage {
        try Self.check(uid: owner)
        try require(.read, .blockEntry, principal, owner: owner)
        if let cursor { try Self.check(uid: cursor) }
        let pageSize = limit ?? Defaults.maxBlockPageSize
        guard (1...Defaults.maxBlockPageSize).contains(pageSize) else {
            throw Problem(.badRequest, "limit must be 1 to \(Defaults.maxBlockPageSize)")
        }
        let authors = try await store.blocked(owner: owner, after: cursor ?? "", limit: pageSize + 1)
        let page = Array(authors.prefix(pageSize))
        return BlockPage(blocked: page, next: authors.count > pageSize ? page.last : nil)
    }

    func keyBundle(_ principal: Principal, owner: String) async throws -> Data {
        try Self.check(uid: owner)
        try require(.read, .keyBundle, principal, owner: owner)
        guard let bundle = try await store.keyBundle(uid: owner) else { throw Problem(.notFound, "this user has published no keys") }
        return bundle
    }

    /// Publishes the owner's key bundle; it must be self-signed and name the owner.
    func putKeyBundle(_ principal: Principal, owner: String, body: Data, now: Int64) async throws {
        try Self.check(uid: owner)
        try require(.update, .keyBundle, principal, owner: owner)
        let bundle: KeyBundle
        do {
            bundle = try KeyBundle.decode(Array(body), for: owner)
        } catch {
            throw Problem(.invalidKeyBundle, "the key bundle was refused: \(error.code)")
        }
        // One form for the signed prekey id (spec/envelope.md): JSONDecoder also reads `4e9`,
        // `4000000000.0` or `01` as an integer, and a client that decodes strictly would refuse
        // what the relay stored. Only plain decimal digits without leading zeros are kept.
        if bundle.signedPrekey != nil,
           !Self.isPlainInteger(StrictJSON.numberText(ofMember: "signed_prekey_id", in: body, maxDepth: 4)) {
            throw Problem(.invalidKeyBundle,
                          "the key bundle was refused: signed_prekey_id must be written as plain digits: \(KeyBundleError.malformed("").code)")
        }
        // A bundle of another identity erases the old identity's one-time prekeys with it.
        try await store.putKeyBundle(uid: owner, bundle: body, keyID: bundle.keyID, identityKey: Base64URL.encode(bundle.identityKey.bytes),
                                     now: now)
        erasure.erased()  // the replaced version must not linger in the WAL either
    }

    func block(_ principal: Principal, owner: String, author: String, now: Int64) async throws {
        try Self.check(uid: owner)
        try Self.check(uid: author)
        try require(.create, .blockEntry, principal, owner: owner)
        do {
            try await store.block(owner: owner, author: author, now: now, limit: configuration.maxBlockedPerOwner)
        } catch let refusal as StoreRefusal {
            throw problem(refusal)
        }
    }

    func unblock(_ principal: Principal, owner: String, author: String) async throws {
        try Self.check(uid: owner)
        try Self.check(uid: author)
        try require(.delete, .blockEntry, principal, owner: owner)
        guard try await store.unblock(owner: owner, author: author) else { throw Problem(.notFound, "not blocked") }
        erasure.erased()
    }

    // MARK: Checks

    /// Whether `text` is a non-negative integer in its one JSON form: decimal digits, no sign,
    /// fraction, exponent or leading zero (`0` itself aside). The range is the decoder's.
    static func isPlainInteger(_ text: String?) -> Bool {
        guard let text, let first = text.utf8.first, text.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else { return false }
        return first != 0x30 || text.utf8.count == 1
    }

    /// What the client is told of a store's refusal.
    func problem(_ refusal: StoreRefusal) -> Problem {
        switch refusal {
        case .conflict: Problem(.conflict, "this message id is already used in this mailbox with another envelope")
        case .mailboxFull: Problem(.mailboxFull, "the mailbox holds \(configuration.maxPendingPerMailbox) pending messages; try later")
        case .blocked: Problem(.blocked, "the mailbox owner does not accept messages from you")
        case .authorQuota:
            // Freed as recipients acknowledge, or as the messages expire (swept every interval).
            Problem(.authorQuota, "your waiting messages hold up to \(configuration.maxAuthorBytes) bytes; wait for recipients to receive them",
                    retryAfter: Int(configuration.sweepInterval.rounded(.up)))
        case .storageFull: Problem.storageFull
        case .blockListFull: Problem(.blockListFull, "the block list holds \(configuration.maxBlockedPerOwner) authors; unblock some first")
        case .staleKeys: Problem(.staleKeys, "the recipient has published other keys since this envelope was sealed; fetch them and seal again")
        case .prekeyConflict: Problem(.prekeyConflict, "a prekey id is already stored with another key; nothing was added")
        case .tooManyPrekeys:
            Problem(.tooManyPrekeys, "the relay keeps at most \(configuration.maxPrekeys) prekeys per user; nothing was added")
        }
    }

    func require(_ operation: AccessOperation, _ resource: AccessResource, _ principal: Principal, owner: String,
                 author: String? = nil) throws {
        guard configuration.rules.allows(operation, resource, principal: principal.uid, owner: owner, author: author) else {
            throw Problem(.forbidden, "you may not do this")
        }
    }

    static func check(uid: String) throws { try SendValidation.check(uid: uid) }

    static func check(messageID: String) throws { try SendValidation.check(messageID: messageID) }
}

extension RelayConfiguration {
    /// The checks of a create's fields, with this relay's limits.
    var sendValidation: SendValidation {
        SendValidation(maxEnvelopeBytes: maxEnvelopeBytes, defaultTTL: defaultMessageTTL, maxTTL: maxMessageTTL)
    }
}
