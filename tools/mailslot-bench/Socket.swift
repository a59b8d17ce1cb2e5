import Foundation
import HTTPTypes
import HummingbirdWSClient
import Logging
import NIOCore

/// One subscription WebSocket (`GET /v1/users/{uid}/subscribe`) run in its own task, with what
/// the controller needs: close it cleanly, wait (bounded) for it to end, and learn how it ended.
final class Socket: Sendable {
    /// Inbound frames with their fragments joined, and the writer for client frames.
    typealias Handler = @Sendable (_ frames: FrameStream, _ outbound: WebSocketOutboundWriter) async throws -> Void

    private let task: Task<WebSocketCloseFrame?, any Error>
    private let writer: Locked<WebSocketOutboundWriter?>
    private let closing = Locked(false)
    /// How the socket ended, once it has.
    private let ending: Locked<String?>

    /// Connects as the session's user and runs `handler` until the socket closes.
    init(url: String, session: String, logger: Logger, handler: @escaping Handler) {
        let writer = Locked<WebSocketOutboundWriter?>(nil)
        self.writer = writer
        var headers = HTTPFields()
        headers[.authorization] = "Bearer \(session)"
        // No auto-ping: runs are short, and a ping would be one more frame on the measured path.
        let configuration = WebSocketClientConfiguration(maxFrameSize: 1 << 21, additionalHeaders: headers, autoPing: .disabled)
        let ending = Locked<String?>(nil)
        self.ending = ending
        task = Task {
            do {
                let close = try await WebSocketClient.connect(url: url, configuration: configuration, logger: logger) { inbound, outbound, _ in
                    writer.withLock { $0 = outbound }
                    try await handler(FrameStream(inbound), outbound)
                }
                ending.withLock { $0 = close.map { "closed with \($0.closeCode) \($0.reason ?? "")" } ?? "closed without a close frame" }
                return close
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
            _ = try? await withDeadline(seconds: 5) { try await outbound.close(.normalClosure, reason: nil) }
        } else {
            task.cancel()
        }
    }

    /// Waits at most `seconds` for the socket to end; cancels it if it does not. Returns how it
    /// ended: the relay's close frame, or the error, or nil on timeout.
    @discardableResult
    func finish(within seconds: Double) async -> Result<WebSocketCloseFrame?, any Error>? {
        let task = self.task
        let outcome = try? await withDeadline(seconds: seconds) { await task.result }
        if outcome == nil { task.cancel() }
        return outcome ?? nil
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
}

/// The frames of a socket, fragments joined: each element is one whole message's bytes.
struct FrameStream: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let inbound: WebSocketInboundStream

    init(_ inbound: WebSocketInboundStream) { self.inbound = inbound }

    struct AsyncIterator: AsyncIteratorProtocol {
        var frames: WebSocketInboundStream.AsyncIterator

        mutating func next() async throws -> ByteBuffer? {
            guard let first = try await frames.next() else { return nil }
            if first.fin { return first.data }
            var joined = first.data
            while let more = try await frames.next() {
                var data = more.data
                joined.writeBuffer(&data)
                if more.fin { return joined }
            }
            return nil
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(frames: inbound.makeAsyncIterator()) }
}
