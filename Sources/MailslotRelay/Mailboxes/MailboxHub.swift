import Synchronization

/// Who is subscribed to which mailbox, so that a new message reaches its owner's subscription at
/// once. One subscription per mailbox: a newer one takes over and the older one is told to end.
/// With several relays on one store, "newer" is the higher generation, drawn from the store
/// (``ClusterSignals/announceSubscription(to:)``), and other nodes' events arrive through
/// ``handle(_:)``: their new messages make a subscription read the store again.
///
/// A committed message is handed to its mailbox's subscription (``push(_:)``), so that a
/// subscription that has caught up with the store delivers it without reading it back. The
/// store stays the truth: a subscription that falls behind, or whose small buffer overflowed,
/// reads from the store again (see ``Subscription/takeFresh(limit:)``).
///
/// A lock rather than an actor: ``push(_:)`` runs inside the group commit, after the commit and
/// in commit order, which is what lets a subscription trust the order of what it is handed.
final class MailboxHub: Sendable {
    /// A live subscription: woken by new messages and acks, ended by a newer subscription.
    /// Wake-ups and the end are calls, not a stream: an idle subscription keeps no task waiting.
    final class Subscription: Sendable {
        let id: Int
        /// Orders subscriptions to one mailbox, on every node: the highest is the live one.
        let generation: Int64
        private let onWake: @Sendable () -> Void
        private let onEnd: @Sendable () -> Void
        private let onPrekeysLow: @Sendable (Int) -> Void
        private let ended = Mutex(false)
        private let fresh = Mutex(Fresh())

        /// Messages committed since the subscription last read the store, in commit order.
        private struct Fresh {
            var messages: [StoredMessage] = []
            var bytes = 0
            /// Some message was not kept (the buffer was full): only the store has them all.
            var incomplete = false
        }

        /// At most this many messages, and this many envelope bytes, wait in memory per
        /// subscription between two turns of its delivery loop. (A subscription whose window is
        /// full keeps none: see ``forgetFresh()``.)
        static let freshLimit = (messages: 256, bytes: 256 * 1024)

        init(id: Int, generation: Int64, onWake: @escaping @Sendable () -> Void, onEnd: @escaping @Sendable () -> Void,
             onPrekeysLow: @escaping @Sendable (Int) -> Void = { _ in }) {
            self.id = id
            self.generation = generation
            self.onWake = onWake
            self.onEnd = onEnd
            self.onPrekeysLow = onPrekeysLow
        }

        /// A claim left the owner `count` one-time prekeys, below the low-water mark: the
        /// subscriber tells its owner (a `prekeys` frame, spec/protocol.md §8.4).
        func prekeysLow(_ count: Int) {
            if !isEnded { onPrekeysLow(count) }
        }

        /// Wakes the delivery loop (the subscriber coalesces wake-ups).
        func wake() {
            if !isEnded { onWake() }
        }

        /// Ends the subscription (once).
        func end() {
            guard ended.withLock({ ended in defer { ended = true }; return !ended }) else { return }
            onEnd()
        }

        /// Whether it was ended (replaced or unsubscribed).
        var isEnded: Bool { ended.withLock { $0 } }

        fileprivate func push(_ message: StoredMessage) {
            fresh.withLock { fresh in
                guard !fresh.incomplete else { return }
                guard fresh.messages.count < Self.freshLimit.messages, fresh.bytes + message.size <= Self.freshLimit.bytes else {
                    fresh.incomplete = true
                    fresh.messages.removeAll()
                    fresh.bytes = 0
                    return
                }
                fresh.messages.append(message)
                fresh.bytes += message.size
            }
            wake()
        }

        fileprivate func retract(_ id: String) {
            fresh.withLock { fresh in
                guard let index = fresh.messages.firstIndex(where: { $0.id == id }) else { return }
                fresh.bytes -= fresh.messages.remove(at: index).size
            }
        }

        /// Up to `limit` of the messages committed since ``startStoreRead()``, oldest first; nil
        /// when some were not kept, and the store must be read instead.
        func takeFresh(limit: Int) -> [StoredMessage]? {
            fresh.withLock { fresh in
                guard !fresh.incomplete else { return nil }
                let taken = Array(fresh.messages.prefix(limit))
                fresh.messages.removeFirst(taken.count)
                fresh.bytes -= taken.reduce(0) { $0 + $1.size }
                return taken
            }
        }

        /// The window is full: keep nothing in memory until the next store read, so that a
        /// recipient that stops acking costs the relay no memory; its messages wait on disk.
        func forgetFresh() {
            fresh.withLock { $0 = Fresh(incomplete: true) }
        }

        /// The store changed in ways this node did not see (another node wrote): read it again.
        func recheck() {
            forgetFresh()
            wake()
        }

        /// Call just before reading the store: what was pushed until now is in that read (every
        /// push follows its commit), so it is dropped; what is pushed from now on is kept.
        func startStoreRead() {
            fresh.withLock { $0 = Fresh() }
        }
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
    /// The second value is the subscription it replaced, if any. `onWake` is called when there
    /// may be something to deliver, `onEnd` once when a newer subscription takes over (or on
    /// ``unsubscribe(_:_:)``); `onPrekeysLow` when a claim took the owner's one-time prekeys below
    /// the low-water mark (``prekeysLow(_:count:)``).
    func subscribe(_ uid: String, generation: Int64? = nil, onWake: @escaping @Sendable () -> Void = {},
                   onEnd: @escaping @Sendable () -> Void = {},
                   onPrekeysLow: @escaping @Sendable (Int) -> Void = { _ in }) -> (Subscription, replaced: Subscription?) {
        let (subscription, previous, superseded) = state.withLock { state in
            state.nextID += 1
            let subscription = Subscription(id: state.nextID, generation: generation ?? Int64(state.nextID), onWake: onWake, onEnd: onEnd,
                                            onPrekeysLow: onPrekeysLow)
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

    /// A message was committed to its recipient's mailbox. Called in commit order.
    func push(_ message: StoredMessage) {
        state.withLock { $0.subscriptions[message.recipient] }?.push(message)
    }

    /// Message `id` of `uid`'s mailbox was erased: a subscription must not deliver it from memory.
    func retract(_ uid: String, id: String) {
        state.withLock { $0.subscriptions[uid] }?.retract(id)
    }

    /// The mailboxes with a subscription here.
    var mailboxes: [String] { state.withLock { Array($0.subscriptions.keys) } }

    /// The number of open subscriptions.
    var count: Int { state.withLock { $0.subscriptions.count } }
}
