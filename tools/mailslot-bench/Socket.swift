import Foundation
import HTTPTypes
import HummingbirdWSClient
import Logging
import MailslotRelay
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOWebSocket
import Synchronization

/// One subscription WebSocket (`GET /v1/users/{uid}/subscribe`) run in its own task, with what
/// the controller needs: close it cleanly, wait (bounded) for it to end, and learn how it ended.
///
/// A `ws://` socket is NIO's WebSocket client directly, because the load generator shares the
/// machine with the relay and every microsecond it spends is one the relay does not get: it
/// flushes once per event-loop turn (``FlushCoalescer``, as the relay does) instead of once per
/// frame, and draws frame masks from a fast generator instead of a system call per frame. A
/// `wss://` socket goes through HummingbirdWSClient, which brings TLS.
final class Socket: Sendable {
    /// Inbound frames with their fragments joined, and the writer for client frames.
    typealias Handler = @Sendable (_ frames: FrameStream, _ outbound: FrameWriter) async throws -> Void

    private let task: Task<Void, any Error>
    private let writer: Locked<FrameWriter?>
    private let closing = Locked(false)
    /// How the socket ended, once it has.
    private let ending: Locked<String?>

    /// Connects as the session's user and runs `handler` until the socket closes.
    init(url: String, session: String, logger: Logger, handler: @escaping Handler) {
        let writer = Locked<FrameWriter?>(nil)
        self.writer = writer
        let ending = Locked<String?>(nil)
        self.ending = ending
        task = Task {
            do {
                let close = try await Self.run(url: url, session: session, logger: logger) { frames, outbound in
                    writer.withLock { $0 = outbound }
                    try await handler(frames, outbound)
                }
                ending.withLock { $0 = close.map { "closed with \($0.code) \($0.reason)" } ?? "closed without a close frame" }
            } catch {
                ending.withLock { $0 = "failed: \(error)" }
                throw error
            }
        }
    }

    /// How the socket ended, if it ended without the bench asking it to.
    var unexpectedEnd: String? { closeWasRequested ? nil : ending.current }

    /// Whether the bench asked for this close (otherwise the relay or the network closed it).
    var closeWasRequested: Bool { closing.current }

    /// Sends a normal close; the relay answers it and the handler's frames end. A socket that is
    /// not open yet is cancelled instead.
    func close() async {
        closing.withLock { $0 = true }
        if let outbound = writer.current {
            // Bounded: a peer that stopped reading cannot hold the close.
            _ = try? await withDeadline(seconds: 5) { try await outbound.close() }
        } else {
            task.cancel()
        }
    }

    /// Waits at most `seconds` for the socket to end; cancels it if it does not. False on timeout.
    @discardableResult
    func finish(within seconds: Double) async -> Bool {
        let task = self.task
        let ended = (try? await withDeadline(seconds: seconds) { _ = await task.result; return true }) ?? false
        if !ended { task.cancel() }
        return ended
    }

    /// Cancels the socket's task at once (the crash test's dead relay).
    func abandon() {
        closing.withLock { $0 = true }
        task.cancel()
    }

    /// A standard logger for the WebSocket client that keeps stdout clean: warnings and worse, to stderr.
    static let logger: Logger = {
        var logger = Logger(label: "mailslot-bench", factory: { StreamLogHandler.standardError(label: $0) })
        logger.logLevel = .warning
        return logger
    }()

    /// The relay's close frame: its code (as text; "none" when it sent none) and reason.
    struct CloseFrame: Sendable {
        let code: String
        let reason: String
    }

    private static func run(url: String, session: String, logger: Logger, handler: @escaping Handler) async throws -> CloseFrame? {
        guard let parsed = URL(string: url), let host = parsed.host else { throw BenchFailure(description: "bad WebSocket URL \(url)", status: 2) }
        if parsed.scheme == "wss" {
            var headers = HTTPFields()
            headers[.authorization] = "Bearer \(session)"
            // No auto-ping: runs are short, and a ping would be one more frame on the measured path.
            let configuration = WebSocketClientConfiguration(maxFrameSize: maxFrameSize, additionalHeaders: headers, autoPing: .disabled)
            let close = try await WebSocketClient.connect(url: url, configuration: configuration, logger: logger) { inbound, outbound, _ in
                try await handler(FrameStream(.client(inbound.makeAsyncIterator())), FrameWriter(.client(outbound)))
            }
            return close.map { CloseFrame(code: "\($0.closeCode)", reason: $0.reason ?? "") }
        }
        let port = parsed.port ?? 80
        var path = parsed.path.isEmpty ? "/" : parsed.path
        if let query = parsed.query { path += "?" + query }
        let upgraded = try await upgrade(host: host, port: port, path: path, session: session)
        return try await upgraded.executeThenClose { inbound, outbound in
            let state = CloseState()
            let writer = FrameWriter(.nio(outbound, state))
            let frames = FrameStream(.nio(inbound.makeAsyncIterator(), writer, state))
            try await handler(frames, writer)
            return frames.closeFrame
        }
    }

    static let maxFrameSize = 1 << 21

    /// TCP connection and the HTTP/1.1 upgrade (RFC 6455 §4.1), with the session in `Authorization`.
    private static func upgrade(host: String, port: Int, path: String, session: String) async throws -> NIOAsyncChannel<WebSocketFrame, WebSocketFrame> {
        enum Upgrade: Sendable {
            case upgraded(NIOAsyncChannel<WebSocketFrame, WebSocketFrame>)
            case refused
        }
        let negotiation: EventLoopFuture<Upgrade> = try await ClientBootstrap(group: .singletonMultiThreadedEventLoopGroup)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .connect(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let upgrader = NIOTypedWebSocketClientUpgrader<Upgrade>(maxFrameSize: maxFrameSize) { channel, _ in
                        channel.eventLoop.makeCompletedFuture {
                            try channel.pipeline.syncOperations.addHandler(FlushCoalescer(), position: .first)
                            return .upgraded(try NIOAsyncChannel(wrappingChannelSynchronously: channel))
                        }
                    }
                    var headers = HTTPHeaders()
                    headers.add(name: "Host", value: "\(host):\(port)")
                    headers.add(name: "Authorization", value: "Bearer \(session)")
                    let configuration = NIOTypedHTTPClientUpgradeConfiguration<Upgrade>(
                        upgradeRequestHead: HTTPRequestHead(version: .http1_1, method: .GET, uri: path, headers: headers),
                        upgraders: [upgrader],
                        notUpgradingCompletionHandler: { channel in
                            channel.close(promise: nil)
                            return channel.eventLoop.makeSucceededFuture(.refused)
                        })
                    var pipeline = NIOUpgradableHTTPClientPipelineConfiguration(upgradeConfiguration: configuration)
                    // A frame that arrives in the same read as the 101 response belongs to the
                    // WebSocket (the relay's `ready` can); the default would drop it.
                    pipeline.leftOverBytesStrategy = .forwardBytes
                    return try channel.pipeline.syncOperations.configureUpgradableHTTPClientPipeline(configuration: pipeline)
                }
            }
        switch try await negotiation.get() {
        case .upgraded(let channel): return channel
        case .refused: throw BenchFailure(description: "the relay refused the WebSocket upgrade for \(path)", status: 1)
        }
    }
}

/// Writes client frames on a ``Socket``: text frames, answers to pings, and the close.
struct FrameWriter: Sendable {
    fileprivate enum Base: Sendable {
        case nio(NIOAsyncChannelOutboundWriter<WebSocketFrame>, CloseState)
        case client(WebSocketOutboundWriter)
    }

    private let base: Base

    fileprivate init(_ base: Base) { self.base = base }

    /// Sends one text frame.
    func write(_ text: String) async throws {
        switch base {
        case .nio(let outbound, _): try await outbound.write(Self.frame(.text, ByteBuffer(string: text)))
        case .client(let outbound): try await outbound.write(.text(text))
        }
    }

    /// Starts the closing handshake with a normal closure (1000).
    func close() async throws {
        switch base {
        case .nio(let outbound, let state):
            guard state.markCloseSent() else { return }
            try await outbound.write(Self.closeFrame(code: 1000))
        case .client(let outbound): try await outbound.close(.normalClosure, reason: nil)
        }
    }

    fileprivate func nio(_ frame: WebSocketFrame) async throws {
        if case .nio(let outbound, _) = base { try await outbound.write(frame) }
    }

    /// Answers the relay's close, unless this side already sent one (then the relay's answers it).
    fileprivate func answerClose(code: UInt16) async {
        if case .nio(let outbound, let state) = base, state.markCloseSent() { try? await outbound.write(Self.closeFrame(code: code)) }
    }

    fileprivate static func closeFrame(code: UInt16) -> WebSocketFrame {
        var data = ByteBuffer()
        data.writeInteger(code)
        return frame(.connectionClose, data)
    }

    /// A client frame, masked as RFC 6455 §5.3 requires of clients.
    fileprivate static func frame(_ opcode: WebSocketOpcode, _ data: ByteBuffer) -> WebSocketFrame {
        WebSocketFrame(fin: true, opcode: opcode, maskKey: MaskKeys.next(), data: data)
    }
}

/// Masking keys for client frames. RFC 6455 wants them unpredictable so that a client's bytes
/// cannot be steered into something a proxy cache misreads; a load generator talking to its own
/// relay has no such adversary, and a system call per frame for them showed in its profile. So:
/// SplitMix64 over a counter, seeded from the system's generator once.
private enum MaskKeys {
    static let seed = UInt64.random(in: .min ... .max)
    static let counter = Atomic<UInt64>(0)

    static func next() -> WebSocketMaskingKey {
        var z = seed &+ counter.add(1, ordering: .relaxed).newValue &* 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        z ^= z >> 31
        let word = UInt32(truncatingIfNeeded: z)
        return WebSocketMaskingKey([UInt8(word >> 24), UInt8(word >> 16 & 0xFF), UInt8(word >> 8 & 0xFF), UInt8(word & 0xFF)])!
    }
}

/// The closing handshake of a NIO socket: whether this side sent its close frame, and the
/// relay's close frame once it came.
final class CloseState: Sendable {
    private let state = Mutex<(sent: Bool, received: Socket.CloseFrame?)>((false, nil))
    var received: Socket.CloseFrame? { state.withLock { $0.received } }
    func receive(_ frame: Socket.CloseFrame) { state.withLock { $0.received = frame } }
    /// True the first time: the close frame is to be sent.
    func markCloseSent() -> Bool {
        state.withLock { state in
            defer { state.sent = true }
            return !state.sent
        }
    }
}

/// The frames of a socket, fragments joined: each element is one whole message's bytes. On the
/// NIO transport the control frames are handled here: a ping is answered with a pong, and the
/// relay's close is answered and ends the sequence.
struct FrameStream: AsyncSequence, Sendable {
    typealias Element = ByteBuffer

    fileprivate enum Source: @unchecked Sendable {
        // @unchecked: an iterator is only ever used by the one task that iterates the stream.
        case nio(NIOAsyncChannelInboundStream<WebSocketFrame>.AsyncIterator, FrameWriter, CloseState)
        case client(WebSocketInboundStream.AsyncIterator)
    }

    private let source: Source

    fileprivate init(_ source: Source) { self.source = source }

    /// The relay's close frame, once the sequence has ended with one (NIO transport).
    fileprivate var closeFrame: Socket.CloseFrame? {
        if case .nio(_, _, let state) = source { return state.received }
        return nil
    }

    struct AsyncIterator: AsyncIteratorProtocol {
        fileprivate var source: Source

        mutating func next() async throws -> ByteBuffer? {
            switch source {
            case .client(var frames):
                defer { source = .client(frames) }
                guard let first = try await frames.next() else { return nil }
                if first.fin { return first.data }
                var joined = first.data
                while let more = try await frames.next() {
                    var data = more.data
                    joined.writeBuffer(&data)
                    if more.fin { return joined }
                }
                return nil
            case .nio(var frames, let writer, let state):
                defer { source = .nio(frames, writer, state) }
                var joined: ByteBuffer?
                while let frame = try await frames.next() {
                    switch frame.opcode {
                    case .text, .binary, .continuation:
                        var data = frame.unmaskedData
                        if frame.fin, joined == nil { return data }
                        if joined == nil { joined = data } else { joined!.writeBuffer(&data) }
                        if frame.fin { return joined }
                    case .ping:
                        try await writer.nio(FrameWriter.frame(.pong, frame.unmaskedData))
                    case .connectionClose:
                        var data = frame.unmaskedData
                        let code = data.readInteger(as: UInt16.self)
                        state.receive(Socket.CloseFrame(code: code.map { String($0) } ?? "none",
                                                        reason: data.readString(length: data.readableBytes) ?? ""))
                        await writer.answerClose(code: code ?? 1000)
                        return nil
                    default:
                        continue
                    }
                }
                return nil
            }
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(source: source) }
}
