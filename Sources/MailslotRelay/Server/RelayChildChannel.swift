import HTTPTypes
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import NIOWebSocket

/// The relay's child channel: HTTP/1.1 through Hummingbird, and the subscription WebSocket
/// (`/v1/users/{uid}/subscribe`) upgraded in place to a ``SubscriptionHandler``, plus
/// ``FirstRequestDeadline``, ``ParseErrorCloser``, ``RequestBodyLimit``, ``ContinueHandler`` and, next to the socket, ``FlushCoalescer`` and
/// ``StalledReaderDeadline``.
///
/// A subscription is a NIO handler, not a task: Hummingbird's WebSocket layer keeps a task (and
/// its child tasks, each with its own slabs of async frames) alive for every open socket, which
/// cost ~60 KB per idle subscription. Here an idle subscription is its channel, its handlers and
/// a small ``Subscriber``; tasks run only while it has work (see ``Subscriber``).
struct RelayChildChannel: ServerChildChannel, HTTPChannelHandler {
    enum UpgradeResult: Sendable {
        /// Upgraded: the ``SubscriptionHandler`` owns the channel from now on.
        case subscription
        case notUpgraded(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>)
        case failedUpgrade(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>)
    }

    struct Value: ServerChildChannelValue {
        let upgradeResult: EventLoopFuture<UpgradeResult>
        let channel: any Channel
    }

    let responder: HTTPChannelHandler.Responder
    let http1: HTTP1Channel.Configuration
    let subscriptions: Subscriptions
    /// Seconds to the first complete request head; of silence before it, and of a peer that
    /// does not read what it asked for.
    let headerTimeout: TimeAmount
    let idleTimeout: TimeAmount
    /// The largest request body any route accepts (``RequestBodyLimit``).
    let maxRequestBodyBytes: Int

    init(responder: @escaping HTTPChannelHandler.Responder, http1: HTTP1Channel.Configuration, subscriptions: Subscriptions,
         headerTimeout: Double, idleTimeout: Double, maxRequestBodyBytes: Int) {
        self.maxRequestBodyBytes = maxRequestBodyBytes
        self.responder = Self.upgradeRedirecting(responder)
        self.http1 = http1
        self.subscriptions = subscriptions
        self.headerTimeout = .milliseconds(Int64(headerTimeout * 1000))
        self.idleTimeout = .milliseconds(Int64(idleTimeout * 1000))
    }

    static let receiveBuffers = AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 512, maximum: 65536)

    /// The uid of a subscription path, `/v1/users/{uid}/subscribe` (a query is ignored).
    static func subscriptionOwner(_ uri: String) -> String? {
        let path = uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 5, parts[0].isEmpty, parts[1] == "v1", parts[2] == "users", !parts[3].isEmpty, parts[4] == "subscribe" else {
            return nil
        }
        return String(parts[3])  // as Hummingbird's router gave it: not percent-decoded
    }

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            let upgradeAttempted = NIOLoopBoundBox(false, eventLoop: channel.eventLoop)
            let subscriptions = self.subscriptions
            let upgrader = NIOTypedWebSocketServerUpgrader<UpgradeResult>(
                maxFrameSize: subscriptions.maxFrameBytes,
                shouldUpgrade: { channel, head in
                    upgradeAttempted.value = true
                    guard head.method == .GET, Self.subscriptionOwner(head.uri) != nil else {
                        return channel.eventLoop.makeSucceededFuture(nil)
                    }
                    return channel.eventLoop.makeSucceededFuture(HTTPHeaders())
                },
                upgradePipelineHandler: { channel, head in
                    channel.eventLoop.makeCompletedFuture {
                        let subscriber = Subscriber(subscriptions: subscriptions, channel: channel, owner: Self.subscriptionOwner(head.uri) ?? "",
                                                    authorization: head.headers.first(name: "Authorization"))
                        try channel.pipeline.syncOperations.addHandler(
                            NIOWebSocketFrameAggregator(minNonFinalFragmentSize: 1, maxAccumulatedFrameCount: subscriptions.maxFragments,
                                                        maxAccumulatedFrameSize: subscriptions.maxFrameBytes))
                        try channel.pipeline.syncOperations.addHandler(SubscriptionHandler(subscriber))
                        return UpgradeResult.subscription
                    }
                }
            )
            let serverUpgradeConfiguration = NIOTypedHTTPServerUpgradeConfiguration(
                upgraders: [upgrader],
                notUpgradingCompletionHandler: { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(HTTP1ToHTTPServerCodec(secure: false))
                        try channel.pipeline.syncOperations.addHandler(RequestBodyLimit(limit: self.maxRequestBodyBytes))
                        try channel.pipeline.syncOperations.addHandler(ContinueHandler())
                        try channel.pipeline.syncOperations.addHandlers(self.http1.additionalChannelHandlers())
                        try channel.pipeline.syncOperations.addHandler(
                            HTTPConnectionStateHandler(idleTimeout: self.http1.idleTimeout.map { .init($0) }, logger: logger))
                        let asyncChannel = try NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>(
                            wrappingChannelSynchronously: channel, configuration: .init(isOutboundHalfClosureEnabled: true))
                        return upgradeAttempted.value ? UpgradeResult.failedUpgrade(asyncChannel) : UpgradeResult.notUpgraded(asyncChannel)
                    }
                }
            )
            var configuration = NIOUpgradableHTTPServerPipelineConfiguration<UpgradeResult>(upgradeConfiguration: serverUpgradeConfiguration)
            configuration.enablePipelining = false  // HTTP is pipelined by NIOAsyncChannel
            configuration.enableErrorHandling = false  // Hummingbird handles these
            configuration.enableResponseHeaderValidation = false  // Swift HTTP Types validate already
            configuration.decoderConfiguration.maxHeaderFieldSize = self.http1.httpDecoder.maxHeaderFieldSize
            configuration.decoderConfiguration.maxHeaderListSize = self.http1.httpDecoder.maxHeaderListSize
            configuration.decoderConfiguration.maxHeaderFieldCount = self.http1.httpDecoder.maxHeaderFieldCount
            let negotiated = try channel.pipeline.syncOperations.configureUpgradableHTTPServerPipeline(configuration: configuration)
            try channel.pipeline.syncOperations.addHandler(FirstRequestDeadline(headerTimeout: headerTimeout, idleTimeout: idleTimeout),
                                                           position: .last)
            try channel.pipeline.syncOperations.addHandler(ParseErrorCloser(), position: .last)
            try channel.pipeline.syncOperations.addHandler(FlushCoalescer(), position: .first)
            try channel.pipeline.syncOperations.addHandler(StalledReaderDeadline(timeout: idleTimeout), position: .first)
            // Each connection keeps its receive buffer for its lifetime, sized by its reads so far:
            // NIO starts at 2 KiB, a quarter of an idle subscription. A request head fits in 512
            // bytes, and a busy socket's buffer doubles with each read that fills it.
            try channel.syncOptions?.setOption(ChannelOptions.recvAllocator, value: Self.receiveBuffers)
            return Value(upgradeResult: negotiated, channel: channel)
        }
    }

    func handle(value: Value, logger: Logger) async {
        do {
            switch try await value.upgradeResult.get() {
            case .subscription:
                return  // the handler runs the socket; this task ends here
            case .notUpgraded(let http1):
                await handleHTTP(asyncChannel: http1, logger: logger)
            case .failedUpgrade(let http1):
                await Self.refuseUpgrade(http1)
            }
        } catch let error as ChannelError where error == .inputClosed {
        } catch {
            logger.debug("upgrade failed", metadata: ["error.type": "\(type(of: error))"])
        }
    }

    /// 400 and close, for an upgrade the relay does not offer.
    private static func refuseUpgrade(_ channel: NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>) async {
        try? await channel.executeThenClose { _, outbound in
            let head = HTTPResponse(status: .badRequest, headerFields: [.connection: "close", .contentLength: "0"])
            try await outbound.write(contentsOf: [.head(head), .end(nil)])
        }
    }

    /// A WebSocket upgrade cannot follow another request on the same connection (NIO upgrades
    /// only the first): such a request is redirected to itself, on a new connection.
    private static func upgradeRedirecting(_ responder: @escaping HTTPChannelHandler.Responder) -> HTTPChannelHandler.Responder {
        struct RedirectCloseError: Error {}
        return { request, responseWriter, channel in
            if request.headers[.upgrade] == "websocket" {
                var path = request.uri.path
                if let query = request.uri.query { path += "?\(query)" }
                try await responseWriter.writeResponse(HTTPResponse(status: .temporaryRedirect, headerFields: [.connection: "close", .location: path]))
                throw RedirectCloseError()
            }
            try await responder(request, responseWriter, channel)
        }
    }
}
