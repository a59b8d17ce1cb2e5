import NIOCore
import NIOEmbedded
import Testing
@testable import MailslotRelay

/// ``FlushCoalescer``: a burst of flushed writes leaves in one flush, after the burst; a close
/// or the handler's removal flushes first, so nothing written before is dropped.
@Suite struct FlushCoalescerTests {
    /// Counts the flushes that get past the coalescer (it sits between the coalescer and the socket).
    final class FlushCounter: ChannelOutboundHandler {
        typealias OutboundIn = NIOAny
        var flushes = 0
        func flush(context: ChannelHandlerContext) {
            flushes += 1
            context.flush()
        }
    }

    private func channel() throws -> (EmbeddedChannel, FlushCounter) {
        let counter = FlushCounter()
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(counter)
        try channel.pipeline.syncOperations.addHandler(FlushCoalescer())
        return (channel, counter)
    }

    private func frame(_ text: String) -> ByteBuffer { ByteBuffer(string: text) }

    private func written(_ channel: EmbeddedChannel) throws -> [String] {
        var texts: [String] = []
        while let buffer = try channel.readOutbound(as: ByteBuffer.self) { texts.append(String(buffer: buffer)) }
        return texts
    }

    @Test func aBurstOfFlushedWritesLeavesInOneFlushAfterTheBurst() throws {
        let (channel, counter) = try channel()
        for text in ["one", "two", "three"] { channel.writeAndFlush(frame(text), promise: nil) }
        #expect(counter.flushes == 0, "nothing flushed while the burst is still being written")
        #expect(try written(channel).isEmpty)
        channel.embeddedEventLoop.run()
        #expect(counter.flushes == 1)
        #expect(try written(channel) == ["one", "two", "three"])

        channel.writeAndFlush(frame("four"), promise: nil)
        channel.embeddedEventLoop.run()
        #expect(counter.flushes == 2, "a later write gets its own flush")
        #expect(try written(channel) == ["four"])
        _ = try channel.finish()
    }

    @Test func aCloseFlushesWhatWasWrittenBeforeIt() throws {
        let (channel, counter) = try channel()
        channel.writeAndFlush(frame("last words"), promise: nil)
        channel.close(promise: nil)
        #expect(counter.flushes == 1)
        #expect(try written(channel) == ["last words"])
        channel.embeddedEventLoop.run()
        #expect(counter.flushes == 1, "the deferred flush has nothing left to do")
    }

    @Test func removingTheHandlerFlushesWhatWasWritten() throws {
        let (channel, counter) = try channel()
        channel.writeAndFlush(frame("pending"), promise: nil)
        try channel.pipeline.syncOperations.removeHandler(context: channel.pipeline.syncOperations.context(handlerType: FlushCoalescer.self)).wait()
        #expect(counter.flushes == 1)
        #expect(try written(channel) == ["pending"])
        _ = try channel.finish()
    }
}
