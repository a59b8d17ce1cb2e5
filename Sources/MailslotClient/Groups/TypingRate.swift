import MailslotWire

/// The typing rate to groups (spec/groups.md §4.5: at most one `active: true` per 5 s per group).
///
/// Each indicator is a copy to every member, so a client that sent one per keystroke would send a
/// message to each member per keystroke. A group's next `active: true` is admitted only once
/// ``interval`` has passed since the last one admitted; `active: false` is not counted here (it
/// always goes: it ends what the members show). Kept in memory only: a client started again may
/// send one at once, which the rate allows for a new typing burst anyway.
struct TypingRate: Sendable {
    /// The least time between two `active: true` indicators to one group.
    static let interval: Duration = .seconds(5)

    /// When each group's last admitted `active: true` was sent. Only entries younger than
    /// ``interval`` matter; older ones are dropped as others are added, so this holds at most the
    /// groups typed into in the last 5 s.
    private(set) var last: [GroupID: ContinuousClock.Instant] = [:]

    /// Whether an `active: true` to `group` may go at `now`; when it may, it is counted as sent.
    mutating func admit(_ group: GroupID, at now: ContinuousClock.Instant) -> Bool {
        if let previous = last[group], now - previous < Self.interval { return false }
        last = last.filter { now - $0.value < Self.interval }
        last[group] = now
        return true
    }

    /// Forgets the indicator ``admit(_:at:)`` counted at `admitted` for `group`, when it could not be
    /// sent after all: the next one may go at once.
    mutating func revoke(_ group: GroupID, admittedAt admitted: ContinuousClock.Instant) {
        if last[group] == admitted { last[group] = nil }
    }
}
