import Testing
@testable import MailslotRelay

/// The claim buckets on their own, with the time passed in (spec/protocol.md §4.14): the share
/// one claimer may take of an owner's bucket, over time; the division among several relays.
@Suite struct PrekeyClaimLimiterTests {
    /// Mallory claims bob's prekeys as fast as the buckets allow for ten minutes; every minute a
    /// claimer that never claimed bob's before is still served, and mallory never gets more than
    /// its share.
    @Test func aClaimerAtFullSpeedLeavesTheRestOfTheOwnersBucketToOthers() {
        let limiter = PrekeyClaimLimiter(claimerRate: 1, claimerBurst: 60, ownerRate: 0.2, ownerBurst: 30)
        var mallory = 0
        for second in 0..<600 {
            let now = Int64(second) * 1000
            while limiter.take(claimer: "mallory", owner: "bob", now: now) { mallory += 1 }
            if second % 60 == 59 {
                #expect(limiter.take(claimer: "fresh\(second)", owner: "bob", now: now), "a fresh claimer at \(second) s")
            }
        }
        // Half the owner's burst, and half its rate: 15 + 0.1 × 599 s, give or take a token.
        #expect((70...76).contains(mallory), "\(mallory)")
    }

    /// The pair's token of a claim the owner's bucket refused is given back: a claimer refused for
    /// others' claims keeps its share.
    @Test func aClaimTheOwnersBucketRefusedCostsThePairNothing() {
        let limiter = PrekeyClaimLimiter(claimerRate: 100, claimerBurst: 100, ownerRate: 0.01, ownerBurst: 4)
        #expect(limiter.take(claimer: "a", owner: "bob", now: 0) && limiter.take(claimer: "a", owner: "bob", now: 0))
        #expect(!limiter.take(claimer: "a", owner: "bob", now: 0), "a's share of 2 is spent")
        #expect(limiter.take(claimer: "b", owner: "bob", now: 0) && limiter.take(claimer: "b", owner: "bob", now: 0))
        #expect(!limiter.take(claimer: "c", owner: "bob", now: 0), "the owner's bucket is empty")
        // 100 s later the owner's bucket has one token; c's pair bucket was never charged.
        #expect(limiter.take(claimer: "c", owner: "bob", now: 100_000))
    }

    /// With N relays each takes 1/N of every rate and burst (at least one token of burst).
    @Test func severalRelaysShareTheBuckets() {
        let limiter = PrekeyClaimLimiter(claimerRate: 1, claimerBurst: 60, ownerRate: 0.2, ownerBurst: 30, relays: 2)
        var claims = 0
        for index in 0..<40 where limiter.take(claimer: "c\(index)", owner: "bob", now: 0) { claims += 1 }
        #expect(claims == 15, "the owner's burst of 30 over 2 relays")
        #expect(limiter.retryAfter == 20, "one token of a pair's bucket: 1 / (0.2 / 2 × 0.5) s")
        let alone = PrekeyClaimLimiter(claimerRate: 1, claimerBurst: 1, ownerRate: 1, ownerBurst: 1, relays: 4)
        #expect(alone.take(claimer: "a", owner: "bob", now: 0), "a burst shared out is at least 1")
    }

    /// The slowest buckets the settings allow (the lowest rates over 1000 relays) and the largest
    /// bursts start and answer without a trap: `Retry-After` saturates at the longest a client
    /// takes (2³¹−1 s), and so does a bucket's refill time.
    @Test func extremeSettingsSaturateRatherThanTrap() {
        let slowest = PrekeyClaimLimiter(claimerRate: 0.01, claimerBurst: 1, ownerRate: 0.01, ownerBurst: 1, relays: RelayConfiguration.maxRelays)
        #expect((200_000...200_001).contains(slowest.retryAfter), "one token of a pair's bucket: 1 / (0.01 / 1000 × 0.5) s, give or take rounding")
        #expect(slowest.take(claimer: "a", owner: "bob", now: 0) && !slowest.take(claimer: "a", owner: "bob", now: 1))
        #expect(RateLimiter.retryAfter(seconds: 1e300) == Int(Int32.max))
        #expect(RateLimiter.retryAfter(seconds: 1e-9) == 1 && RateLimiter.retryAfter(seconds: 2.1) == 3)
        let huge = PrekeyClaimLimiter(claimerRate: 1e-300, claimerBurst: 1e300, ownerRate: 1e-300, ownerBurst: 1e300, relays: 1)
        #expect(huge.retryAfter == Int(Int32.max))
        #expect(huge.take(claimer: "a", owner: "bob", now: 20_000), "a first take prunes: the refill time saturates")
        let bucket = RateLimiter(rate: 1e-300, burst: 1)
        #expect(bucket.refillMilliseconds == .max)
        #expect(bucket.take("a", now: 20_000) == nil && bucket.take("a", now: 20_001) == Int(Int32.max))
    }
}
