import HTTPTypes
import NIOCore
import NIOHTTPTypes

/// Answers `Expect: 100-continue` with `100 Continue` as the request head arrives.
///
/// Hummingbird never sends one, and a client that asks (curl and libcurl-based clients do for
/// bodies over 1 MiB) then waits a second before it sends the body anyway: a second per blob
/// part. Requests whose declared body is too large never get here (``RequestBodyLimit`` sits
/// before this handler and refuses them), so a client is never invited to send what will be
/// refused for its size. RFC 9110 §10.1.1.
final class ContinueHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundOut = HTTPResponsePart

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head(let head) = unwrapInboundIn(data),
           head.headerFields[.expect]?.trimmingCharacters(in: .whitespaces).lowercased() == "100-continue" {
            context.writeAndFlush(wrapOutboundOut(.head(HTTPResponse(status: .continue))), promise: nil)
        }
        context.fireChannelRead(data)
    }
}
