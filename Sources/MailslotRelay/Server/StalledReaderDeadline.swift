import NIOCore

/// Closes a connection whose peer has stopped reading: once the relay's answers wait unsent
/// (the channel is not writable) for `timeout`, the connection ends.
///
/// Every answer the relay writes waits for the socket to take it (back-pressure), so a client
/// that never reads holds what it asked for — a page of envelopes and one of its mailbox's
/// reads — for as long as it keeps the connection open. Hummingbird's idle timeout does not run
/// while an answer is being written. This bounds that time, on HTTP connections and
/// subscriptions alike.
final class StalledReaderDeadline: ChannelInboundHandler {
    typealias InboundIn = NIOAny

    private let timeout: TimeAmount
    private var deadline: Scheduled<Void>?

    init(timeout: TimeAmount) { self.timeout = timeout }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable {
            deadline?.cancel()
            deadline = nil
        } else if deadline == nil {
            let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
            deadline = context.eventLoop.scheduleTask(in: timeout) { loopBound.value.close(promise: nil) }
        }
        context.fireChannelWritabilityChanged()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        deadline?.cancel()
        deadline = nil
    }
}
