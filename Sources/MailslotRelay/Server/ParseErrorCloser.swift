import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1

/// Closes a connection whose request head cannot be parsed (headers over the size limit,
/// malformed HTTP). Without it, such a connection waits open until the peer gives up: a cheap
/// way to hold a relay's connections. NIO's decoder reports the error down the pipeline, and
/// this handler, last in line, ends the connection.
final class ParseErrorCloser: ChannelInboundHandler, Sendable {
    typealias InboundIn = NIOAny

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is HTTPParserError {
            context.close(promise: nil)
        } else {
            context.fireErrorCaught(error)
        }
    }
}

/// The relay's child channel: HTTP/1.1 with the WebSocket upgrade, plus ``FirstRequestDeadline``,
/// ``ParseErrorCloser`` and, next to the socket, ``FlushCoalescer`` and ``StalledReaderDeadline``.
struct RelayChildChannel<Base: ServerChildChannel>: ServerChildChannel {
    let base: Base
    /// Seconds to the first complete request head; of silence before it, and of a peer that
    /// does not read what it asked for.
    let headerTimeout: Double
    let idleTimeout: Double

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Base.Value> {
        base.setup(channel: channel, logger: logger).flatMapThrowing { value in
            try channel.pipeline.syncOperations.addHandler(
                FirstRequestDeadline(headerTimeout: .milliseconds(Int64(headerTimeout * 1000)),
                                     idleTimeout: .milliseconds(Int64(idleTimeout * 1000))),
                position: .last)
            try channel.pipeline.syncOperations.addHandler(ParseErrorCloser(), position: .last)
            try channel.pipeline.syncOperations.addHandler(FlushCoalescer(), position: .first)
            try channel.pipeline.syncOperations.addHandler(StalledReaderDeadline(timeout: .milliseconds(Int64(idleTimeout * 1000))),
                                                           position: .first)
            return value
        }
    }

    func handle(value: Base.Value, logger: Logger) async {
        await base.handle(value: value, logger: logger)
    }
}
