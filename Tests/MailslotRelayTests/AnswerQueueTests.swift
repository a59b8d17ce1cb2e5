import Foundation
import Synchronization
import MailslotTestSupport
import Testing
@testable import MailslotRelay

/// A socket's answers: in order, bounded by count and bytes, a writer started only when needed,
/// and closing wakes whoever waits.
@Suite struct AnswerQueueTests {
    /// Everything taken now, in order.
    private func drain(_ queue: AnswerQueue) async throws -> [String] {
        var texts: [String] = []
        while let answer = queue.takeOrRetire() { texts.append(try await answer()) }
        return texts
    }

    @Test func theFirstAppendStartsTheWriterAndItRetiresWhenTheQueueRunsEmpty() async throws {
        let queue = AnswerQueue(maxCount: 8, maxBytes: 1 << 20)
        #expect(await queue.append({ "a0" }, bytes: 10) == true, "no writer yet: start one")
        for n in 1..<8 { #expect(await queue.append({ "a\(n)" }, bytes: 10) == false, "one runs already") }
        #expect(try await drain(queue) == (0..<8).map { "a\($0)" })
        #expect(await queue.append({ "again" }, bytes: 10) == true, "it retired: start another")
        queue.close()
        #expect(try await drain(queue) == ["again"], "what was queued before the close is still taken")
        #expect(await queue.append({ "late" }, bytes: 10) == nil, "closed: not queued")
    }

    @Test func aFullQueueHoldsTheReaderUntilAnAnswerIsTaken() async throws {
        for (maxCount, maxBytes, bytes) in [(2, 1 << 20, 1), (100, 100, 50)] {
            let queue = AnswerQueue(maxCount: maxCount, maxBytes: maxBytes)
            #expect(await queue.append({ "1" }, bytes: bytes) == true)
            #expect(await queue.append({ "2" }, bytes: bytes) == false)
            let third = Atomic<Bool>(false)
            let reader = Task {
                let queued = await queue.append({ "3" }, bytes: bytes)
                third.store(true, ordering: .sequentiallyConsistent)
                return queued
            }
            try await eventually("full (count \(maxCount), bytes \(maxBytes)): the third waits for room") { queue.isReaderWaiting }
            let queued = third.load(ordering: .sequentiallyConsistent)
            #expect(!queued, "and is not queued meanwhile")
            #expect(try await queue.takeOrRetire()?() == "1")
            #expect(await reader.value == false, "room again: it is queued, for the writer already running")
            #expect(try await drain(queue) == ["2", "3"])
        }
    }

    @Test func aFrameLargerThanTheByteBoundGoesAlone() async throws {
        let queue = AnswerQueue(maxCount: 8, maxBytes: 100)
        #expect(await queue.append({ "big" }, bytes: 1_000) == true, "an empty queue takes it")
        let second = Atomic<Bool>(false)
        let reader = Task {
            defer { second.store(true, ordering: .sequentiallyConsistent) }
            return await queue.append({ "small" }, bytes: 1)
        }
        try await eventually("nothing joins it: the second waits for room") { queue.isReaderWaiting }
        let joined = second.load(ordering: .sequentiallyConsistent)
        #expect(!joined)
        #expect(try await queue.takeOrRetire()?() == "big")
        #expect(await reader.value == false)
        #expect(try await drain(queue) == ["small"])
    }

    @Test func closingWakesAWaitingReaderAndSaysWhetherAWriterStillWrites() async throws {
        let full = AnswerQueue(maxCount: 1, maxBytes: 100)
        #expect(await full.append({ "1" }, bytes: 1) == true)
        let reader = Task { await full.append({ "2" }, bytes: 1) }
        try await eventually("the second reader waits for room") { full.isReaderWaiting }
        #expect(full.closeWhileWriting(), "a writer still owes the queued answer")
        #expect(await reader.value == nil, "a closed queue takes no more answers")
        #expect(try await drain(full) == ["1"])

        let idle = AnswerQueue(maxCount: 1, maxBytes: 100)
        #expect(!idle.closeWhileWriting(), "nothing queued, no writer: nothing left to write")
    }

    /// A busy socket's queue never runs empty; what was taken must still be let go (it holds the
    /// frames' envelopes).
    @Test func aQueueThatNeverRunsEmptyDoesNotKeepWhatWasTaken() async throws {
        let queue = AnswerQueue(maxCount: 8, maxBytes: 1 << 20)
        _ = await queue.append({ "first" }, bytes: 1)
        for n in 0..<10_000 {
            _ = await queue.append({ "a\(n)" }, bytes: 1)
            _ = queue.takeOrRetire()  // one in, one out: never empty
        }
        #expect(queue.storageCount <= 64, "storage holds \(queue.storageCount) slots")
    }
}
