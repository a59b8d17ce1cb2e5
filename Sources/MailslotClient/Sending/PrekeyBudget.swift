/// How many one-time prekeys this client may make, whatever the relay says it holds: a bucket of
/// ``capacity`` prekeys that refills over ``refill``.
///
/// The relay's count (in a `ready` or `prekeys` frame, or an answer) is what starts a top-up, and a
/// relay can lie: a stream of `{"type":"prekeys","prekeys":0}` frames would otherwise make the
/// client generate, store and upload a hundred keys a frame — CPU and disk spent at the relay's
/// word, and unused secrets pushed out of the thousand kept. An honest relay cannot drain faster
/// than its claim limits allow (spec/protocol.md §4.14: 0.2 claims a second and a burst of 30 per
/// owner by default, about 150 in ten minutes), so three supplies in ten minutes leave honest
/// top-ups untouched.
struct PrekeyBudget: Sendable {
    /// The most prekeys made within ``refill``.
    static let capacity = 3 * MailslotClient.prekeySupply
    /// How long an empty budget takes to fill again.
    static let refill: Duration = .seconds(600)

    private var available = Double(Self.capacity)
    private var last: ContinuousClock.Instant?

    /// Takes up to `wanted` prekeys from the budget at `now`; returns how many may be made.
    mutating func take(_ wanted: Int, at now: ContinuousClock.Instant) -> Int {
        if let last {
            let elapsed = Double((now - last) / Self.refill)
            available = min(Double(Self.capacity), available + max(0, elapsed) * Double(Self.capacity))
        }
        last = now
        let granted = max(0, min(wanted, Int(available)))
        available -= Double(granted)
        return granted
    }
}
