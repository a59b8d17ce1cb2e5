import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A raw TCP connection, for what HTTP clients will not send: oversized headers, dot segments,
/// half-open requests. Blocking reads run on a Dispatch thread, never on the Swift concurrency
/// pool (an in-process relay needs that pool to answer).
public final class RawConnection: @unchecked Sendable {
    // @unchecked: the descriptor is set once; the kernel serialises what is done with it.
    let descriptor: Int32

    /// Connects to `host:port` (IPv4 or IPv6, as the name resolves).
    public init(host: String, port: Int) throws {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, String(port), &hints, &list) == 0, let first = list else { throw POSIXError(.EHOSTUNREACH) }
        defer { freeaddrinfo(list) }
        var connected: Int32 = -1
        var entry: UnsafeMutablePointer<addrinfo>? = first
        while let address = entry, connected < 0 {
            let candidate = socket(address.pointee.ai_family, address.pointee.ai_socktype, address.pointee.ai_protocol)
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
