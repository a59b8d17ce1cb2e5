#if canImport(Glibc)
import Glibc
#endif
import Testing
@testable import MailslotRelay

/// The blob transfers' own threads (issue 27): their jobs run below the priority of the threads
/// ordinary messages use, the caller's thread is left as it was, and failures come back whole.
@Suite struct BlobIOPoolTests {
    @Test func jobsRunAtThePoolsLowerPriorityAndTheCallerIsLeftAsItWas() async throws {
        let pool = BlobIOPool(threads: 2, niceness: 7)
        let before = BlobIOPool.niceness()
        #expect(before < 7, "the test's own thread should start below the pool's niceness")
        for _ in 0..<4 {
            #expect(try await pool.run { BlobIOPool.niceness() } == 7)
        }
        #expect(BlobIOPool.niceness() == before)
        try await pool.shutdown()
    }

    @Test func theRelaysPoolIsBelowTheDefaultPriority() async throws {
        #expect(BlobIOPool.shared.niceness > 0)
        #expect(try await BlobIOPool.shared.run { BlobIOPool.niceness() } >= BlobIOPool.shared.niceness)
    }

    @Test func aJobsFailureReachesTheCaller() async throws {
        let pool = BlobIOPool(threads: 1, niceness: 5)
        await #expect(throws: BlobStorageFailure.full) {
            try await pool.run { () throws -> Int in throw BlobStorageFailure.full }
        }
        try await pool.shutdown()
        // A pool that has stopped takes no more jobs: refused, not lost in silence.
        await #expect(throws: (any Error).self) { try await pool.run { 1 } }
    }
}
