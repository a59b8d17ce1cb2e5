import Synchronization
import Testing
@testable import MailslotRelay

/// ``WriteBatches/submitMany(_:_:committed:finished:)``: a unit of writes is taken by one drain,
/// whole — so a send to many commits in one transaction, never split across two.
@Suite struct WriteBatchesTests {
    @Test func aUnitIsCommittedInOneBatchEvenWhileAnotherCommits() async throws {
        let batches = Mutex<[[Int]]>([])
        let gate = Mutex<CheckedContinuation<Void, Never>?>(nil)
        let entered = Mutex(false)
        let queue = WriteBatches<Int> { writes in
            // The first batch (the lone write) waits until the unit is queued behind it.
            if writes == [-1] {
                await withCheckedContinuation { continuation in
                    gate.withLock { $0 = continuation }
                    entered.withLock { $0 = true }
                }
            }
            batches.withLock { $0.append(writes) }
        }
        let lone = queue.submit({ outcome in outcome.result = .success(0); return -1 }, committed: nil, finished: nil)
        while !entered.withLock({ $0 }) { await Task.yield() }
        let order = Mutex<[Int]>([])
        let tickets = queue.submitMany(500, { index, outcome in
            outcome.result = .success(index)
            return index
        }, committed: { index, _ in order.withLock { $0.append(index) } }, finished: nil)
        gate.withLock { $0 }!.resume()
        _ = try await lone.value
        var values: [Int] = []
        for ticket in tickets { values.append(try await ticket.value) }
        #expect(values == Array(0..<500), "one ticket per write, in order")
        #expect(batches.withLock { $0 } == [[-1], Array(0..<500)], "the unit is one batch")
        #expect(order.withLock { $0 } == Array(0..<500), "committed runs in apply order")
    }

    @Test func aFailedCommitFailsEveryWriteOfTheUnit() async throws {
        struct Failure: Error {}
        let queue = WriteBatches<Int> { _ in throw Failure() }
        let tickets = queue.submitMany(3, { index, outcome in outcome.result = .success(index); return index }, committed: nil, finished: nil)
        for ticket in tickets { await #expect(throws: Failure.self) { try await ticket.value } }
    }
}
