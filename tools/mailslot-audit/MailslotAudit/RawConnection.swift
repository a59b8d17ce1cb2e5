import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A raw TCP connection, for what HTTP clients will not send: oversized headers, dot segments,
/// half-open requests. Blocking reads run on a Dispatch thread, never on the Swift concurrency
/// pool (an in-process relay needs that pool to answer).
public final class RawConnection: @unchecked Sendable {
    // @unchecked: the descriptor is set once; the kernel serialises what is done with it.
    let descriptor: Int32

    /// Connects to `host:port` (IPv4 or IPv6, as the name resolves). `receiveBuffer` fixes the
    /// socket's receive buffer (no autotuning), for a reader that must stay slow.
    public init(host: String, port: Int, receiveBuffer: Int? = nil) throws {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, String(port), &hints, &list) == 0, let first = list else { throw POSIXError(.EHOSTUNREACH) }
        defer { freeaddrinfo(list) }
        var connected: Int32 = -1
        var entry: UnsafeMutablePointer<addrinfo>? = first
        while let address = entry, connected < 0 {
            let candidate = socket(address.pointee.ai_family, address.pointee.ai_socktype, address.pointee.ai_protocol)
            if candidate >= 0, var size = receiveBuffer.map(Int32.init) {
                setsockopt(candidate, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
            }
            if candidate >= 0, connect(candidate, address.pointee.ai_addr, address.pointee.ai_addrlen) == 0 {
                connected = candidate
            } else if candidate >= 0 {
                close(candidate)
            }
            entry = address.pointee.ai_next
        }
        guard connected >= 0 else { throw POSIXError(.ECONNREFUSED) }
        descriptor = connected
        var timeout = timeval(tv_sec: 0, tv_usec: 500_000)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var sendTimeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_SNDTIMEO, &sendTimeout, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close(descriptor) }

    /// Writes `text` as it is.
    public func send(_ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// What arrives within `attempts` × 0.5 s: bytes, `""` when the peer closed, nil when nothing came.
    public func receive(attempts: Int = 1) async -> String? {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(returning: self.blockingReceive(attempts: attempts)) }
        }
    }

    /// The status code of the HTTP answer that arrives within `attempts` × 0.5 s; nil when none
    /// did, 0 when the peer closed without answering.
    public func status(attempts: Int = 20) async -> Int? {
        guard let text = await receive(attempts: attempts) else { return nil }
        guard text.hasPrefix("HTTP/1.1 "), let code = Int(text.dropFirst(9).prefix(3)) else { return 0 }
        return code
    }

    /// Writes `bytes` as they are, from a Dispatch thread (a peer that stops reading blocks the
    /// write for at most 5 s); false when the peer is gone or stopped reading.
    @discardableResult
    public func send(bytes: [UInt8]) async -> Bool {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                var offset = 0
                while offset < bytes.count {
                    let sent = bytes[offset...].withUnsafeBytes { Glibc.send(self.descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                    if sent <= 0 { return continuation.resume(returning: false) }
                    offset += sent
                }
                continuation.resume(returning: true)
            }
        }
    }

    /// Upgrades this connection to a WebSocket at `path` with `session`: true when answered 101.
    /// What follows the answer's head (the relay's first frames) is kept for ``webSocketClose(attempts:)``.
    public func upgrade(path: String, session: String) async -> Bool {
        send("GET \(path) HTTP/1.1\r\nHost: relay\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
             + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer \(session)\r\n\r\n")
        var received: [UInt8] = []
        for _ in 0..<20 {
            guard let bytes = await receiveBytes(), !bytes.isEmpty else { return false }
            received += bytes
            if let end = received.firstRange(of: Array("\r\n\r\n".utf8)) {
                leftover = Array(received[end.upperBound...])
                return received.starts(with: Array("HTTP/1.1 101".utf8))
            }
        }
        return false
    }

    /// A client frame (masked, as RFC 6455 requires of clients): `opcode` 1 text, 0 continuation.
    public static func webSocketFrame(opcode: UInt8, fin: Bool, payload: [UInt8]) -> [UInt8] {
        var frame: [UInt8] = [(fin ? 0x80 : 0) | opcode]
        switch payload.count {
        case ..<126: frame.append(0x80 | UInt8(payload.count))
        case ..<65536: frame += [0x80 | 126, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
        default: frame += [0x80 | 127] + (0..<8).reversed().map { UInt8((payload.count >> ($0 * 8)) & 0xFF) }
        }
        frame += [0, 0, 0, 0]  // a zero mask leaves the payload as it is
        return frame + payload
    }

    /// Reads the relay's frames until it closes the WebSocket, within `attempts` × 0.5 s: the
    /// close frame's code; 1005 for a close frame without one; 0 when the connection ended with
    /// no close frame; nil when it is still open.
    public func webSocketClose(attempts: Int = 20) async -> UInt16? {
        var buffer = leftover
        leftover = []
        for _ in 0..<attempts {
            // Skip whole frames until a close frame (opcode 8) is at the front.
            while buffer.count >= 2 {
                let opcode = buffer[0] & 0x0F
                var length = Int(buffer[1] & 0x7F), header = 2
                if length == 126, buffer.count >= 4 { length = Int(buffer[2]) << 8 | Int(buffer[3]); header = 4 }
                if length == 127, buffer.count >= 10 { length = buffer[2..<10].reduce(0) { $0 << 8 | Int($1) }; header = 10 }
                guard buffer.count >= header + length else { break }
                if opcode == 8 { return length >= 2 ? UInt16(buffer[header]) << 8 | UInt16(buffer[header + 1]) : 1005 }
                buffer.removeFirst(header + length)
            }
            guard let bytes = await receiveBytes() else { continue }
            if bytes.isEmpty { return 0 }
            buffer += bytes
        }
        return nil
    }

    /// Bytes that arrived after the upgrade's answer, not yet read.
    private var leftover: [UInt8] {
        get { pending.withLock { $0 } }
        set { pending.withLock { $0 = newValue } }
    }
    private let pending = Mutex<[UInt8]>([])

    /// What arrives within 0.5 s: bytes, `[]` when the peer closed, nil when nothing came.
    private func receiveBytes() async -> [UInt8]? {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                var buffer = [UInt8](repeating: 0, count: 65536)
                let count = recv(self.descriptor, &buffer, buffer.count, 0)
                if count > 0 { return continuation.resume(returning: Array(buffer[..<count])) }
                continuation.resume(returning: count == 0 || errno == ECONNRESET ? [] : nil)
            }
        }
    }

    private func blockingReceive(attempts: Int) -> String? {
        var buffer = [UInt8](repeating: 0, count: 8192)
        for _ in 0..<attempts {
            let count = recv(descriptor, &buffer, buffer.count, 0)
            if count > 0 { return String(decoding: buffer[..<count], as: UTF8.self) }
            if count == 0 || errno == ECONNRESET { return "" }
        }
        return nil
    }
}
