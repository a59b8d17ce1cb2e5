import Foundation
import Logging
import NIOCore
import NIOPosix
import Synchronization
import Testing
@testable import MailslotRelay
import MailslotTestSupport

/// The push providers' HTTP client against servers that misbehave on purpose (spec/push.md §4.2):
/// the whole call, body included, ends at `--push-timeout`; and the Web Push address rules at the
/// call (§4.1), with the name's answers given by the test: a name with a refused address is never
/// connected to, and the connection goes to the address checked, not to a second resolution.
@Suite struct OutboundHTTPTests {
    /// A server on 127.0.0.1 that counts the connections it accepts and closes each at once.
    final class CountingServer: Sendable {
        final class Count: Sendable {
            let value = Mutex(0)
        }

        let count: Count
        let channel: any Channel

        init() async throws {
            let count = Count()
            self.count = count
            channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .childChannelInitializer { child in
                    count.value.withLock { $0 += 1 }
                    return child.close()
                }
                .bind(host: "127.0.0.1", port: 0).get()
        }

        var port: Int { channel.localAddress?.port ?? 0 }
        var connections: Int { count.value.withLock { $0 } }
    }

    /// A client whose resolver answers `addresses` for every name.
    static func client(allowPrivate: Bool, answering addresses: [IPAddress]) throws -> OutboundHTTP {
        try OutboundHTTP(connectTimeout: .seconds(2), callTimeout: .seconds(4), caFile: nil,
                         policy: AddressPolicy(allowPrivateAddresses: allowPrivate), logger: TestRelay.logger,
                         resolver: NameResolver(timeout: .seconds(2), lookup: { _, _ in addresses }))
    }

    static let loopback = IPAddress(bytes: [127, 0, 0, 1])!
    /// A global address (TEST-NET is refused, so one outside every special range).
    static let global = IPAddress(bytes: [8, 8, 8, 8])!

    @Test(arguments: [[loopback], [global, loopback], [loopback, global]])
    func aNameWithARefusedAddressIsRefusedAndNeverConnected(_ answer: [IPAddress]) async throws {
        let server = try await CountingServer()
        defer { server.channel.close(promise: nil) }
        let http = try Self.client(allowPrivate: false, answering: answer)
        let endpoint = try AddressPolicy(allowPrivateAddresses: false).endpoint("https://push.example.test:\(server.port)/wake")
        let result = await http.postWebPush(endpoint, headers: [:], body: [1])
        await http.shutdown()
        #expect(result.failure == .address, "\(answer)")
        #expect(server.connections == 0)
    }

    @Test func theConnectionGoesToTheCheckedAddressNotToASecondResolution() async throws {
        // The name is not in any DNS: only the address the resolver gave (and the policy passed,
        // with the allowance) can reach the server.
        let server = try await CountingServer()
        defer { server.channel.close(promise: nil) }
        let http = try Self.client(allowPrivate: true, answering: [Self.loopback])
        let endpoint = try AddressPolicy(allowPrivateAddresses: true).endpoint("https://push.example.test:\(server.port)/wake")
        let result = await http.postWebPush(endpoint, headers: [:], body: [1])
        await http.shutdown()
        #expect(result.failure == .connect, "the server closes without TLS")
        #expect(server.connections >= 1)
    }

    /// Answers any request with a 200 head announcing 64 bytes, then sends one byte every
    /// `interval` — each before the client's read timeout — and never the rest.
    final class TrickleHandler: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer
        let interval: TimeAmount
        private var task: RepeatedTask?

        init(interval: TimeAmount) { self.interval = interval }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            guard task == nil else { return }
            let channel = context.channel
            channel.writeAndFlush(ByteBuffer(string: "HTTP/1.1 200 OK\r\ncontent-length: 64\r\n\r\nx"), promise: nil)
            task = context.eventLoop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { _ in
                channel.writeAndFlush(ByteBuffer(string: "x"), promise: nil)
            }
        }

        func channelInactive(context: ChannelHandlerContext) {
            task?.cancel()
            context.fireChannelInactive()
        }
    }

    @Test func aBodyTrickledBeforeEachReadTimeoutStillEndsAtTheCallTimeout() async throws {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { child in
                child.eventLoop.makeCompletedFuture { try child.pipeline.syncOperations.addHandler(TrickleHandler(interval: .milliseconds(4_800))) }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        defer { channel.close(promise: nil) }
        let port = try #require(channel.localAddress?.port)
        let policy = AddressPolicy(allowPrivateAddresses: true)
        let http = try OutboundHTTP(connectTimeout: .seconds(2), callTimeout: .seconds(5), caFile: nil, policy: policy, logger: TestRelay.logger)
        let endpoint = try policy.endpoint("http://127.0.0.1:\(port)/wake")
        let start = ContinuousClock.now
        let result = await http.postWebPush(endpoint, headers: [:], body: [1])
        let elapsed = ContinuousClock.now - start
        await http.shutdown()
        #expect(result.failure == .timeout)
        // A byte every 4.8 s keeps a 5 s read timeout from firing: without a deadline on the body
        // the call would end only at the next byte after the deadline (9.6 s) or later. The margin
        // is for a loaded machine.
        #expect(elapsed < .seconds(8), "took \(elapsed)")
    }
}

extension Result {
    /// The failure, nil on success.
    var failure: Failure? {
        if case .failure(let failure) = self { failure } else { nil }
    }
}
