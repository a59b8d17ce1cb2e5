// Several relays sharing one store: what each tells the others, so that a message stored through
// one node reaches its owner's subscription on another at once, and a new subscription on one
// node ends the older one on another. The store stays the truth: a signal only says "read the
// store again", so a lost signal delays a delivery but never loses it. A store only one process
// uses (SQLite) has no signals: its relay's own hub sees every write.

/// What another node said.
enum ClusterEvent: Sendable, Equatable {
    /// Messages were stored in (or unsent from) these mailboxes.
    case changed(mailboxes: [String])
    /// Anything may have changed (a signal too large to name the mailboxes, or signals missed
    /// while this node was not listening): every live subscription reads the store again.
    case recheckAll
    /// A subscription to `mailbox` began with `generation`: a subscription with a lower one ends.
    case subscribed(mailbox: String, generation: Int64)
    /// A claim left `count` of `mailbox`'s one-time prekeys, below the low-water mark
    /// (``ClaimedPrekey/crossedLowWater``): the mailbox's subscription here tells its owner.
    case prekeysLow(mailbox: String, count: Int)
}

/// The carrier of ``ClusterEvent``s between the relays that share a store.
protocol ClusterSignals: Sendable {
    /// Delivers the other nodes' events to `handler`, until ``stop()``; after any gap in
    /// listening (a dropped connection), a ``ClusterEvent/recheckAll`` once listening again.
    func start(_ handler: @escaping @Sendable (ClusterEvent) -> Void)

    /// Draws a generation for a new subscription to `mailbox`, higher than every one drawn before
    /// on any node, and tells the other nodes (their older subscriptions to it end).
    func announceSubscription(to mailbox: String) async throws -> Int64

    /// A subscription to `mailbox` of `generation` ended on this node: unless a newer one took
    /// over, the mailbox no longer counts as connected here, and its wake-ups go out again
    /// (docs/design/wakeups.md §2.3).
    func subscriptionEnded(mailbox: String, generation: Int64) async throws

    /// The newest generation announced for each of `mailboxes` (those ever subscribed to): what
    /// a node compares its own subscriptions with after a gap in listening.
    func newestGenerations(of mailboxes: [String]) async throws -> [String: Int64]

    /// Stops listening; this node's subscriptions no longer count as connected anywhere.
    func stop() async
}
