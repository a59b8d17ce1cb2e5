import NIOCore

/// Flushes a connection at most once per event-loop turn instead of once per written frame.
///
/// The WebSocket writer flushes after every frame, and each flush is a `writev` through the
/// whole TCP stack. Under load a socket's answers and deliveries arrive at its event loop in
/// bursts (a group commit wakes many at once), so deferring the flush to the end of the turn
/// sends a burst in one system call. Nothing waits longer than the writes already queued on
/// the loop, and a close flushes first, so nothing written before it is dropped. (Public for
/// mailslot-bench, whose client sockets use it too.)
package final class FlushCoalescer: ChannelOutboundHandler, RemovableChannelHandler {
    package typealias OutboundIn = NIOAny

    private var flushPending = false

    /// A coalescer for one channel.
    package init() {}

    package func flush(context: ChannelHandlerContext) {
        guard !flushPending else { return }
        flushPending = true
        // `execute` runs after the tasks already queued on this loop: the rest of the burst.
        context.eventLoop.assumeIsolated().execute {
            self.flushNow(context: context)
        }
    }

    package func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        flushNow(context: context)
        context.close(mode: mode, promise: promise)
    }

    package func handlerRemoved(context: ChannelHandlerContext) {
        flushNow(context: context)
    }

    private func flushNow(context: ChannelHandlerContext) {
        guard flushPending else { return }
        flushPending = false
        context.flush()
    }
}
