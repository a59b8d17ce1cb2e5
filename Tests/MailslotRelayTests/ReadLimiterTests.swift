import Testing
@testable import MailslotRelay

/// The bound on reads in progress (spec/protocol.md §5.6), per mailbox and per relay, and how a
/// failed wait for a database connection is classified (§7.3): load is not an outage.
@Suite struct ReadLimiterTests {
    /// Accounts that read as hard as they may hold at most half of the relay's reads (and each
    /// at most its mailbox's limit); a bystander's first read still starts.
    @Test func heavyReadersLeaveRoomForABystandersRead() {
        let limiter = ReadLimiter(limit: 4, relayLimit: 16)
        var permits: [ReadLimiter.Permit] = []
        var refusals: [ReadLimiter.Refusal] = []
        for account in 0..<6 {
            for _ in 0..<10 {
                switch limiter.start("heavy\(account)") {
                case .success(let permit): permits.append(permit)
                case .failure(let refusal): refusals.append(refusal)
                }
            }
        }
        #expect(limiter.total == 12, "8 (half the relay's: two mailboxes' 4), then one first read for each of the 4 others")
        #expect(refusals.contains(.relay) && refusals.contains(.mailbox))
        #expect((0..<6).allSatisfy { limiter.count("heavy\($0)") >= 1 && limiter.count("heavy\($0)") <= 4 }, "every mailbox read once")
        guard case .success(let bystander) = limiter.start("bystander") else {
            Issue.record("the bystander's read was refused")
            return
        }
        #expect(limiter.total == 13)
        // The relay's bound holds against many mailboxes' first reads too.
        for account in 0..<10 { if case .success(let permit) = limiter.start("other\(account)") { permits.append(permit) } }
        #expect(limiter.total == 16)
        guard case .failure(.relay) = limiter.start("late") else {
            Issue.record("a read past the relay's bound started")
            return
        }
        permits.removeAll()
        withExtendedLifetime(bystander) { #expect(limiter.total == 1, "every read is counted out when its permit goes") }
    }

    /// A wait for a connection given up while other uses got connections, or finished their work
    /// on one, is load (`busy`); one given up while none did either, or a lost connection, is an
    /// outage; anything else is the use's.
    @Test func aGivenUpWaitIsAnOutageOnlyWhenNoUseGotOrReturnedAConnection() {
        struct StatementFailed: Error {}
        func outcome(gaveUp: Bool = true, _ error: any Error = CancellationError(), leased: Int64, returned: Int64 = .min) -> PostgresPool.Outcome {
            PostgresPool.outcome(gaveUp: gaveUp, error: error, waitedSince: 1_000, lastLeased: leased, lastReturned: returned)
        }
        #expect(outcome(leased: 2_000) == .busy)
        #expect(outcome(leased: 1_000) == .busy)
        #expect(outcome(leased: 999) == .unreachable)
        #expect(outcome(leased: .min) == .unreachable)
        // Every connection held by slow statements for the whole wait: none was leased meanwhile,
        // but one finished — the server answers, so this is load, not an outage.
        #expect(outcome(leased: 500, returned: 2_000) == .busy)
        #expect(outcome(leased: .min, returned: 1_000) == .busy)
        #expect(outcome(leased: 500, returned: 999) == .unreachable, "finished before the wait began: no proof of life")
        #expect(outcome(gaveUp: false, StoreFailure.unavailable, leased: 2_000, returned: 2_000) == .unreachable)
        #expect(outcome(gaveUp: false, StatementFailed(), leased: 2_000) == .own)
    }
}
