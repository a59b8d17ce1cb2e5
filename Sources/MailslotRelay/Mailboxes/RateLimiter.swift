import MailslotWire
import Synchronization

/// Token buckets per key (an author's creates; a claimer's or an owner's prekey claims,
/// ``PrekeyClaimLimiter``): `rate` tokens a second, up to `burst`.
/// Buckets idle long enough to be full again are forgotten, so memory stays bounded by the
/// number of recently active authors. A lock, not an actor: a send decides everything it can
/// without waiting, so that a socket's sends reach the store in the order they arrived.
final class RateLimiter: Sendable {
    private struct Bucket {
        var tokens: Double
        var updatedAt: Int64
    }

    private let rate: Double
    private let burst: Double
    private let state = Mutex<(buckets: [String: Bucket], lastPrune: Int64)>(([:], 0))

    init(rate: Double, burst: Double) {
        self.rate = rate
        self.burst = burst
    }

    /// Takes one token for `author` at `now` (ms). Nil when allowed; otherwise the whole seconds to
    /// wait before a token is available (for `Retry-After`) — before `short + 1` are, when the
    /// caller already found `short` missing for earlier creates of the same send to many, so
    /// that each refused entry's wait covers the ones before it.
    func take(_ author: String, now: Int64, short: Int = 0) -> Int? {
        state.withLock { state in
            prune(&state, now: now)
            var bucket = state.buckets[author] ?? Bucket(tokens: burst, updatedAt: now)
            bucket.tokens = min(burst, bucket.tokens + Double(max(0, now - bucket.updatedAt)) / 1000 * rate)
            bucket.updatedAt = now
            defer { state.buckets[author] = bucket }
            guard bucket.tokens >= 1 else { return Self.retryAfter(seconds: (Double(short) + 1 - bucket.tokens) / rate) }
            bucket.tokens -= 1
            return nil
        }
    }

    /// Gives back the token of a create that turned out to be an identical retry (they take none).
    func refund(_ author: String) {
        state.withLock { state in
            guard var bucket = state.buckets[author] else { return }
            bucket.tokens = min(burst, bucket.tokens + 1)
            state.buckets[author] = bucket
        }
    }

    /// `seconds` as a `Retry-After`: whole seconds, rounded up, from 1 to the longest a client
    /// takes (``RelayAnswers/maxRetryAfter``). Saturating: a tiny rate (a large `--relays`
    /// dividing a small one) gives the longest wait, never a trap converting it to `Int`.
    static func retryAfter(seconds: Double) -> Int {
        let rounded = seconds.rounded(.up)
        guard rounded < Double(RelayAnswers.maxRetryAfter) else { return RelayAnswers.maxRetryAfter }
        return rounded >= 1 ? Int(rounded) : 1
    }

    /// How long an emptied bucket takes to fill, in ms; saturating, as ``retryAfter(seconds:)``
    /// (a huge burst over a small rate is longer than `Int64` holds).
    var refillMilliseconds: Int64 {
        let refill = (burst / rate * 1000).rounded(.up)
        return refill < Double(Int64.max) ? Int64(refill) : .max
    }

    private func prune(_ state: inout (buckets: [String: Bucket], lastPrune: Int64), now: Int64) {
        let refill = refillMilliseconds
        guard now - state.lastPrune > max(refill, 10_000) else { return }
        state.lastPrune = now
        state.buckets = state.buckets.filter { now - $0.value.updatedAt < refill }
    }
}
