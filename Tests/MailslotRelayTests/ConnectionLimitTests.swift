import Foundation
import MailslotAudit
import Testing
@testable import MailslotRelay

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
