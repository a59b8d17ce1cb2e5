import Testing
@testable import MailslotRelay

/// The bound on blob transfers in progress per uid (spec/protocol.md §4.17), and the refusal of
/// one part uploaded twice at once.
@Suite struct TransferLimiterTests {
    @Test func oneUIDHoldsAtMostTheLimitOthersAreUnaffected() {
        let limiter = TransferLimiter(limit: 3)
        do {
            var permits: [TransferLimiter.Permit] = []
            for _ in 0..<3 {
                guard case .success(let permit) = limiter.start("alice") else {
                    Issue.record("a transfer under the limit was refused")
                    return
                }
                permits.append(permit)
            }
            guard case .failure(.uid) = limiter.start("alice") else {
                Issue.record("a fourth transfer started")
                return
            }
            #expect(limiter.count("alice") == 3)
            guard case .success(let other) = limiter.start("bob") else {
                Issue.record("another uid was refused")
                return
            }
            permits.removeLast()
            #expect(limiter.count("alice") == 2, "a released permit counts out")
            guard case .success(let again) = limiter.start("alice") else {
                Issue.record("a transfer after a release was refused")
                return
            }
            withExtendedLifetime((other, again, permits)) {}
        }
        #expect(limiter.count("alice") == 0 && limiter.count("bob") == 0, "every permit counted out once")
    }

    @Test func thePartInFlightIsRefusedASecondTime() {
        let limiter = TransferLimiter(limit: 16)
        let part = TransferLimiter.PartKey(blob: "Xq3v0Ck9m1Lr8sWbTn2pQA", number: 2)
        do {
            guard case .success(let first) = limiter.start("alice", part: part) else {
                Issue.record("the first upload of the part was refused")
                return
            }
            guard case .failure(.part) = limiter.start("alice", part: part) else {
                Issue.record("the same part started twice at once")
                return
            }
            #expect(limiter.count("alice") == 1, "a refused start holds nothing")
            guard case .success(let otherPart) = limiter.start("alice", part: .init(blob: part.blob, number: 3)) else {
                Issue.record("another part was refused")
                return
            }
            withExtendedLifetime((first, otherPart)) {}
        }
        guard case .success = limiter.start("alice", part: part) else {
            Issue.record("the part was refused after the first upload ended")
            return
        }
    }
}
