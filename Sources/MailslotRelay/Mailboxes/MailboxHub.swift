import Synchronization

/// What a subscription hears from the hub: the mailbox's commits, in commit order, and the
/// other events that concern it. Implemented by ``Subscriber`` (which hands each to its
/// ``SubscriberStateMachine``); calls come from the commit path and from the cluster listener,
/// so they must return at once.
protocol MailboxListener: AnyObject, Sendable {
    /// A message was committed to the mailbox (in commit order).
    func committed(_ message: StoredMessage)
    /// Message `id` was erased from the mailbox.
    func erased(_ id: String)
    /// The mailbox changed in ways this relay did not see (another relay wrote): read the store again.
    func recheck()
    /// A newer subscription took over (or the subscription was unsubscribed): end, once.
    func ended()
    /// A claim left the owner `count` one-time prekeys, below the low-water mark
    /// (a `prekeys` frame, spec/protocol.md §8.4).
    func prekeysLow(_ count: Int)
}

/// Who is subscribed to which mailbox, so that a new message reaches its owner's subscription at
/// once. One subscription per mailbox: a newer one takes over and the older one is told to end.
/// With several relays on one store, "newer" is the higher generation, drawn from the store
/// (``ClusterSignals/announceSubscription(to:)``), and other nodes' events arrive through
/// ``handle(_:)``: their new messages make a subscription read the store again.
///
/// The hub is its store's ``CommitObserver``: each commit of this relay reaches the mailbox's
/// subscription (``committed(_:)``), so that a subscription that has caught up with the store
/// delivers it without reading it back. The store stays the truth: a subscription that falls
/// behind, or whose small buffer overflowed, reads from the store again (``SubscriberStateMachine``).
///
/// A lock rather than an actor: the commit calls run inside the group commit, after the commit
/// and in commit order, which is what lets a subscription trust the order of what it is handed.
final class MailboxHub: CommitObserver {
    /// A live subscription: a registration of one ``MailboxListener`` for one mailbox, ended by a
    /// newer subscription. Events are calls, not a stream: an idle subscription keeps no task waiting.
    final class Subscription: Sendable {
        let id: Int
        /// Orders subscriptions to one mailbox, on every node: the highest is the live one.
        let generation: Int64
        private let listener: (any MailboxListener)?
        private let ended = Mutex(false)

        init(id: Int, generation: Int64, listener: (any MailboxListener)?) {
            self.id = id
            self.generation = generation
            self.listener = listener
        }

        /// Ends the subscription (once).
        func end() {
            guard ended.withLock({ ended in defer { ended = true }; return !ended }) else { return }
            listener?.ended()
        }

        /// Whether it was ended (replaced or unsubscribed).
        var isEnded: Bool { ended.withLock { $0 } }

        fileprivate func committed(_ message: StoredMessage) { if !isEnded { listener?.committed(message) } }
        fileprivate func erased(_ id: String) { if !isEnded { listener?.erased(id) } }
        fileprivate func recheck() { if !isEnded { listener?.recheck() } }
        fileprivate func prekeysLow(_ count: Int) { if !isEnded { listener?.prekeysLow(count) } }
    }

    private struct State {
        var subscriptions: [String: Subscription] = [:]
        var nextID = 0
        /// The newest generations other nodes announced for mailboxes without a subscription
        /// here: a subscription whose generation was drawn before one of these, but registered
        /// after it arrived, is already replaced. Only that short race needs them; kept bounded.
        var elsewhere: [String: (generation: Int64, at: ContinuousClock.Instant)] = [:]
    }

    /// At most this many announcements from other nodes are remembered, each for ``elsewhereKept``.
    static let elsewhereLimit = 4096
    static let elsewhereKept: Duration = .seconds(30)

    private let state = Mutex(State())

    /// Registers a subscription for `uid`'s mailbox, ending the previous one. `generation` orders
    /// it among subscriptions to the mailbox on every node (nil: after every earlier one, for a
    /// store no other node shares); a subscription older than one already known is ended at once.
    /// The second value is the subscription it replaced, if any. `listener` hears the mailbox's
    /// commits and events, and its end once a newer subscription takes over (or on
    /// ``unsubscribe(_:_:)``).
    func subscribe(_ uid: String, generation: Int64? = nil,
                   listener: (any MailboxListener)? = nil) -> (Subscription, replaced: Subscription?) {
        let (subscription, previous, superseded) = state.withLock { state in
            state.nextID += 1
            let subscription = Subscription(id: state.nextID, generation: generation ?? Int64(state.nextID), listener: listener)
            if let newer = state.elsewhere[uid], newer.generation > subscription.generation {
                return (subscription, Subscription?.none, true)
            }
            if let current = state.subscriptions[uid], current.generation > subscription.generation {
                return (subscription, nil, true)
            }
            state.elsewhere[uid] = nil
            return (subscription, state.subscriptions.updateValue(subscription, forKey: uid), false)
        }
        previous?.end()
        if superseded { subscription.end() }
        return (subscription, previous)
    }

    /// Another node's event: a subscription there ends an older one here; new messages make
    /// the mailbox's subscription here read the store again.
    func handle(_ event: ClusterEvent) {
        switch event {
        case .changed(let mailboxes):
            let found = state.withLock { state in mailboxes.compactMap { state.subscriptions[$0] } }
            for subscription in found { subscription.recheck() }
        case .recheckAll:
            for subscription in state.withLock({ Array($0.subscriptions.values) }) { subscription.recheck() }
        case .subscribed(let uid, let generation):
            let replaced = state.withLock { state -> Subscription? in
                if let current = state.subscriptions[uid] {
                    guard current.generation < generation else { return nil }
                    state.subscriptions[uid] = nil
                    return current
                }
                let now = ContinuousClock.now
                if state.elsewhere.count >= Self.elsewhereLimit {
                    state.elsewhere = state.elsewhere.filter { $0.value.at.duration(to: now) < Self.elsewhereKept }
                    if state.elsewhere.count >= Self.elsewhereLimit { state.elsewhere.removeAll() }
                }
                if (state.elsewhere[uid]?.generation ?? 0) < generation { state.elsewhere[uid] = (generation, now) }
                return nil
            }
            replaced?.end()
        case .prekeysLow(let uid, let count):
            prekeysLow(uid, count: count)
        }
    }

    /// A claim (on this node, or another's, through ``handle(_:)``) left `uid` `count` one-time
    /// prekeys, below the low-water mark: its subscription here, if any, tells the owner. Nothing
    /// is kept for a mailbox without one: its owner learns the count from its next `ready` frame.
    func prekeysLow(_ uid: String, count: Int) {
        state.withLock { $0.subscriptions[uid] }?.prekeysLow(count)
    }

    /// Removes `subscription` if it is still the current one for `uid`.
    func unsubscribe(_ uid: String, _ subscription: Subscription) {
        state.withLock { state in
            if state.subscriptions[uid]?.id == subscription.id { state.subscriptions[uid] = nil }
        }
        subscription.end()
    }

    /// The store committed `change` (``CommitObserver``): it reaches the mailbox's subscription.
    func committed(_ change: CommittedChange) {
        switch change {
        case .created(let message, _): committed(message)
        case .erased(let recipient, let id): erased(recipient, id: id)
        case .elsewhere(let event): handle(event)
        }
    }

    /// A message was committed to its recipient's mailbox. Called in commit order.
    func committed(_ message: StoredMessage) {
        state.withLock { $0.subscriptions[message.recipient] }?.committed(message)
    }

    /// Message `id` of `uid`'s mailbox was erased: a subscription must not deliver it from memory.
    func erased(_ uid: String, id: String) {
        state.withLock { $0.subscriptions[uid] }?.erased(id)
    }

    /// Whether `uid`'s mailbox has a live subscription here: a wake-up for it would wake a device
    /// that is already connected (docs/design/wakeups.md §2.2, §2.4).
    func isSubscribed(_ uid: String) -> Bool {
        state.withLock { $0.subscriptions[uid] != nil }
    }

    /// The mailboxes with a subscription here.
    var mailboxes: [String] { state.withLock { Array($0.subscriptions.keys) } }

    /// The number of open subscriptions.
    var count: Int { state.withLock { $0.subscriptions.count } }
}
