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
