import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HTTPTypes
import Hummingbird
import HummingbirdCore
import HummingbirdWebSocket
import HummingbirdWSClient
import Logging
import MailslotRelay
import MailslotTestSupport
import MailslotWire
import NIOCore
import Synchronization

/// A malicious relay for the client library's tests: a proxy on 127.0.0.1 in front of a real
/// test relay (``withTestRelay``) that passes every request and frame through — real behaviour —
/// except the ones a test tells it to lie about, one lie at a time.
///
/// - HTTP: ``lie(_:_:times:_:)`` replaces (without asking the real relay: ``Lie/replace(_:)``)
///   or rewrites (after asking it: ``Lie/rewrite(_:)``) the answers to requests of a method whose
///   path starts with a prefix, the first `times` of them. Helpers make a JSON answer or a
///   problem; ``forgedBundle(for:)`` serves a bundle of the proxy's own for a uid.
/// - WebSocket: a subscription is relayed to the real relay's; ``lieInFrames(_:)`` rewrites the
///   text frames the relay sends the client (drop one by returning nil). Close codes are not
///   carried over: the client sees a plain close.
/// - ``requests`` lists what the client asked (`"GET /v1/users/bob/keys"`), for tests that check
///   what a client did not fetch.
final class LyingRelay: Sendable {
    /// A request as the client sent it.
    struct Request: Sendable {
        /// `GET`, `PUT`, …
        let method: String
        /// The path with its query.
        let path: String
        /// The body.
        let body: Data
    }

    /// An answer, from the real relay or made up.
    struct Answer: Sendable {
        var status: Int
        var body: Data
        var contentType: String? = "application/json"

        /// A JSON answer with `status`.
        static func json(_ text: String, status: Int = 200) -> Answer { Answer(status: status, body: Data(text.utf8)) }

        /// The problem answer of `code`, as a relay writes it.
        static func problem(_ code: ProblemCode, retryAfter: Int? = nil) -> Answer {
            Answer(status: code.status, body: (try? JSONEncoder().encode(Problem(code, "said by a lying relay", retryAfter: retryAfter))) ?? Data(),
                   contentType: "application/problem+json")
        }
    }

    /// What to do with a matching request.
    enum Lie: Sendable {
        /// Answer this, and do not pass the request on.
        case replace(@Sendable (Request) -> Answer)
        /// Pass the request on, then change the real answer.
        case rewrite(@Sendable (Request, Answer) -> Answer)
    }

    private struct Rule {
        let method: String
        let prefix: String
        var remaining: Int
        let lie: Lie
    }

    /// The real relay behind the lies.
    let upstream: TestRelay
    /// The proxy's address: give it to the client instead of the relay's.
    let url: URL
    private let rules = Mutex<[Rule]>([])
    private let frameRewrite = Mutex<(@Sendable (String) -> String?)?>(nil)
    private let seen = Mutex<[String]>([])
    private let session: URLSession

    fileprivate init(upstream: TestRelay, port: Int) {
        self.upstream = upstream
        url = URL(string: "http://127.0.0.1:\(port)")!
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = 15
        session = URLSession(configuration: configuration)
    }

    /// Lies about the next `times` requests `method path…` (all of them by default).
    func lie(_ method: String, _ pathPrefix: String, times: Int = .max, _ lie: Lie) {
        rules.withLock { $0.append(Rule(method: method, prefix: pathPrefix, remaining: times, lie: lie)) }
    }

    /// Stops every lie: from now on the proxy only passes things on.
    func tellTheTruth() {
        rules.withLock { $0.removeAll() }
        frameRewrite.withLock { $0 = nil }
    }

    /// Rewrites each text frame the relay sends on a subscription; nil drops it.
    func lieInFrames(_ rewrite: @escaping @Sendable (String) -> String?) {
        frameRewrite.withLock { $0 = rewrite }
    }

    /// The requests the client made so far, as `"METHOD /path?query"`.
    var requests: [String] { seen.withLock { $0 } }

    /// A bundle for `uid` signed with a new identity key of the proxy's own (and a signed prekey,
    /// as version 2 clients publish): what a relay serves to substitute keys. The key pair is
    /// returned too, so a test can tell whose key a client pinned or shows.
    static func forgedBundle(for uid: String) -> (bundle: KeyBundle, identity: IdentityKeyPair) {
        let identity = IdentityKeyPair()
        let bundle = KeyBundle(uid: uid, identity: identity, mailboxKey: MailboxKeyPair().publicKey,
                               signedPrekey: PublishedPrekey(id: 1, key: X25519KeyPair().publicKey), createdAt: Date())
        return (bundle, identity)
    }

    // MARK: Serving

    fileprivate func respond(to request: Hummingbird.Request) async throws -> Response {
        let path = request.head.path ?? "/"
        let method = request.method.rawValue
        var incoming = request
        let body = Data(buffer: try await incoming.collectBody(upTo: 4 << 20))
        let asked = Request(method: method, path: path, body: body)
        seen.withLock { $0.append("\(method) \(path)") }
        let lie: Lie? = rules.withLock { rules in
            guard let index = rules.firstIndex(where: { $0.method == method && path.hasPrefix($0.prefix) && $0.remaining > 0 }) else { return nil }
            rules[index].remaining -= 1
            return rules[index].lie
        }
        let answer: Answer
        switch lie {
        case .replace(let make): answer = make(asked)
        case .rewrite(let change): answer = change(asked, try await forward(asked, headers: request.headers))
        case nil: answer = try await forward(asked, headers: request.headers)
        }
        var headers = HTTPFields()
        if let type = answer.contentType, !answer.body.isEmpty { headers[.contentType] = type }
        return Response(status: .init(code: answer.status), headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: answer.body)))
    }

    private func forward(_ request: Request, headers: HTTPFields) async throws -> Answer {
        var forwarded = URLRequest(url: URL(string: upstream.url.absoluteString + request.path)!)
        forwarded.httpMethod = request.method
        for name in [HTTPField.Name.authorization, .contentType] { headers[name].map { forwarded.setValue($0, forHTTPHeaderField: name.rawName) } }
        if !request.body.isEmpty { forwarded.httpBody = request.body }
        let (data, response) = try await session.data(for: forwarded)
        let http = response as? HTTPURLResponse
        return Answer(status: http?.statusCode ?? 502, body: data, contentType: http?.value(forHTTPHeaderField: "Content-Type"))
    }

    /// Relays a subscription to the real relay's, rewriting what it sends.
    fileprivate func relaySubscription(path: String, authorization: String?, inbound: WebSocketInboundStream,
                                       outbound: WebSocketOutboundWriter, logger: Logger) async throws {
        seen.withLock { $0.append("GET \(path)") }
        var headers = HTTPFields()
        headers[.authorization] = authorization
        let target = "ws://127.0.0.1:\(upstream.port)\(path)"
        _ = try await WebSocketClient.connect(url: target, configuration: .init(maxFrameSize: Defaults.maxRelayFrameBytes, additionalHeaders: headers),
                                              logger: logger) { upInbound, upOutbound, _ in
            let fromClient = inbound.messages(maxSize: Defaults.maxRelayFrameBytes)
            let toClient = Task {
                for try await message in fromClient {
                    if case .text(let text) = message { try await upOutbound.write(.text(text)) }
                }
                try? await upOutbound.close(.normalClosure, reason: nil)
            }
            defer { toClient.cancel() }
            for try await message in upInbound.messages(maxSize: Defaults.maxRelayFrameBytes) {
                guard case .text(let text) = message else { continue }
                let rewrite = self.frameRewrite.withLock { $0 }
                guard let sent = rewrite.map({ $0(text) }) ?? text else { continue }
                try await outbound.write(.text(sent))
            }
        }
    }
}

/// Runs `body` with a real test relay (its settings changed by `configure`) and a ``LyingRelay``
/// in front of it, both on 127.0.0.1; both are stopped before this returns.
func withLyingRelay<T: Sendable>(configure: (inout RelayConfiguration) throws -> Void = { _ in },
                                 _ body: @Sendable (LyingRelay) async throws -> T) async throws -> T {
    try await withTestRelay(logger: quietLogger, configure: configure) { relay in
        let port = Mutex<Int?>(nil)
        let ready = AsyncStream<Void>.makeStream()
        let liar = Mutex<LyingRelay?>(nil)
        let responder = CallbackResponder<BasicRequestContext> { request, _ in
            guard let proxy = liar.withLock({ $0 }) else { return Response(status: .serviceUnavailable) }
            return try await proxy.respond(to: request)
        }
        let server = HTTPServerBuilder.http1WebSocketUpgrade { head, _, logger in
            guard let path = head.path, path.hasSuffix("/subscribe"), let proxy = liar.withLock({ $0 }) else { return .dontUpgrade }
            let authorization = head.headerFields[.authorization]
            return .upgrade([:]) { inbound, outbound, _ in
                try await proxy.relaySubscription(path: path, authorization: authorization, inbound: inbound, outbound: outbound, logger: logger)
            }
        }
        var logger = Logger(label: "lying-relay")
        logger.logLevel = .critical
        let app = Application(responder: responder, server: server, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
                              onServerRunning: { channel in
                                  port.withLock { $0 = channel.localAddress?.port }
                                  ready.continuation.finish()
                              }, logger: logger)
        let serving = Task { try await app.runService(gracefulShutdownSignals: []) }
        defer { serving.cancel() }
        for await _ in ready.stream {}
        guard let bound = port.withLock({ $0 }) else { throw TestRelayError("the lying relay did not start") }
        let proxy = LyingRelay(upstream: relay, port: bound)
        liar.withLock { $0 = proxy }
        do {
            let value = try await body(proxy)
            serving.cancel()
            _ = await serving.result
            return value
        } catch {
            serving.cancel()
            _ = await serving.result
            throw error
        }
    }
}
