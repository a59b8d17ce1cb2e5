import Foundation
import HTTPTypes
import HummingbirdWSClient
import Logging
@testable import MailslotRelay
import MailslotWire

/// A subscription socket for tests: connects to `/v1/users/{uid}/subscribe`, collects the relay's
/// frames, sends client frames, and reports how the relay closed it.
final class TestSocket: Sendable {
    private actor Inbox {
        var frames: [RelayFrame] = []
        var writer: WebSocketOutboundWriter?
        var finished = false
        func add(_ frame: RelayFrame) { frames.append(frame) }
        func take() -> RelayFrame? { frames.isEmpty ? nil : frames.removeFirst() }
        func set(_ writer: WebSocketOutboundWriter) { self.writer = writer }
        func finish() { finished = true }
    }

    private let inbox = Inbox()
    private let connection: Task<WebSocketCloseFrame?, any Error>

    private init(url: String, authorization: String?) {
        let inbox = self.inbox
        var headers = HTTPFields()
        if let authorization { headers[.authorization] = authorization }
        let configuration = WebSocketClientConfiguration(maxFrameSize: 1 << 20, additionalHeaders: headers)
        connection = Task {
            defer { Task { await inbox.finish() } }
            return try await WebSocketClient.connect(url: url, configuration: configuration, logger: TestRelay.logger) { inbound, outbound, _ in
                await inbox.set(outbound)
                for try await message in inbound.messages(maxSize: 1 << 20) {
                    guard case .text(let text) = message,
                          let frame = try? JSONDecoder().decode(RelayFrame.self, from: Data(text.utf8)) else { continue }
                    await inbox.add(frame)
                }
            }
        }
    }

    /// Opens `uid`'s subscription with `session` (or without any Authorization header).
    static func open(_ relay: TestRelay, _ uid: String, session: String?) -> TestSocket {
        TestSocket(url: "ws://127.0.0.1:\(relay.port)/v1/users/\(uid)/subscribe", authorization: session.map { "Bearer \($0)" })
    }

    /// The next frame from the relay, or nil if none arrives within `timeout`.
    func next(timeout: Duration = .seconds(5)) async throws -> RelayFrame? {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let frame = await inbox.take() { return frame }
            if await inbox.finished { return await inbox.take() }
            try await Task.sleep(for: .milliseconds(5))
        }
        return nil
    }

    /// Sends a client frame (raw text when given a string).
    func send(_ frame: ClientFrame) async throws {
        try await send(text: String(decoding: try JSONEncoder().encode(frame), as: UTF8.self))
    }

    func send(text: String) async throws {
        let deadline = ContinuousClock.now + .seconds(5)
        while await inbox.writer == nil, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        guard let writer = await inbox.writer else { throw CancellationError() }
        try await writer.write(.text(text))
    }

    /// Closes from the client side and waits for the connection to end.
    func close() async {
        try? await inbox.writer?.close(.normalClosure, reason: nil)
        _ = try? await connection.value
    }

    /// How the relay closed the socket: waits for it, at most `timeout` (then nil, and the
    /// connection is abandoned), so that a relay that never closes fails the test instead of hanging it.
    func closeCode(timeout: Duration = .seconds(20)) async throws -> UInt16? {
        let connection = self.connection
        let frame = await withTaskGroup(of: WebSocketCloseFrame?.self) { group in
            group.addTask { try? await connection.value }
            group.addTask { try? await Task.sleep(for: timeout); return nil }
            let first = await group.next() ?? nil
            group.cancelAll()
            connection.cancel()
            return first
        }
        if case .unknown(let code) = frame?.closeCode { return code }
        return nil
    }
}
