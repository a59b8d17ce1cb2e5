import MailslotAudit
import Testing

/// The tests' subscription socket is the audit's (``RelaySocket``): one WebSocket client for both.
typealias TestSocket = RelaySocket

extension RelaySocket {
    /// Opens `uid`'s subscription on a test relay with `session` (or without any Authorization header).
    static func open(_ relay: TestRelay, _ uid: String, session: String?) -> RelaySocket {
        RelaySocket(url: "ws://127.0.0.1:\(relay.port)/v1/users/\(uid)/subscribe", authorization: session.map { "Bearer \($0)" })
    }

    /// Opens `uid`'s subscription with `session` and requires its first frame to be `ready`.
    static func subscribed(_ relay: TestRelay, _ uid: String, session: String) async throws -> RelaySocket {
        let socket = open(relay, uid, session: session)
        try #require(try await socket.next()?.type == "ready")
        return socket
    }
}

extension RawConnection {
    /// A raw connection to a test relay.
    convenience init(port: Int, receiveBuffer: Int? = nil) throws {
        try self.init(host: "127.0.0.1", port: port, receiveBuffer: receiveBuffer)
    }
}
