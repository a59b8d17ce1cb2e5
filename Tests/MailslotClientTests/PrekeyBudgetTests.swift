import Foundation
@testable import MailslotClient
import MailslotTestSupport
import Testing

/// The client makes one-time prekeys at the relay's word, within a budget a lying relay cannot
/// exceed (``PrekeyBudget``).
@Suite struct PrekeyBudgetTests {
    @Test func theBudgetGrantsThreeSuppliesAndRefillsOverTenMinutes() {
        var budget = PrekeyBudget()
        let start = ContinuousClock.now
        #expect(budget.take(100, at: start) == 100)
        #expect(budget.take(150, at: start) == 150)
        #expect(budget.take(100, at: start) == 50, "what is left of three supplies")
        #expect(budget.take(100, at: start) == 0)
        #expect(budget.take(100, at: start + .seconds(200)) == 100, "a third of the refill time gives back a third")
        #expect(budget.take(1000, at: start + .seconds(10_000)) == PrekeyBudget.capacity, "never more than the capacity")
        #expect(budget.take(-5, at: start + .seconds(20_000)) == 0)
    }

    /// A relay that says again and again that none are left (as a stream of `prekeys` frames
    /// would) gets no more than the budget made: not a hundred keys a frame.
    @Test func aRelayThatKeepsSayingNoneAreLeftGetsNoMoreThanTheBudget() async throws {
        try await withTestRelay { relay in
            let alice = try relay.client("alice")
            let started = ContinuousClock.now
            try await alice.signIn()  // made and uploaded the first supply, from the budget
            func kept() async throws -> Int {
                try await alice.store.pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM one_time_prekeys") ?? 0 }
            }
            let before = try await kept()
            for _ in 0..<10 { await alice.replenishPrekeys(remaining: 0) }
            let made = try await kept() - before
            // What the budget left after the first supply, and what it refilled meanwhile (half a
            // prekey a second): not a hundred a call.
            let refilled = Int(Double((ContinuousClock.now - started) / PrekeyBudget.refill) * Double(PrekeyBudget.capacity)) + 1
            let left = PrekeyBudget.capacity - MailslotClient.prekeySupply
            #expect(made >= left && made <= left + refilled, "made \(made), budget \(left) + \(refilled)")
        }
    }
}
