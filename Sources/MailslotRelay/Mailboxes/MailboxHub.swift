/// Who is subscribed to which mailbox, so that a new message wakes its owner's subscription at
/// once. One subscription per mailbox: a newer one takes over and the older one is told to end.
actor MailboxHub {
    /// A live subscription: woken by `notify`, ended by a newer subscription.
    final class Subscription: Sendable {
        let id: Int
        let wakeups: AsyncStream<Void>
        private let continuation: AsyncStream<Void>.Continuation

        init(id: Int) {
            self.id = id
            (wakeups, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        }

        /// Wakes the delivery loop (notifications coalesce: one pending wake-up is enough).
        func wake() { continuation.yield() }

        /// Ends the delivery loop.
        func end() { continuation.finish() }
    }

    private var subscriptions: [String: Subscription] = [:]
    private var nextID = 0

    /// Registers a subscription for `uid`'s mailbox, ending the previous one. The second value is
    /// the subscription it replaced, if any.
    func subscribe(_ uid: String) -> (Subscription, replaced: Subscription?) {
        nextID += 1
        let subscription = Subscription(id: nextID)
        let previous = subscriptions.updateValue(subscription, forKey: uid)
        previous?.end()
        return (subscription, previous)
    }

    /// Removes `subscription` if it is still the current one for `uid`.
    func unsubscribe(_ uid: String, _ subscription: Subscription) {
        if subscriptions[uid]?.id == subscription.id { subscriptions[uid] = nil }
        subscription.end()
    }

    /// A message landed in `uid`'s mailbox.
    func notify(_ uid: String) {
        subscriptions[uid]?.wake()
    }

    /// The number of open subscriptions.
    var count: Int { subscriptions.count }
}
