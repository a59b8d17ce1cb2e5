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
    /// wait before a token is available (for `Retry-After`).
    func take(_ author: String, now: Int64) -> Int? {
        state.withLock { state in
            prune(&state, now: now)
            var bucket = state.buckets[author] ?? Bucket(tokens: burst, updatedAt: now)
            bucket.tokens = min(burst, bucket.tokens + Double(max(0, now - bucket.updatedAt)) / 1000 * rate)
            bucket.updatedAt = now
            defer { state.buckets[author] = bucket }
            guard bucket.tokens >= 1 else {
                return max(1, Int(((1 - bucket.tokens) / rate).rounded(.up)))
            }
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

    private func prune(_ state: inout (buckets: [String: Bucket], lastPrune: Int64), now: Int64) {
        let refill = Int64(burst / rate * 1000)
        guard now - state.lastPrune > max(refill, 10_000) else { return }
        state.lastPrune = now
        state.buckets = state.buckets.filter { now - $0.value.updatedAt < refill }
    }
}
