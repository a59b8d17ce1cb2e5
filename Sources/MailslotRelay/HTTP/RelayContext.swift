import Hummingbird
import HummingbirdWebSocket
import NIOCore

/// The per-request context: Hummingbird's core storage plus the WebSocket handler slot the
/// subscribe route fills when it accepts an upgrade.
public struct RelayContext: RequestContext, WebSocketRequestContext {
    /// Hummingbird's request storage (logger, route parameters).
    public var coreContext: CoreRequestContextStorage
    /// Where the subscribe route leaves its WebSocket handler.
    public let webSocket: WebSocketHandlerReference<RelayContext>
    /// The connection: a long answer is written at the pace its socket takes it.
    public let channel: any Channel

    /// A context for a new request on `source`.
    public init(source: Source) {
        coreContext = .init(source: source)
        webSocket = .init()
        channel = source.channel
    }
}
