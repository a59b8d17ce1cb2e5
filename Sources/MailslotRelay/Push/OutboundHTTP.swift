import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import ServiceLifecycle
import Synchronization

// Every outbound call of the push providers goes through here (docs/design/wakeups.md §3.3):
// no redirects, a connect timeout and a deadline on the whole call, answers read up to 16 KiB,
// no proxy, the system's trust roots plus the operator's CA file. Web Push endpoints are the only
// user-supplied URLs: their names are resolved here (``NameResolver``: at most 2 s, on threads of
// its own), every address checked by ``AddressPolicy``,
// and the call made on a client pinned to the checked address (AsyncHTTPClient's `dnsOverride`:
// TLS still verifies the name), so that a name cannot be re-resolved to a private address
// between the check and the connection. spec/push.md §4.1–§4.2.

/// The push providers' HTTP client.
final class OutboundHTTP: Service, Sendable {
    /// A provider's answer: status, headers, and at most ``maxAnswerBytes`` of body.
    struct Answer: Sendable {
        let status: Int
        let headers: HTTPHeaders
        let body: [UInt8]

        /// A header's first value.
        func header(_ name: String) -> String? { headers.first(name: name) }

        /// `Retry-After` in seconds (RFC 9110 §10.2.3: delay-seconds or an HTTP date), bounded by the caller.
        func retryAfter(now: Date = Date()) -> Duration? {
            guard let value = header("retry-after")?.trimmingCharacters(in: .whitespaces) else { return nil }
            if let seconds = Int64(value), seconds >= 0 { return .seconds(seconds) }
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: "en_US_POSIX")
            formatter.timeZone = TimeZone(identifier: "GMT")
            formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
            guard let date = formatter.date(from: value) else { return nil }
            return .seconds(max(0, Int64(date.timeIntervalSince(now))))
        }
    }

    /// Why a call got no answer: the providers map each to an outcome.
    enum Failure: Error, Equatable {
        /// The deadline passed.
        case timeout
        /// No connection (refused, reset, TLS, name not found).
        case connect
        /// The answer's body was larger than ``maxAnswerBytes``.
        case tooLarge
        /// The endpoint's name resolved to an address the policy refuses.
        case address
    }

    /// Answers are read up to this many bytes.
    static let maxAnswerBytes = 16 * 1024
    /// The most pinned Web Push clients kept.
    static let maxPinnedClients = 32
    /// A pinned client unused this long is closed, and a name is resolved again after it.
    static let pinnedLifetime: Duration = .seconds(60)
    /// Resolving a Web Push endpoint's name may take this long.
    static let resolveTimeout: Duration = .seconds(2)

    /// What the `user-agent` header says.
    static let userAgent = "mailslot-relay"

    private let shared: HTTPClient
    private let configuration: HTTPClient.Configuration
    private let policy: AddressPolicy
    private let resolver: NameResolver
    private let callTimeout: Duration
    private let logger: Logger
    /// Pinned clients by "host port address": the client, its last use, the calls using it.
    private let pinned = Mutex<[String: Pinned]>([:])

    private struct Pinned {
        let client: HTTPClient
        var lastUsed: ContinuousClock.Instant
        var users: Int
    }

    /// A client for the providers: `connectTimeout` and `callTimeout` bound every call; `caFile`
    /// (PEM certificates) is trusted beside the system's roots.
    init(connectTimeout: Duration, callTimeout: Duration, caFile: String?, policy: AddressPolicy, logger: Logger,
         resolver: NameResolver = NameResolver(timeout: OutboundHTTP.resolveTimeout)) throws {
        var tls = TLSConfiguration.makeClientConfiguration()
        if let caFile {
            tls.additionalTrustRoots = [.certificates(try NIOSSLCertificate.fromPEMFile(caFile))]
        }
        var configuration = HTTPClient.Configuration(
            tlsConfiguration: tls,
            redirectConfiguration: .disallow,
            timeout: HTTPClient.Configuration.Timeout(connect: .milliseconds(connectTimeout.milliseconds),
                                                      read: .milliseconds(callTimeout.milliseconds)),
            proxy: nil,
            decompression: .disabled)
        configuration.httpVersion = .automatic
        configuration.connectionPool = HTTPClient.Configuration.ConnectionPool(idleTimeout: .seconds(60),
                                                                                 concurrentHTTP1ConnectionsPerHostSoftLimit: 8)
        self.configuration = configuration
        self.policy = policy
        self.resolver = resolver
        self.callTimeout = callTimeout
        // AsyncHTTPClient logs request heads at trace level: its logger stops at debug so that no
        // token or JWT reaches the log.
        var httpLogger = logger
        if httpLogger.logLevel < .debug { httpLogger.logLevel = .debug }
        self.logger = httpLogger
        shared = HTTPClient(eventLoopGroupProvider: .shared(MultiThreadedEventLoopGroup.singleton), configuration: configuration,
                            backgroundActivityLogger: httpLogger)
    }

    deinit {
        _ = shared.shutdown()
        for entry in pinned.withLock({ $0.values.map(\.client) }) { _ = entry.shutdown() }
    }

    /// As a `Service`: waits for graceful shutdown, then closes every connection.
    func run() async throws {
        try? await gracefulShutdown()
        await shutdown()
    }

    /// Closes the connections; calls made afterwards fail with ``Failure/connect``.
    func shutdown() async {
        try? await shared.shutdown()
        resolver.shutdown()
        let clients = pinned.withLock { entries in
            defer { entries.removeAll() }
            return entries.values.map(\.client)
        }
        for client in clients { try? await client.shutdown() }
    }

    /// POSTs to one of the operator's endpoints (APNs, FCM, the OAuth token URL, the webhook).
    func post(_ url: String, headers: HTTPHeaders, body: [UInt8]) async -> Result<Answer, Failure> {
        await call(shared, url: url, headers: headers, body: body)
    }

    /// POSTs to a Web Push endpoint: its name resolved, every address checked, the call made to
    /// the first address (the next on a connect failure, two at most).
    func postWebPush(_ endpoint: AddressPolicy.Endpoint, headers: HTTPHeaders, body: [UInt8]) async -> Result<Answer, Failure> {
        let addresses: [IPAddress]
        if endpoint.isAddressLiteral, let literal = IPAddress(ipv6: endpoint.host) ?? IPAddress(ipv4Text: endpoint.host) {
            addresses = [literal]
        } else {
            guard let resolved = await resolver.resolve(endpoint.host, port: endpoint.port), !resolved.isEmpty else { return .failure(.connect) }
            addresses = resolved
        }
        // Every address must pass: a name that also points inside is refused, not routed around.
        guard addresses.allSatisfy(policy.permits) else { return .failure(.address) }
        if endpoint.scheme == "http", !(policy.allowPrivateAddresses && addresses.allSatisfy(\.isLoopback)) {
            return .failure(.address)
        }
        var last: Result<Answer, Failure> = .failure(.connect)
        for address in addresses.prefix(2) {
            let key = "\(endpoint.host) \(endpoint.port) \(address)"
            let client = lease(key: key, host: endpoint.host, address: address)
            last = await call(client, url: endpoint.url, headers: headers, body: body)
            release(key: key)
            if case .failure(.connect) = last { continue }
            break
        }
        return last
    }

    /// One call: the deadline on the whole of it, the body read up to the cap.
    ///
    /// AsyncHTTPClient's deadline ends when the answer's head arrives: a server that then trickles
    /// its body, a byte before each read timeout, would hold the call (and its slot) well past
    /// `--push-timeout`. So the whole exchange races the deadline, and is cancelled when it loses.
    private func call(_ client: HTTPClient, url: String, headers: HTTPHeaders, body: [UInt8]) async -> Result<Answer, Failure> {
        await withTaskGroup(of: Result<Answer, Failure>?.self) { group in
            group.addTask { await self.exchange(client, url: url, headers: headers, body: body) }
            group.addTask { [callTimeout] in
                try? await Task.sleep(for: callTimeout)
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first ?? .failure(.timeout)
        }
    }

    /// The request and its answer, read up to the cap.
    private func exchange(_ client: HTTPClient, url: String, headers: HTTPHeaders, body: [UInt8]) async -> Result<Answer, Failure> {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers = headers
        request.headers.replaceOrAdd(name: "user-agent", value: Self.userAgent)
        request.body = .bytes(ByteBuffer(bytes: body))
        let deadline = NIODeadline.now() + .milliseconds(callTimeout.milliseconds)
        do {
            let response = try await client.execute(request, deadline: deadline, logger: logger)
            var collected: [UInt8] = []
            for try await buffer in response.body {
                guard collected.count + buffer.readableBytes <= Self.maxAnswerBytes else { return .failure(.tooLarge) }
                collected += buffer.readableBytesView
                if NIODeadline.now() > deadline { return .failure(.timeout) }
            }
            return .success(Answer(status: Int(response.status.code), headers: response.headers, body: collected))
        } catch let error as HTTPClientError where error == .deadlineExceeded || error == .readTimeout
            || error == .connectTimeout || error == .getConnectionFromPoolTimeout {
            return .failure(error == .connectTimeout ? .connect : .timeout)
        } catch {
            return .failure(.connect)
        }
    }

    /// A client pinned to `address` for `host`, made or reused; closes stale and surplus ones.
    private func lease(key: String, host: String, address: IPAddress) -> HTTPClient {
        let now = ContinuousClock.now
        let (client, stale) = pinned.withLock { entries -> (HTTPClient, [HTTPClient]) in
            var stale: [HTTPClient] = []
            for (other, entry) in entries where entry.users == 0 && now - entry.lastUsed > Self.pinnedLifetime {
                stale.append(entry.client)
                entries[other] = nil
            }
            if var entry = entries[key] {
                entry.users += 1
                entry.lastUsed = now
                entries[key] = entry
                return (entry.client, stale)
            }
            if entries.count >= Self.maxPinnedClients,
               let oldest = entries.filter({ $0.value.users == 0 }).min(by: { $0.value.lastUsed < $1.value.lastUsed })?.key {
                stale.append(entries[oldest]!.client)
                entries[oldest] = nil
            }
            var configuration = self.configuration
            configuration.dnsOverride = [host: address.description]
            let client = HTTPClient(eventLoopGroupProvider: .shared(MultiThreadedEventLoopGroup.singleton),
                                    configuration: configuration, backgroundActivityLogger: logger)
            // Over the bound only while every pinned client is in use (≤ the concurrency).
            entries[key] = Pinned(client: client, lastUsed: now, users: 1)
            return (client, stale)
        }
        for old in stale { _ = old.shutdown() }
        return client
    }

    private func release(key: String) {
        pinned.withLock { entries in
            guard var entry = entries[key] else { return }
            entry.users -= 1
            entry.lastUsed = .now
            entries[key] = entry
        }
    }
}
