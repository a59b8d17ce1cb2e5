import Foundation
import MailslotWire

// What the relay keeps, and the one interface its services use to keep it: messages with their
// per-mailbox order, sessions and refresh families, documents, key bundles, one-time prekeys,
// block lists, mailbox sizes, leases and expiry. The embedded SQLite store (Store/SQLite/) implements it; another
// backend is another folder beside it, behind this protocol — the services, routes and sockets
// never know which one runs. Times are milliseconds since the epoch, passed in by the caller.

/// Why the store refused a write. Nothing already stored is changed when it does.
enum StoreRefusal: Error, Equatable {
    /// The message id is taken in that mailbox by another author or another envelope.
    case conflict
    /// The mailbox holds the most pending messages allowed.
    case mailboxFull
    /// The owner has blocked the author.
    case blocked
    /// The author's waiting messages, in all mailboxes together, hold the most bytes allowed.
    case authorQuota
    /// The disk is short of space: no new messages until some is freed (``DiskSpace``).
    case storageFull
    /// The owner's block list holds the most entries allowed.
    case blockListFull
    /// The create names keys (a key id) that are not the recipient's published ones.
    case staleKeys
    /// A prekey upload names an id stored with another key.
    case prekeyConflict
    /// A prekey upload would leave more prekeys stored than the owner may have.
    case tooManyPrekeys
}

/// Why a write could not run at all (as opposed to a refusal of what it asked). The
/// transaction was rolled back: nothing of it is stored.
enum StoreFailure: Error, Equatable {
    /// The disk is full, even after the reserve was released.
    case storageFull
    /// The database cannot be reached (PostgreSQL down, restarting or failing over). Whether a
    /// write that failed so was committed is unknown: retrying it is safe (creates are
    /// idempotent by id and envelope; a repeated erase finds nothing).
    case unavailable
    /// No database connection came in time while the database answered others: the relay is
    /// loaded, not cut off (``PostgresPool``). Answered like ``unavailable`` (`503`, with a
    /// shorter `retry_after`), but no other request is failed for it.
    case busy

    /// Whether trying again later may succeed: the database is unreachable or busy.
    var isTemporary: Bool { self == .unavailable || self == .busy }
}

/// What a create may take: the per-mailbox and per-author bounds.
struct CreateLimits: Sendable {
    /// The most unexpired messages in one mailbox.
    var maxPending: Int
    /// The most envelope bytes one author may have stored, in all mailboxes together.
    var maxAuthorBytes: Int64
}

/// One create of a unit of creates (``RelayStore/createMessages(_:now:limits:wake:)``): what
/// ``RelayStore/createMessage(recipient:id:author:envelope:size:keyID:now:expiresAt:limits:wake:)`` takes for one message.
struct MessageCreate: Sendable, Equatable {
    let recipient: String
    let id: String
    let author: String
    /// The envelope's base64url text.
    let envelope: String
    /// The number of bytes `envelope` stands for.
    let size: Int
    let keyID: String?
    let expiresAt: Int64
}

/// The outcome of creating a message.
enum CreateOutcome: Sendable, Equatable {
    /// Stored now. `erasedExpired`: an expired message under the same id was erased to make room.
    case created(StoredMessage, erasedExpired: Bool)
    /// The same author sent the same envelope under this id before: nothing changed.
    case duplicate(StoredMessage)

    var message: StoredMessage {
        switch self {
        case .created(let message, _), .duplicate(let message): message
        }
    }
}

/// One of an owner's one-time prekeys (spec/protocol.md §4.14): its id, and the X25519 public
/// key as the unpadded base64url text it came as (strict, so equal keys are equal texts).
struct StoredPrekey: Sendable, Equatable {
    let id: UInt32
    let key: String
}

/// A claimed prekey and the number of the owner's prekeys left after the claim, as the claim's
/// transaction counted them (what decides the low-water signal, spec/protocol.md §8.4).
struct ClaimedPrekey: Sendable, Equatable {
    let prekey: StoredPrekey
    let remaining: Int

    /// Whether this claim took the owner's supply below ``PrekeyCount/lowWater``: it left one
    /// fewer than the mark. Claims take one prekey each and every store runs an owner's claims
    /// one after another, each counting what the ones before it left (``RelayStore/claimPrekey(uid:claimer:)``),
    /// so every drain below the mark has exactly one such claim, and further claims below it
    /// have none until an upload lifts the supply to the mark again.
    var crossedLowWater: Bool { remaining == PrekeyCount.lowWater - 1 }
}

/// The outcome of taking or releasing a lease.
enum LeaseOutcome: Sendable, Equatable {
    case updated(StoredMessage)
    case notFound
    /// Another holder's lease is still running.
    case held
}


/// The outcome of spending a refresh token.
enum RefreshOutcome: Sendable, Equatable {
    /// Spent; the new pair is stored in the same family.
    case rotated(uid: String)
    /// No such refresh token, or it expired.
    case invalid
    /// It was spent before: the whole family is now revoked.
    case reused
}


/// A session row: whom it signs in, its family, and whether a refresh token was already spent.
struct StoredSession: Sendable, Equatable {
    enum Kind: Int, Sendable { case access = 0, refresh = 1 }
    let kind: Kind
    let uid: String
    let family: Data
    let expiresAt: Int64
    let spent: Bool

    /// Spent refresh tokens a store keeps per family, to recognise their reuse: the latest ones
    /// only, so that a client refreshing in a loop cannot grow its rows without bound.
    static let spentRefreshTokensKept = 16
}

/// A relay's store. Every write is atomic; a refusal (``StoreRefusal``) changes nothing, and a
/// failure for lack of space is ``StoreFailure/storageFull``. It keeps the blobs' metadata too
/// (``BlobRecords``) and the push registrations with their pending wake-ups (``PushRecords``).
protocol RelayStore: BlobRecords, PushRecords {
    /// The data folder's free space, when the store is on a local disk it watches; nil otherwise.
    var diskSpace: DiskSpace? { get }

    /// The other relays sharing this store, when there can be any (PostgreSQL); nil otherwise.
    var cluster: (any ClusterSignals)? { get }

    /// Who hears what this store commits (created and erased messages), in commit order: the
    /// relay's hub registers once (``CommitObserver``).
    var commits: CommitObservers { get }

    /// Whether the store can take writes now (for `/readyz`).
    func isReady() async -> Bool

    /// Makes the store ready to serve, before the relay listens: PostgreSQL applies its
    /// migrations here (SQLite did when it opened).
    func prepare() async throws

    /// Releases what the store holds once the relay is done with it, after the final
    /// ``checkpoint()`` (PostgreSQL: its connection pool).
    func close() async

    /// All mailboxes together: pending (unexpired) messages and the creation time of the oldest.
    func pendingSummary(now: Int64) async throws -> (count: Int, oldestCreatedAt: Int64?)

    // MARK: Messages

    /// Queues the create of a message (answered by the ticket once committed): refused when its
    /// id is taken by another author or envelope, the author is blocked, `keyID` is not the
    /// recipient's published keys', space is short, or `limits` are reached. Creates queued one
    /// after another are stored in that order. Each created message is published to ``commits``
    /// once committed, in commit order, before the ticket is answered. A created message with
    /// `wake` queues a wake-up for each of the recipient's push registrations in its own
    /// transaction (docs/design/wakeups.md §2.2); an identical retry queues none, whatever its `wake`.
    func createMessage(recipient: String, id: String, author: String, envelope: String, size: Int, keyID: String?, now: Int64,
                       expiresAt: Int64, limits: CreateLimits, wake: Bool) -> CommitTicket<CreateOutcome>

    /// Queues `creates` as one unit (a send to many, spec/protocol.md §4.25): each is decided as
    /// ``createMessage(recipient:id:author:envelope:size:keyID:now:expiresAt:limits:wake:)`` decides
    /// one, in order — so an author's quota sees the bytes of the creates before it, and creates to
    /// one mailbox get ascending `seq` — and all commit in one transaction, or none does. One
    /// ticket per create, in the same order; each created message is published to ``commits``.
    func createMessages(_ creates: [MessageCreate], now: Int64, limits: CreateLimits, wake: Bool) -> [CommitTicket<CreateOutcome>]

    /// Queues the erasure of message `id` (only if `author` wrote it, when given); the ticket says
    /// whether an unexpired message was erased. An erasure is published to ``commits``.
    func deleteMessage(recipient: String, id: String, author: String?, now: Int64) -> CommitTicket<Bool>

    /// The unexpired message `id` of `recipient`'s mailbox.
    func message(recipient: String, id: String, now: Int64) async throws -> StoredMessage?

    /// Unexpired messages of a mailbox after `seq`, oldest first: at most `limit`, and no more
    /// than `maxBytes` of envelope text unless the first alone is larger; `more` when others wait.
    func messages(recipient: String, after seq: Int64, limit: Int, maxBytes: Int, now: Int64) async throws -> (messages: [StoredMessage], more: Bool)

    /// The number of unexpired messages waiting in a mailbox.
    func pendingCount(recipient: String, now: Int64) async throws -> Int

    /// Takes (`until` set) or releases (`until` nil) the processing lease on a message, as `holder`.
    func setLease(recipient: String, id: String, until: Int64?, holder: String, now: Int64) async throws -> LeaseOutcome

    /// Erases every expired message and session, in small transactions; the number of messages erased.
    func sweepExpired(now: Int64, batch: Int, batchBytes: Int) async throws -> Int

    /// Makes erased content gone from the store's own files as far as it can (SQLite: the WAL
    /// copied and truncated). False when it could not complete now (try again later).
    @discardableResult
    func checkpoint() async throws -> Bool

    // MARK: Documents, key bundles, block lists

    func document(uid: String) async throws -> Data?
    func putDocument(uid: String, body: Data, now: Int64) async throws
    @discardableResult
    func deleteDocument(uid: String) async throws -> Bool
    func keyBundle(uid: String) async throws -> Data?
    /// Publishes `uid`'s verified bundle with its key id (``KeyBundle/keyID``) and identity key
    /// (base64url). When the stored bundle had another identity key, `uid`'s one-time prekeys
    /// (which belonged to that identity) are erased in the same transaction.
    func putKeyBundle(uid: String, bundle: Data, keyID: String, identityKey: String, now: Int64) async throws
    /// Erases `uid`'s bundle and, in the same transaction, its one-time prekeys; whether a bundle was stored.
    @discardableResult
    func deleteKeyBundle(uid: String) async throws -> Bool
    /// The authors `owner` has blocked, in byte order, after `cursor`; at most `limit`.
    func blocked(owner: String, after cursor: String, limit: Int) async throws -> [String]
    /// Blocks `author` for `owner`, unless the block list already holds `limit` entries.
    func block(owner: String, author: String, now: Int64, limit: Int) async throws
    @discardableResult
    func unblock(owner: String, author: String) async throws -> Bool

    // MARK: One-time prekeys

    /// Adds `prekeys` (ids distinct) to `uid`'s supply, in one transaction: one stored under its
    /// id with the same key is left as it is (a retry); one stored with another key refuses the
    /// whole upload (``StoreRefusal/prekeyConflict``), and so does a supply that would then pass
    /// `limit` (``StoreRefusal/tooManyPrekeys``). Prekeys are no message bytes: no mailbox size
    /// or author quota counts them. The number stored afterwards.
    func addPrekeys(uid: String, _ prekeys: [StoredPrekey], limit: Int, now: Int64) async throws -> Int
    /// The number of `uid`'s stored prekeys.
    func prekeyCount(uid: String) async throws -> Int
    /// Erases all of `uid`'s prekeys.
    func deletePrekeys(uid: String) async throws
    /// Takes `uid`'s prekey of the lowest id for `claimer` and erases it, atomically: concurrent
    /// claims, from any relay, never get the same one, and run one after another for one owner
    /// (with its uploads), so that ``ClaimedPrekey/remaining`` counts every earlier claim and
    /// exactly one claim crosses the low-water mark. Nil when none is left; refused
    /// (``StoreRefusal/blocked``) when `uid` has blocked `claimer`. A store shared by several
    /// relays also tells the others when the claim crossed the low-water mark
    /// (``ClusterEvent/prekeysLow(mailbox:count:)``), at its commit.
    func claimPrekey(uid: String, claimer: String) async throws -> ClaimedPrekey?

    // MARK: Sessions

    /// Stores a new sign-in's access/refresh pair in a new `family`, revoking the least recently
    /// refreshed families of `uid` beyond `maxFamilies`; the number revoked.
    @discardableResult
    func insertSessionPair(uid: String, family: Data, accessHash: Data, accessExpiresAt: Int64,
                           refreshHash: Data, refreshExpiresAt: Int64, maxFamilies: Int) async throws -> Int
    /// The session whose secret hashes to `hash`, if any.
    func session(hash: Data) async throws -> StoredSession?
    /// Spends a refresh token and stores its successor pair atomically; a spent one revokes its family.
    func rotateRefresh(hash: Data, now: Int64, accessHash: Data, accessExpiresAt: Int64,
                       refreshHash: Data, refreshExpiresAt: Int64) async throws -> RefreshOutcome
    /// Revokes every session of `family` (sign-out), and deletes the push registrations it wrote
    /// (with their pending wake-ups) in the same transaction.
    func revokeFamily(_ family: Data) async throws
}

extension RelayStore {
    /// A store only this process uses: no other relay to hear from.
    var cluster: (any ClusterSignals)? { nil }

    /// Nothing to prepare: the store was ready when it opened.
    func prepare() async throws {}

    /// Nothing to release beyond what deinitialization does.
    func close() async {}

    /// A waking create (``createMessage(recipient:id:author:envelope:size:keyID:now:expiresAt:limits:wake:)``
    /// with `wake` true): what every message is unless its sender said otherwise.
    func createMessage(recipient: String, id: String, author: String, envelope: String, size: Int, keyID: String?, now: Int64,
                       expiresAt: Int64, limits: CreateLimits) -> CommitTicket<CreateOutcome> {
        createMessage(recipient: recipient, id: id, author: author, envelope: envelope, size: size, keyID: keyID, now: now,
                      expiresAt: expiresAt, limits: limits, wake: true)
    }

    /// ``sweepExpired(now:batch:batchBytes:)`` in batches of at most 512 KiB of envelopes.
    func sweepExpired(now: Int64, batch: Int = 256) async throws -> Int {
        try await sweepExpired(now: now, batch: batch, batchBytes: 512 * 1024)
    }
}
