import MailslotAudit

/// The tests' WebSocket client is the audit's (``RelaySocket``): typed frames both ways, every
/// wait bounded.
public typealias TestSocket = RelaySocket

extension RelaySocket {
    /// Opens `uid`'s subscription on a test relay with `session` (or without any Authorization header).
    public static func open(_ relay: TestRelay, _ uid: String, session: String?) -> RelaySocket {
        RelaySocket(url: "ws://127.0.0.1:\(relay.port)/v1/users/\(uid)/subscribe", authorization: session.map { "Bearer \($0)" })
    }

    /// Opens `uid`'s subscription with `session`; throws unless its first frame is `ready`.
    public static func subscribed(_ relay: TestRelay, _ uid: String, session: String) async throws -> RelaySocket {
        let socket = open(relay, uid, session: session)
        let first = try await socket.next()
        guard first?.type == "ready" else {
            await socket.close()
            throw TestRelayError("the subscription of \(uid) began with \(first.map { "\($0.type)" } ?? "nothing") instead of ready")
        }
        return socket
    }
}

extension RawConnection {
    /// A raw connection to a test relay.
    public convenience init(port: Int, receiveBuffer: Int? = nil) throws {
        try self.init(host: "127.0.0.1", port: port, receiveBuffer: receiveBuffer)
    }
}
