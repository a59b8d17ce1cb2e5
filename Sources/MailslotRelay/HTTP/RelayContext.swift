import Hummingbird
import NIOCore

/// The per-request context: Hummingbird's core storage and the connection. (The subscription
/// WebSocket does not go through the router: `RelayChildChannel` upgrades it.)
public struct RelayContext: RequestContext {
    /// Hummingbird's request storage (logger, route parameters).
    public var coreContext: CoreRequestContextStorage
    /// The connection: a long answer is written at the pace its socket takes it.
    public let channel: any Channel

    /// A context for a new request on `source`.
    public init(source: Source) {
        coreContext = .init(source: source)
        channel = source.channel
    }
}
