import HTTPTypes
import MailslotWire
import NIOCore
import NIOHTTPTypes

/// Refuses a request whose declared body is larger than any route accepts, before the body is
/// read: `413 body_too_large`, then the connection is closed.
///
/// Without it, a route that answers early (a JSON route's `413`) leaves Hummingbird to drain the
/// rest of the declared body — it reads until the request's end before the next request — so a
/// `Content-Length: 10000000000` would cost the relay 10 GB of reading (docs/design/attachments.md
/// §2.3). The largest body a route accepts is a blob part (``RelayConfiguration/maxRequestBodyBytes``).
/// A body without a declared length (chunked) is counted as it arrives, and the connection
/// closed when it passes the same bound.
///
/// After the answer the output is closed and what the client still sends is read and dropped
/// for at most ``lingerTime``, then the connection closes: a client still sending its body then
/// reads the answer rather than a reset.
final class RequestBodyLimit: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    let limit: Int
    /// Requests passed on whose answers have not ended.
    private var answering = 0
    /// Body bytes of the current request so far.
    private var bodyBytes = 0
    private var state = State.passing

    private enum State {
        case passing
        /// An oversized request arrived while an earlier answer was still being written.
        case refusingWhenIdle
        /// Refused: everything inbound is dropped until the connection closes.
        case refused
    }

    /// How long a refused connection's remaining body is read (and dropped) before it closes.
    static let lingerTime = TimeAmount.seconds(2)

    init(limit: Int) {
        self.limit = limit
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .passing = state else { return }
        let part = unwrapInboundIn(data)
        switch part {
        case .head(let head):
            bodyBytes = 0
            if let text = head.headerFields[.contentLength], let length = Int64(text), length > Int64(limit) {
                if answering == 0 { refuse(context: context) } else { state = .refusingWhenIdle }
                return
            }
            answering += 1
        case .body(let buffer):
            bodyBytes += buffer.readableBytes
            // A chunked body past the bound: no answer can be sent mid-request; the connection ends.
            guard bodyBytes <= limit else {
                state = .refused
                context.close(promise: nil)
                return
            }
        case .end:
            break
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let part = unwrapOutboundIn(data)
        context.write(data, promise: promise)
        if case .end = part {
            answering = max(0, answering - 1)
            if answering == 0, case .refusingWhenIdle = state { refuse(context: context) }
        }
    }

    private func refuse(context: ChannelHandlerContext) {
        state = .refused
        let problem = Problem(.bodyTooLarge, "the request body is at most \(limit) bytes")
        let body = ByteBuffer(bytes: JSONBody.encode(problem))
        let head = HTTPResponse(status: .contentTooLarge, headerFields: [
            .contentType: "application/problem+json", .contentLength: String(body.readableBytes), .connection: "close",
        ])
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.write(wrapOutboundOut(.body(body)), promise: nil)
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in
            channel.close(mode: .output, promise: nil)
            channel.eventLoop.scheduleTask(in: Self.lingerTime) { channel.close(promise: nil) }
        }
    }
}
