import Synchronization

/// What a store committed that a live subscription may care about.
enum CommittedChange: Sendable, Equatable {
    /// A message was stored (and is to be delivered). `wakeups`: the same transaction queued
    /// wake-up rows for its recipient (SQLite: the recipient has registrations; PostgreSQL: the
    /// create asked to wake, and the database alone knows whether it found registrations), so
    /// the wake-up dispatcher claims them at once rather than at its next look
    /// (docs/design/wakeups.md §2.2, §3.2).
    case created(StoredMessage, wakeups: Bool)
    /// Message `id` of `recipient`'s mailbox was erased (an ack, an unsend).
    case erased(recipient: String, id: String)
    /// Another relay sharing the store committed something, as its signal says (``ClusterSignals``,
    /// PostgreSQL only): ordered among that relay's signals, not with this relay's commits.
    case elsewhere(ClusterEvent)
}

/// Hears what its store committed, in commit order: the one route from a commit to the
/// subscriptions (``MailboxHub`` is the relay's observer). Called inside the group commit, after
/// the transaction committed and before any writer is answered, one change after another in the
/// order the rows were written — so it must return at once. Other relays' commits arrive by the
/// same route, as ``CommittedChange/elsewhere(_:)``: the relay publishes what its
/// ``ClusterSignals`` hear (``Relay``; docs/architecture.md, "Socket to socket, hop by hop").
protocol CommitObserver: Sendable {
    func committed(_ change: CommittedChange)
}

/// A store's observers: registered once, when the relay starts (``Relay``), told of each commit.
final class CommitObservers: Sendable {
    private let observers = Mutex<[any CommitObserver]>([])

    init() {}

    /// Adds `observer`: it hears every commit from now on.
    func add(_ observer: any CommitObserver) {
        observers.withLock { $0.append(observer) }
    }

    /// Tells every observer of `change`; called by the store, in commit order.
    func publish(_ change: CommittedChange) {
        for observer in observers.withLock({ $0 }) { observer.committed(change) }
    }
}
