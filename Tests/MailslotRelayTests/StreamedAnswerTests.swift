import HTTPTypes
import Dispatch
import Hummingbird
import MailslotTestSupport
import NIOCore
import NIOEmbedded
import Synchronization
import Testing
@testable import MailslotRelay

/// ``JSONBody/response(_:on:)``: a streamed page keeps its read (the mailbox's permit,
/// ``ReadLimiter``) until its channel has the whole answer, also when the channel's event loop
/// is busy while the answer is written — as NIO's shared loops are under load, where
/// `BoundedStorageTests` saw a read end though its client never read.
@Suite struct StreamedAnswerTests {
    /// What reached the channel, kept on its event loop.
    final class Ledger: Sendable {
        private let state = Mutex<(queued: Int, delivered: Int, pending: Int, finished: Bool, lateWrites: Int, done: Bool)>(
            (0, 0, 0, false, 0, false))

        func queued(_ count: Int) { state.withLock { $0.queued += count } }
        /// A write reaches the channel; `reading` is whether the answer's read still holds.
        /// Returns the bytes the channel now holds unsent.
        func delivered(_ count: Int, reading: Bool) -> Int {
            state.withLock {
                $0.delivered += count
                $0.pending += count
                if !reading { $0.lateWrites += 1 }
                return $0.pending
            }
        }
        func finished(reading: Bool) { state.withLock { $0.finished = true; if !reading { $0.lateWrites += 1 } } }
        /// The client takes everything the channel holds.
        func drain() { state.withLock { $0.pending = 0 } }
        func producerDone() { state.withLock { $0.done = true } }
        var snapshot: (queued: Int, delivered: Int, finished: Bool, lateWrites: Int, done: Bool) {
            state.withLock { ($0.queued, $0.delivered, $0.finished, $0.lateWrites, $0.done) }
        }
    }

    /// Writes as Hummingbird's writer does (NIOAsyncChannelOutboundWriter): a write returns once
    /// it is queued for the channel's event loop, and the loop hands it to the channel later. The
    /// channel then stops being writable above NIO's default high watermark (64 KiB).
    struct LoopQueuedWriter: ResponseBodyWriter, Sendable {
        let channel: NIOAsyncTestingChannel
        let ledger: Ledger
        let limiter: ReadLimiter

        mutating func write(_ buffer: ByteBuffer) async throws {
            let count = buffer.readableBytes
            ledger.queued(count)
            channel.eventLoop.execute { [ledger, limiter, channel] in
                if ledger.delivered(count, reading: limiter.count("bob") == 1) > 64 * 1024 { channel.isWritable = false }
            }
        }

        consuming func finish(_ trailingHeaders: HTTPFields?) async throws {
            channel.eventLoop.execute { [ledger, limiter] in ledger.finished(reading: limiter.count("bob") == 1) }
        }
    }

    @Test func aStreamedPageKeepsItsReadUntilItsChannelHasItWhileTheLoopIsBusy() async throws {
        let channel = NIOAsyncTestingChannel()
        try await channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 9))
        let limiter = ReadLimiter(limit: 4)
        let ledger = Ledger()
        // About 260 KiB of JSON, 5 chunks: few turns of the loop, each of which needs both this
        // test and the writer scheduled (slow when the parallel suites fill the cores). The read is
        // moved into the producer, so that only the answer being written holds it, as in the relay.
        let page = [String](repeating: String(repeating: "x", count: 1024), count: 256)
        let read = Mutex<MailboxService.Read<[String]>?>(MailboxService.Read(value: page, permit: try limiter.start("bob").get()))
        let writer = LoopQueuedWriter(channel: channel, ledger: ledger, limiter: limiter)
        // The loop is busy until `gate` opens: a task of its own holds it (the testing loop runs
        // its tasks on a Dispatch queue, one at a time), as a relay's loop is under load.
        let gate = DispatchSemaphore(value: 0)
        defer { gate.signal() }  // never left holding a Dispatch thread, however the test ends
        channel.eventLoop.execute { gate.wait() }
        let producer = Task {
            defer { ledger.producerDone() }
            guard let taken = read.withLock({ $0.take() }) else { return }
            try await JSONBody.response(taken, on: channel).body.write(writer)
        }
        // The loop is busy: nothing written reaches the channel, so the writer must wait after its
        // first chunk, and the read hold. What is checked is that nothing more happens, hence a
        // pause once the writer has started, not a condition: long enough for a writer that does
        // not wait to queue the rest of the page and end.
        try await eventually(within: .seconds(60), "the writer queues its first chunk") { ledger.snapshot.queued > 0 }
        // Short: the gate holds a Dispatch thread meanwhile, which the parallel suites need too.
        try await Task.sleep(for: .milliseconds(500))
        #expect(ledger.snapshot.queued == JSONBody.chunkBytes, "the writer went on while the loop had not run its writes")
        #expect(limiter.count("bob") == 1, "the read ended while its answer had not reached the channel")

        // The loop runs, and the client takes whatever the channel holds, until the answer is written.
        gate.signal()
        try await eventually(within: .seconds(60), "the whole answer is written") {
            await channel.testingEventLoop.run()
            ledger.drain()
            channel.isWritable = true
            return ledger.snapshot.done
        }
        try await producer.value
        let final = ledger.snapshot
        #expect(final.lateWrites == 0, "parts of the answer reached the channel after its read had ended")
        #expect(final.finished && final.delivered == final.queued && final.queued == JSONBody.encode(page).count)
        #expect(limiter.count("bob") == 0, "the written answer ends its read")
    }
}
