import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing
@testable import MailslotRelay

/// A raw TCP connection, for what HTTP clients will not send: oversized headers, idle sockets.
/// Its blocking reads run on a Dispatch thread, never on the Swift concurrency pool that the
/// in-process relay needs to answer.
final class RawConnection: @unchecked Sendable {
    let descriptor: Int32

    init(port: Int) throws {
        descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let status = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard status == 0 else { throw POSIXError(.ECONNREFUSED) }
        var timeout = timeval(tv_sec: 0, tv_usec: 500_000)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close(descriptor) }

    func send(_ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// What arrives within `attempts` × 0.5 s: bytes, `""` when the relay closed, nil when nothing came.
    func receive(attempts: Int = 1) async -> String? {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(returning: self.blockingReceive(attempts: attempts)) }
        }
    }

    private func blockingReceive(attempts: Int) -> String? {
        var buffer = [UInt8](repeating: 0, count: 4096)
        for _ in 0..<attempts {
            let count = recv(descriptor, &buffer, buffer.count, 0)
            if count > 0 { return String(decoding: buffer[..<count], as: UTF8.self) }
            if count == 0 || errno == ECONNRESET { return "" }
        }
        return nil
    }
}

@Suite struct ConnectionLimitTests {
    @Test func oversizedHeadersCloseTheConnectionAtOnce() async throws {
        let relay = try await TestRelay.start()
        defer { Task { try? await relay.finish() } }
        let connection = try RawConnection(port: relay.port)
        connection.send("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: \(String(repeating: "a", count: 40_000))\r\n\r\n")
        #expect(await connection.receive(attempts: 10) == "", "closed, not left hanging")
        let normal = try RawConnection(port: relay.port)
        normal.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(await normal.receive(attempts: 20)?.hasPrefix("HTTP/1.1 200") == true, "the relay carries on")
    }

    @Test func connectionsBeyondTheLimitWaitUntilOneCloses() async throws {
        let relay = try await TestRelay.start { $0.maxConnections = 3 }
        defer { Task { try? await relay.finish() } }
        var held = try (0..<3).map { _ in try RawConnection(port: relay.port) }
        try await Task.sleep(for: .milliseconds(200))
        let extra = try RawConnection(port: relay.port)
        extra.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(await extra.receive() == nil, "not served while the limit is reached")
        held.removeFirst()  // closes one
        #expect(await extra.receive(attempts: 20)?.hasPrefix("HTTP/1.1 200") == true, "served once a connection closed")
        _ = held
    }
}
