import Foundation
import MailslotAudit
import MailslotTestSupport
import Testing
@testable import MailslotRelay

@Suite struct ConnectionLimitTests {
    @Test func oversizedHeadersCloseTheConnectionAtOnce() async throws {
        try await withTestRelay { relay in
            let connection = try RawConnection(port: relay.port)
            connection.send("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: \(String(repeating: "a", count: 40_000))\r\n\r\n")
            #expect(await connection.receive(attempts: 10) == "", "closed, not left hanging")
            let normal = try RawConnection(port: relay.port)
            normal.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(await normal.receive(attempts: 20)?.hasPrefix("HTTP/1.1 200") == true, "the relay carries on")
        }
    }

    @Test func connectionsBeyondTheLimitWaitUntilOneCloses() async throws {
        try await withTestRelay(configure: { $0.maxConnections = 3 }) { relay in
            // Three connections, each served once (so accepted, and kept open: HTTP/1.1 keeps it
            // alive) before the extra one connects. Connected alone is not enough: each read of
            // the listening socket accepts up to four queued connections (NIO's server channel;
            // the limit stops the next read), so on a loaded machine a fourth queued in time was
            // accepted with them (a CI run saw it served).
            var held = try (0..<3).map { _ in try RawConnection(port: relay.port) }
            for connection in held {
                connection.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                #expect(await connection.receive(attempts: 20)?.hasPrefix("HTTP/1.1 200") == true, "a held connection is served")
            }
            let extra = try RawConnection(port: relay.port)
            extra.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(await extra.receive() == nil, "not served while the limit is reached")
            held.removeFirst()  // closes one
            #expect(await extra.receive(attempts: 20)?.hasPrefix("HTTP/1.1 200") == true, "served once a connection closed")
            _ = held
        }
    }
}

/// A relay that cannot listen says so.
@Suite struct RelayStartTests {
    @Test func aPortInUseIsAStartErrorNotAWaitForever() async throws {
        try await withTestRelay { first in
            let port = first.port
            let outcome = try await withDeadline(.seconds(20), "a start on a port in use ends") {
                do {
                    return try await withTestRelay(store: .sqlite, configure: { $0.port = port }) { _ in "started" }
                } catch {
                    return "refused"
                }
            }
            #expect(outcome == "refused")
        }
    }
}

/// Sockets that never finish a request head cannot hold the relay's connections.
@Suite struct FirstRequestDeadlineTests {
    @Test func silentSocketsAtTheConnectionLimitAreClosedAndTheRelayServesAgain() async throws {
        try await withTestRelay(configure: { $0.maxConnections = 8; $0.headerTimeout = 1 }) { relay in
            // Queued in the kernel before the waiting one (first in, first out): these are the eight accepted.
            let silent = try (0..<8).map { _ in try RawConnection(port: relay.port) }
            let waiting = try RawConnection(port: relay.port)
            waiting.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            // Served once the relay closes the silent ones: they stay open on this side for the
            // whole test, so any answer within the wait can only come from the 1 s head deadline;
            // the wait (up to 40 × 0.5 s, over as soon as the answer comes) is long only so that a
            // machine loaded by the parallel suites does not fail it. (No wall-clock assertion.)
            #expect(await waiting.receive(attempts: 40)?.hasPrefix("HTTP/1.1 200") == true, "served once the head deadline closed them")
            for socket in silent { #expect(await socket.receive(attempts: 20) == "", "a silent socket is closed") }
        }
    }

    @Test func aHeadSentAByteAtATimeIsClosedAtTheDeadlineEvenThoughItIsNeverIdle() async throws {
        try await withTestRelay(configure: { $0.headerTimeout = 1; $0.idleTimeout = 5 }) { relay in
            let slow = try RawConnection(port: relay.port)
            slow.send("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            var closed = false
            for _ in 0..<8 where !closed {
                await slow.send(bytes: [0x61])
                closed = await slow.receive(attempts: 1) == ""
            }
            #expect(closed, "closed about a second after it connected")
        }
    }

    @Test func aSocketSilentPastTheIdleTimeoutIsClosedBeforeTheHeadDeadline() async throws {
        try await withTestRelay(configure: { $0.headerTimeout = 30; $0.idleTimeout = 1 }) { relay in
            let quiet = try RawConnection(port: relay.port)
            quiet.send("GET /healthz HTTP/1.1\r\n")
            #expect(await quiet.receive(attempts: 6) == "", "closed after a second of silence")
        }
    }

    @Test func aSubscriptionOutlivesTheDeadlines() async throws {
        try await withTestRelay(configure: { $0.headerTimeout = 1; $0.idleTimeout = 1 }) { relay in
            let bob = try await relay.signIn("bob"), alice = try await relay.signIn("alice")
            let socket = try await TestSocket.subscribed(relay, "bob", session: bob.session)
            // Past both deadlines: a silent socket connected after the subscription is closed by
            // them, so the subscription's own would have passed too. (Alice signs in before: her
            // send then goes on a new connection, not on a kept-alive one the 1 s idle timeout
            // may be closing that moment.)
            let sentinel = try RawConnection(port: relay.port)
            #expect(await sentinel.receive(attempts: 20) == "", "the deadlines closed a silent socket")
            #expect(await !socket.isFinished, "an upgraded connection is the ping's to watch")
            try await relay.send(alice.session, to: "bob", id: messageID(1))
            #expect(try await socket.next()?.type == "message")
            await socket.close()
        }
    }
}
