import Foundation
import MailslotWire

// What the relay keeps for wake-ups — each mailbox owner's push registrations, and at most one
// pending wake-up per registration — and the interface the push service and the wake-up
// dispatcher use to keep it. A created message inserts its wake-up rows in its own transaction,
// so a stored message and its wake-up commit together; a claim deletes the rows it hands out
// before anything is sent, so two relays never send the same wake-up.
// docs/design/wakeups.md §1.4–§2.4, spec/push.md.

/// A registration to store, as the push service checked it.
struct NewPushRegistration: Sendable, Equatable {
    let uid: String
    /// The client's id for it (`^[A-Za-z0-9_-]{16,64}$`).
    let id: String
    let provider: PushProviderKind
    /// The provider's members, as canonical JSON (``PushTarget``).
    let target: String
    /// What pauses and concurrency count by: a Web Push endpoint's `host[:port]`, or the
    /// provider's own route (`apns`, `apns-sandbox`, `fcm`, `webhook`).
    let route: String
    /// The client's opaque tag, the only thing a wake-up carries.
    let tag: String
}

/// A stored registration.
struct PushRegistrationRow: Sendable, Equatable {
    let uid: String
    let id: String
    let provider: PushProviderKind
    let target: String
    let route: String
    let tag: String
    /// +1 on each replacement: an outcome for an older version never removes a newer one.
    let version: Int64
    /// Milliseconds since the epoch.
    let createdAt: Int64
    let updatedAt: Int64
    /// When the last wake-up for it was claimed (ms); 0 until then.
    let wokenAt: Int64
    /// Consecutive failures the registration is to blame for.
    let failures: Int
}

/// What storing a registration did.
enum PushPutOutcome: Sendable, Equatable {
    /// A new id: 201.
    case created(PushRegistrationRow)
    /// An id the uid already had, now holding the new body: 200.
    case replaced(PushRegistrationRow)
    /// The uid holds the most registrations it may; nothing stored: 409.
    case tooMany
}

/// One wake-up a claim handed to this relay, joined with its registration. Its row is already
/// gone from the store: if this relay dies now, this wake-up is lost, never a message.
struct ClaimedWakeup: Sendable, Equatable {
    let uid: String
    let registrationID: String
    let provider: PushProviderKind
    let target: String
    let route: String
    let tag: String
    /// The registration's version when claimed (``PushRecords/recordWakeOutcome(uid:id:version:_:)``).
    let version: Int64
    /// The oldest message this wake-up is for.
    let firstSeq: Int64
    /// 0 on the first try.
    let attempt: Int
    /// The webhook event id every attempt of this wake-up shares; nil until the dispatcher draws one.
    let event: String?
}

/// What a provider's answer says about a registration.
enum RegistrationVerdict: Sendable, Equatable {
    /// Delivered: its failure count starts again.
    case ok
    /// Its own fault (a malformed token, a refused address): one more failure; removed at three.
    case blamed
    /// The provider says it no longer exists: removed now.
    case dead
}

/// What one claim did (docs/design/wakeups.md §2.4, §5): the wake-ups handed out to send, and
/// the ones it skipped, by reason.
struct WakeupClaim: Sendable, Equatable {
    /// The wake-ups to send now.
    var wakeups: [ClaimedWakeup] = []
    /// Put back an interval later: the owner held a live subscription (`skipped{reason="connected"}`).
    var postponed = 0
    /// Dropped: the owner had received the messages meanwhile (`skipped{reason="received"}`).
    var received = 0
    /// Rows still due after the claim (the `mailslot_push_due` gauge).
    var due = 0
}

/// The registrations and pending wake-ups a relay keeps. Both backends implement it; every
/// call is one transaction.
protocol PushRecords: Sendable {
    /// Stores `registration` for its uid (create, or replace under the same id), noting the sign-in
    /// family that wrote it; refuses a new id when the uid already holds `max`.
    func putRegistration(_ registration: NewPushRegistration, family: Data, max: Int, now: Int64) async throws -> PushPutOutcome
    /// The uid's registrations, ordered by id.
    func registrations(uid: String) async throws -> [PushRegistrationRow]
    /// One registration, or nil.
    func registration(uid: String, id: String) async throws -> PushRegistrationRow?
    /// Deletes a registration and its pending wake-up; false if there was none.
    func deleteRegistration(uid: String, id: String) async throws -> Bool
    /// Takes up to `limit` due wake-ups out of the store for this relay to send (design §2.4):
    /// skips the excluded routes and providers; drops one whose mailbox holds no unexpired message
    /// from its `first_seq` on (the owner received them); postpones by `interval` one whose owner
    /// holds a live subscription (here: `isLiveHere`; on PostgreSQL also on any node seen within
    /// `presence` ms); for the rest, sets the registration's `woken_at` to `now` and returns it.
    /// The answer also counts what was postponed and dropped, and the rows still due, so that
    /// the dispatcher's metrics (and tests) see each decision the claim made.
    func claimWakeups(now: Int64, limit: Int, excludedRoutes: [String], excludedProviders: [PushProviderKind],
                      interval: Int64, presence: Int64,
                      isLiveHere: @escaping @Sendable (String) -> Bool) async throws -> WakeupClaim
    /// Puts a wake-up back after a retryable failure, due at `dueAt`, its attempt one higher and
    /// its event id kept; merged with a row a newer message made meanwhile.
    func requeueWakeup(_ wakeup: ClaimedWakeup, event: String, dueAt: Int64) async throws
    /// Applies a provider's verdict to the registration's `version` (none, if it was replaced
    /// since); true if the registration was removed.
    func recordWakeOutcome(uid: String, id: String, version: Int64, _ verdict: RegistrationVerdict) async throws -> Bool
    /// Deletes up to `batch` registrations whose sign-in family has no live session left.
    func sweepPushRegistrations(now: Int64, batch: Int) async throws -> Int
    /// The earliest `due_at` of a pending wake-up, or nil (SQLite's dispatcher sleeps until then).
    func nextWakeupDue() async throws -> Int64?
    /// Records that this relay is alive (PostgreSQL `relay_nodes`); nothing on SQLite.
    func heartbeat(node: String, now: Int64) async throws
}

extension PushRegistrationRow {
    /// Registrations whose sign-in family ended, deleted per transaction by the sweeper (design §1.5).
    static let sweepBatch = 64
    /// Consecutive failures a registration is to blame for at which it is removed (design §5).
    static let failuresRemoved = 3
}

extension Duration {
    /// The duration in whole milliseconds (the store's unit of time), rounded down.
    var wholeMilliseconds: Int64 {
        components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000
    }
}
