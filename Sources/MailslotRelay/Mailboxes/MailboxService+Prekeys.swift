import MailslotWire

// One-time prekeys (spec/protocol.md §4.14): the owner uploads, counts and withdraws them; any
// signed-in user claims one, which erases it. Every function asks the rules first, as the rest
// of the service does.
extension MailboxService {
    /// Adds the owner's uploaded prekeys; the number stored afterwards.
    func uploadPrekeys(_ principal: Principal, owner: String, _ upload: PrekeyUpload, now: Int64) async throws -> PrekeyCount {
        try Self.check(uid: owner)
        try require(.create, .prekeys, principal, owner: owner)
        let prekeys = try Self.checked(upload)
        do {
            return PrekeyCount(count: try await store.addPrekeys(uid: owner, prekeys, limit: configuration.maxPrekeys, now: now))
        } catch let refusal as StoreRefusal {
            throw problem(refusal)
        }
    }

    /// The number of prekeys the relay holds for the owner.
    func prekeyCount(_ principal: Principal, owner: String) async throws -> PrekeyCount {
        try Self.check(uid: owner)
        try require(.read, .prekeys, principal, owner: owner)
        return PrekeyCount(count: try await store.prekeyCount(uid: owner))
    }

    /// Erases all of the owner's prekeys (none stored is no error).
    func deletePrekeys(_ principal: Principal, owner: String) async throws {
        try Self.check(uid: owner)
        try require(.delete, .prekeys, principal, owner: owner)
        try await store.deletePrekeys(uid: owner)
        erasure.erased()
    }

    /// Takes one of `owner`'s prekeys for the principal, erasing it; nil when none is left. Limited
    /// per claimer, per owner and per pair (``PrekeyClaimLimiter``); a claimer the owner blocked is
    /// refused as its sends are (`403 blocked`). A claim that takes the owner's supply below the
    /// low-water mark tells the owner's subscription on this relay (other relays hear it from the
    /// store, ``RelayStore/claimPrekey(uid:claimer:)``).
    func claimPrekey(_ principal: Principal, owner: String, now: Int64) async throws -> PrekeyClaim {
        try Self.check(uid: owner)
        try require(.claim, .prekeys, principal, owner: owner)
        guard prekeyClaims.take(claimer: principal.uid, owner: owner, now: now) else {
            metrics.prekeyClaim(result: "limited")
            throw Problem(.prekeyClaimsLimited, "too many prekey claims; slow down", retryAfter: prekeyClaims.retryAfter)
        }
        let claimed: ClaimedPrekey?
        do {
            claimed = try await store.claimPrekey(uid: owner, claimer: principal.uid)
        } catch let refusal as StoreRefusal {
            if refusal == .blocked { prekeyClaims.refund(claimer: principal.uid, owner: owner) }
            throw problem(refusal)
        }
        guard let claimed else {
            metrics.prekeyClaim(result: "empty")
            return PrekeyClaim(prekey: nil)
        }
        metrics.prekeyClaim(result: "claimed")
        erasure.erased()
        if claimed.crossedLowWater { hub.prekeysLow(owner, count: claimed.remaining) }
        return PrekeyClaim(prekey: Prekey(id: claimed.prekey.id, keyText: claimed.prekey.key))
    }

    /// The upload's prekeys, each checked: 1 to ``PrekeyUpload/maximumBatch`` of them, ids
    /// distinct and at least 1, keys strict base64url of 32 bytes that are not low-order points.
    static func checked(_ upload: PrekeyUpload) throws -> [StoredPrekey] {
        guard (1...PrekeyUpload.maximumBatch).contains(upload.prekeys.count) else {
            throw Problem(.invalidPrekey, "an upload carries 1 to \(PrekeyUpload.maximumBatch) prekeys")
        }
        var ids = Set<UInt32>()
        return try upload.prekeys.map { prekey in
            guard prekey.id >= 1 else { throw Problem(.invalidPrekey, "a prekey id is 1 to \(UInt32.max)") }
            guard ids.insert(prekey.id).inserted else { throw Problem(.invalidPrekey, "prekey id \(prekey.id) appears twice") }
            guard let key = prekey.publicKey else {
                throw Problem(.invalidPrekey, "prekey \(prekey.id): a key is 32 bytes in unpadded base64url")
            }
            guard key.isUsable else { throw Problem(.invalidPrekey, "prekey \(prekey.id): the key is a low-order point") }
            return StoredPrekey(id: prekey.id, key: prekey.key)
        }
    }
}
