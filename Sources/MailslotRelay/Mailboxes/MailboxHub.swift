import Synchronization

/// Who is subscribed to which mailbox, so that a new message reaches its owner's subscription at
/// once. One subscription per mailbox: a newer one takes over and the older one is told to end.
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
        private let onWake: @Sendable () -> Void
        private let onEnd: @Sendable () -> Void
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

        init(id: Int, onWake: @escaping @Sendable () -> Void, onEnd: @escaping @Sendable () -> Void) {
            self.id = id
            self.onWake = onWake
            self.onEnd = onEnd
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

        /// Call just before reading the store: what was pushed until now is in that read (every
        /// push follows its commit), so it is dropped; what is pushed from now on is kept.
        func startStoreRead() {
            fresh.withLock { $0 = Fresh() }
        }
    }

    private let state = Mutex<(subscriptions: [String: Subscription], nextID: Int)>(([:], 0))

    /// Registers a subscription for `uid`'s mailbox, ending the previous one. The second value is
    /// the subscription it replaced, if any. `onWake` is called when there may be something to
    /// deliver, `onEnd` once when a newer subscription takes over (or on ``unsubscribe(_:_:)``).
    func subscribe(_ uid: String, onWake: @escaping @Sendable () -> Void = {},
                   onEnd: @escaping @Sendable () -> Void = {}) -> (Subscription, replaced: Subscription?) {
        let (subscription, previous) = state.withLock { state in
            state.nextID += 1
            let subscription = Subscription(id: state.nextID, onWake: onWake, onEnd: onEnd)
            return (subscription, state.subscriptions.updateValue(subscription, forKey: uid))
        }
        previous?.end()
        return (subscription, previous)
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

    /// The number of open subscriptions.
    var count: Int { state.withLock { $0.subscriptions.count } }
}
