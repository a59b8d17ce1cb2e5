import Foundation
import HTTPTypes
import HummingbirdWSClient
import Logging
import MailslotWire

/// A subscription socket (`/v1/users/{uid}/subscribe`) as a client opens it: collects the relay's
/// frames, sends client frames, and reports how the relay closed it. Every wait is bounded.
public final class RelaySocket: Sendable {
    private actor Inbox {
        var frames: [RelayFrame] = []
        var writer: WebSocketOutboundWriter?
        var finished = false
        func add(_ frame: RelayFrame) { frames.append(frame) }
        func take() -> RelayFrame? { frames.isEmpty ? nil : frames.removeFirst() }
        func set(_ writer: WebSocketOutboundWriter) { self.writer = writer }
        func finish() { finished = true }
    }

    private static let logger = Logger(label: "mailslot-audit.socket", factory: { _ in SwiftLogNoOpLogHandler() })
    private let inbox = Inbox()
    private let connection: Task<WebSocketCloseFrame?, any Error>

    /// Opens the socket at `url` (`ws://…` or `wss://…`) with `authorization` as the header.
    public init(url: String, authorization: String?) {
        let inbox = self.inbox
        var headers = HTTPFields()
        if let authorization { headers[.authorization] = authorization }
        let configuration = WebSocketClientConfiguration(maxFrameSize: 1 << 21, additionalHeaders: headers)
        connection = Task {
            defer { Task { await inbox.finish() } }
            return try await WebSocketClient.connect(url: url, configuration: configuration, logger: Self.logger) { inbound, outbound, _ in
                await inbox.set(outbound)
                for try await message in inbound.messages(maxSize: 1 << 21) {
                    guard case .text(let text) = message,
                          let frame = try? JSONDecoder().decode(RelayFrame.self, from: Data(text.utf8)) else { continue }
                    await inbox.add(frame)
                }
            }
        }
    }

    /// Opens `uid`'s subscription on the relay at `base` (`http(s)://host:port`) with `session`.
    public static func subscribe(base: URL, uid: String, session: String?) -> RelaySocket {
        let scheme = base.scheme == "https" ? "wss" : "ws"
        let authority = base.absoluteString.drop { $0 != ":" }.dropFirst(3).prefix { $0 != "/" }
        return RelaySocket(url: "\(scheme)://\(authority)/v1/users/\(uid)/subscribe", authorization: session.map { "Bearer \($0)" })
    }

    /// The next frame from the relay, or nil if none arrives within `timeout`.
    public func next(timeout: Duration = .seconds(5)) async throws -> RelayFrame? {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let frame = await inbox.take() { return frame }
            if await inbox.finished { return await inbox.take() }
            try await Task.sleep(for: .milliseconds(5))
        }
        return nil
    }

    /// Sends a client frame.
    public func send(_ frame: ClientFrame) async throws {
        try await send(text: String(decoding: try JSONEncoder().encode(frame), as: UTF8.self))
    }

    /// Sends raw text as one frame.
    public func send(text: String) async throws {
        let deadline = ContinuousClock.now + .seconds(5)
        while await inbox.writer == nil, !(await inbox.finished), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(5))
        }
        guard let writer = await inbox.writer else { throw AuditError("the socket did not open") }
        try await writer.write(.text(text))
    }

    /// Closes from the client side and waits for the connection to end.
    public func close() async {
        try? await inbox.writer?.close(.normalClosure, reason: nil)
        _ = try? await connection.value
    }

    /// Whether the connection has ended.
    public var isFinished: Bool { get async { await inbox.finished } }

    /// How the relay closed the socket, waiting at most `timeout`: the code of a private-use
    /// close (4000…4999), 1009 for "too big", 0 for any other end, nil when still open.
    public func closeCode(timeout: Duration = .seconds(20)) async -> UInt16? {
        let connection = self.connection, inbox = self.inbox
        let ended: (Bool, WebSocketCloseFrame?) = await withTaskGroup(of: (Bool, WebSocketCloseFrame?)?.self) { group in
            group.addTask { (true, try? await connection.value) }
            group.addTask { try? await Task.sleep(for: timeout); return nil }
            let first = await group.next() ?? nil
            if first == nil {
                // Still open: close it from this side (the group waits for the connection task),
                // so that nothing is left hanging on the relay either.
                try? await inbox.writer?.close(.normalClosure, reason: nil)
                connection.cancel()
            }
            group.cancelAll()
            return first ?? (false, nil)
        }
        guard ended.0 else { return nil }
        switch ended.1?.closeCode {
        case .unknown(let code): return code
        case .messageTooLarge: return 1009
        default: return 0
        }
    }
}
