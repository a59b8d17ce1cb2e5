/// The two token buckets of prekey claims (spec/protocol.md §4.14): one per claimer, so that no
/// one account drains many owners' supplies fast, and one per claimed owner, so that many
/// accounts together cannot drain one owner's. In memory, per relay, like the create limit.
///
/// A refusal does not tell the claimer which bucket was empty: the answer is the same, and its
/// `Retry-After` is the longest a single token can take in either bucket (a bucket never owes
/// more than one), so it says nothing of other claimers' activity.
struct PrekeyClaimLimiter: Sendable {
    private let claimers: RateLimiter
    private let owners: RateLimiter
    /// The `Retry-After` of every refusal, in seconds.
    let retryAfter: Int

    init(claimerRate: Double, claimerBurst: Double, ownerRate: Double, ownerBurst: Double) {
        claimers = RateLimiter(rate: claimerRate, burst: claimerBurst)
        owners = RateLimiter(rate: ownerRate, burst: ownerBurst)
        retryAfter = max(1, Int((1 / min(claimerRate, ownerRate)).rounded(.up)))
    }

    /// Takes a token from `claimer`'s bucket, then one from `owner`'s; false when either was empty.
    /// A token taken from the claimer's bucket stays taken: every attempt counts against it.
    func take(claimer: String, owner: String, now: Int64) -> Bool {
        claimers.take(claimer, now: now) == nil && owners.take(owner, now: now) == nil
    }

    /// Gives back the owner's token of a claim that was refused (a blocked claimer): one the owner
    /// refuses must not use up the supply others may claim.
    func refund(owner: String) {
        owners.refund(owner)
    }
}
