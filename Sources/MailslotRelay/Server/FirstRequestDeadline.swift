import NIOCore
import NIOHTTP1

/// Closes a connection that has not sent its first complete request head within
/// `headerTimeout`, or that sends nothing for `idleTimeout` before then.
///
/// Hummingbird's idle timeout starts only once a first request head has been read, and the
/// WebSocket upgrade handler waits for that head for ever: without this handler a socket that
/// says nothing (or half a head) holds a connection slot as long as its peer likes, and
/// `--max-connections` such sockets lock everyone out. Once the head is there, this handler
/// leaves the pipeline: an HTTP connection is then watched by Hummingbird's idle timeout, an
/// upgraded one by its WebSocket ping.
final class FirstRequestDeadline: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart

    private let headerTimeout: TimeAmount
    private let idleTimeout: TimeAmount
    private var headDeadline: Scheduled<Void>?
    private var idleDeadline: Scheduled<Void>?

    init(headerTimeout: TimeAmount, idleTimeout: TimeAmount) {
        self.headerTimeout = headerTimeout
        self.idleTimeout = idleTimeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { start(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        start(context)
        context.fireChannelActive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        headDeadline?.cancel()
        idleDeadline?.cancel()
        headDeadline = nil
        idleDeadline = nil
    }

    /// Every read from the socket ends with this, whether or not the bytes made a whole part.
    func channelReadComplete(context: ChannelHandlerContext) {
        idleDeadline?.cancel()
        idleDeadline = close(context, after: idleTimeout)
        context.fireChannelReadComplete()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let isHead = if case .head = unwrapInboundIn(data) { true } else { false }
        context.fireChannelRead(data)
        if isHead { leave(context) }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // An upgrade consumes the head without passing it on; leave before the first frame arrives.
        let upgraded = event is HTTPServerUpgradeEvents
        context.fireUserInboundEventTriggered(event)
        if upgraded { leave(context) }
    }

    private func start(_ context: ChannelHandlerContext) {
        guard headDeadline == nil else { return }
        headDeadline = close(context, after: headerTimeout)
        idleDeadline = close(context, after: idleTimeout)
    }

    private func close(_ context: ChannelHandlerContext, after delay: TimeAmount) -> Scheduled<Void> {
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        return context.eventLoop.scheduleTask(in: delay) { loopBound.value.close(promise: nil) }
    }

    private func leave(_ context: ChannelHandlerContext) {
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }
}
