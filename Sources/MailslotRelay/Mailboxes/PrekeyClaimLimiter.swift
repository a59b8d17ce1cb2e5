/// The token buckets of prekey claims (spec/protocol.md §4.14): one per claimer, so that no one
/// account drains many owners' supplies fast; one per claimed owner, so that many accounts
/// together cannot drain one owner's; and one per (claimer, owner) pair holding ``pairShare`` of
/// the owner's rate and burst, so that one account cannot empty the owner's bucket and starve the
/// others: whatever it does, the rest of the owner's bucket is left to claimers it does not hold
/// — a claimer that never claimed this owner before always finds its own pair bucket full.
///
/// In memory, per relay, like the create limit. With several relays sharing a database, each
/// gets 1/`relays` of every rate and burst (``init(claimerRate:claimerBurst:ownerRate:ownerBurst:relays:)``):
/// however a claimer's requests spread over the relays, all of them together allow what one
/// relay alone would (docs/operations.md, "Limits, sweeps and metrics on several relays").
///
/// Memory: a pair bucket is made only by a claim its claimer's bucket let through, and forgotten
/// by the first prune after it is full again (``RateLimiter``); prunes run at most once per
/// refill time, so a bucket may outlive its last claim by up to two refill times (2 × 15 / 0.1 s
/// = 300 s by default). So at most (claimer burst + claimer rate × 2 × a pair bucket's refill
/// time) pairs per recently active claimer: 60 + 1 × 300 = 360 with the defaults (per relay,
/// 1/N of that with `--relays N`, as long as the shared-out bursts are not raised to 1).
///
/// The half share holds while a pair's burst is at least 1 of its own: once the owner's burst
/// over `relays` is below 2, the pair's burst is raised to 1 (``init(claimerRate:claimerBurst:ownerRate:ownerBurst:relays:)``),
/// more than half, and below 1 the owner's is raised to 1 too — one claimer may then take the
/// whole of an owner's bucket on that relay (docs/operations.md).
///
/// A refusal does not tell the claimer which bucket was empty: the answer is the same, and its
/// `Retry-After` is the longest a single token can take in any bucket (a bucket never owes
/// more than one), so it says nothing of other claimers' activity.
struct PrekeyClaimLimiter: Sendable {
    private let claimers: RateLimiter
    private let owners: RateLimiter
    private let pairs: RateLimiter
    /// The `Retry-After` of every refusal, in seconds.
    let retryAfter: Int

    /// The part of an owner's claim rate and burst one claimer may take.
    static let pairShare = 0.5

    /// Buckets for one relay of `relays` sharing a database; the rates and bursts are the
    /// settings', for all relays together. A burst shared out is at least 1.
    init(claimerRate: Double, claimerBurst: Double, ownerRate: Double, ownerBurst: Double, relays: Int = 1) {
        let share = Double(max(1, relays))
        let claimerRate = claimerRate / share, ownerRate = ownerRate / share
        let claimerBurst = max(1, claimerBurst / share), ownerBurst = max(1, ownerBurst / share)
        let pairRate = ownerRate * Self.pairShare, pairBurst = max(1, ownerBurst * Self.pairShare)
        claimers = RateLimiter(rate: claimerRate, burst: claimerBurst)
        owners = RateLimiter(rate: ownerRate, burst: ownerBurst)
        pairs = RateLimiter(rate: pairRate, burst: pairBurst)
        retryAfter = RateLimiter.retryAfter(seconds: 1 / min(claimerRate, pairRate))
    }

    /// Takes a token from `claimer`'s bucket, then one from the pair's, then one from `owner`'s;
    /// false when any was empty. A token taken from the claimer's bucket stays taken: every
    /// attempt counts against it. The pair's token of a claim the owner's bucket refused is given
    /// back: it was not a claim of the owner's supply.
    func take(claimer: String, owner: String, now: Int64) -> Bool {
        guard claimers.take(claimer, now: now) == nil else { return false }
        let pair = Self.pairKey(claimer: claimer, owner: owner)
        guard pairs.take(pair, now: now) == nil else { return false }
        guard owners.take(owner, now: now) == nil else {
            pairs.refund(pair)
            return false
        }
        return true
    }

    /// Gives back the owner's and the pair's tokens of a claim that was refused (a blocked
    /// claimer): one the owner refuses must not use up the supply others may claim.
    func refund(claimer: String, owner: String) {
        owners.refund(owner)
        pairs.refund(Self.pairKey(claimer: claimer, owner: owner))
    }

    /// A pair's key: uids hold no space (spec/protocol.md §1), so no two pairs share one.
    private static func pairKey(claimer: String, owner: String) -> String { claimer + " " + owner }
}
