/// Per-author token buckets for message creation: `rate` tokens a second, up to `burst`.
/// Buckets idle long enough to be full again are forgotten, so memory stays bounded by the
/// number of recently active authors.
actor RateLimiter {
    private struct Bucket {
        var tokens: Double
        var updatedAt: Int64
    }

    private let rate: Double
    private let burst: Double
    private var buckets: [String: Bucket] = [:]
    private var lastPrune: Int64 = 0

    init(rate: Double, burst: Double) {
        self.rate = rate
        self.burst = burst
    }

    /// Takes one token for `author` at `now` (ms). Nil when allowed; otherwise the whole seconds to
    /// wait before a token is available (for `Retry-After`).
    func take(_ author: String, now: Int64) -> Int? {
        prune(now: now)
        var bucket = buckets[author] ?? Bucket(tokens: burst, updatedAt: now)
        bucket.tokens = min(burst, bucket.tokens + Double(max(0, now - bucket.updatedAt)) / 1000 * rate)
        bucket.updatedAt = now
        defer { buckets[author] = bucket }
        guard bucket.tokens >= 1 else {
            return max(1, Int(((1 - bucket.tokens) / rate).rounded(.up)))
        }
        bucket.tokens -= 1
        return nil
    }

    /// Gives back the token of a create that turned out to be an identical retry (they take none).
    func refund(_ author: String) {
        guard var bucket = buckets[author] else { return }
        bucket.tokens = min(burst, bucket.tokens + 1)
        buckets[author] = bucket
    }

    private func prune(now: Int64) {
        let refill = Int64(burst / rate * 1000)
        guard now - lastPrune > max(refill, 10_000) else { return }
        lastPrune = now
        buckets = buckets.filter { now - $0.value.updatedAt < refill }
    }
}
