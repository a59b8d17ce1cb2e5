import Foundation
import Synchronization
import Testing
@testable import MailslotRelay

/// A socket's answers: in order, bounded by count and bytes, and closing wakes whoever waits.
@Suite struct AnswerQueueTests {
    @Test func answersComeOutInTheOrderTheyWentIn() async throws {
        let queue = AnswerQueue(maxCount: 8, maxBytes: 1 << 20)
        for n in 0..<8 { #expect(await queue.append({ "a\(n)" }, bytes: 10)) }
        queue.close()
        var texts: [String] = []
        while let answer = await queue.next() { texts.append(try await answer()) }
        #expect(texts == (0..<8).map { "a\($0)" }, "and what was queued before the close is still taken")
    }

    @Test func aFullQueueHoldsTheReaderUntilAnAnswerIsTaken() async throws {
        for (maxCount, maxBytes, bytes) in [(2, 1 << 20, 1), (100, 100, 50)] {
            let queue = AnswerQueue(maxCount: maxCount, maxBytes: maxBytes)
            #expect(await queue.append({ "1" }, bytes: bytes))
            #expect(await queue.append({ "2" }, bytes: bytes))
            let third = Atomic<Bool>(false)
            let reader = Task {
                let queued = await queue.append({ "3" }, bytes: bytes)
                third.store(true, ordering: .sequentiallyConsistent)
                return queued
            }
            try await Task.sleep(for: .milliseconds(100))
            let waited = !third.load(ordering: .sequentiallyConsistent)
            #expect(waited, "full (count \(maxCount), bytes \(maxBytes)): the third waits")
            #expect(try await queue.next()?() == "1")
            #expect(await reader.value, "room again: it is queued")
            #expect(try await queue.next()?() == "2")
            #expect(try await queue.next()?() == "3")
        }
    }

    @Test func aFrameLargerThanTheByteBoundGoesAlone() async throws {
        let queue = AnswerQueue(maxCount: 8, maxBytes: 100)
        #expect(await queue.append({ "big" }, bytes: 1_000), "an empty queue takes it")
        let second = Atomic<Bool>(false)
        let reader = Task {
            defer { second.store(true, ordering: .sequentiallyConsistent) }
            return await queue.append({ "small" }, bytes: 1)
        }
        try await Task.sleep(for: .milliseconds(100))
        let waited = !second.load(ordering: .sequentiallyConsistent)
        #expect(waited, "nothing joins it")
        #expect(try await queue.next()?() == "big")
        #expect(await reader.value)
        #expect(try await queue.next()?() == "small")
    }

    @Test func closingWakesAWaitingReaderAndAWaitingWriter() async throws {
        let full = AnswerQueue(maxCount: 1, maxBytes: 100)
        #expect(await full.append({ "1" }, bytes: 1))
        let reader = Task { await full.append({ "2" }, bytes: 1) }
        try await Task.sleep(for: .milliseconds(50))
        full.close()
        #expect(await reader.value == false, "a closed queue takes no more answers")

        let empty = AnswerQueue(maxCount: 1, maxBytes: 100)
        let writer = Task { await empty.next() == nil }
        try await Task.sleep(for: .milliseconds(50))
        empty.close()
        #expect(await writer.value, "a writer waiting on a closed, empty queue gets nil")
    }

    @Test func anAnswerHandedToAWaitingWriterIsNotLost() async throws {
        let queue = AnswerQueue(maxCount: 4, maxBytes: 100)
        let writer = Task { try await queue.next()?() }
        try await Task.sleep(for: .milliseconds(50))
        #expect(await queue.append({ "handed" }, bytes: 1))
        #expect(try await writer.value == "handed")
    }
}

extension AnswerQueueTests {
    /// A busy socket's queue never runs empty; what was taken must still be let go (it holds the
    /// frames' envelopes). Failed before taken answers were dropped other than when empty.
    @Test func aQueueThatNeverRunsEmptyDoesNotKeepWhatWasTaken() async throws {
        let queue = AnswerQueue(maxCount: 8, maxBytes: 1 << 20)
        #expect(await queue.append({ "first" }, bytes: 1))
        for n in 0..<10_000 {
            #expect(await queue.append({ "a\(n)" }, bytes: 1))
            _ = await queue.next()  // one in, one out: never empty
        }
        #expect(queue.storageCount <= 64, "storage holds \(queue.storageCount) slots")
    }
}
