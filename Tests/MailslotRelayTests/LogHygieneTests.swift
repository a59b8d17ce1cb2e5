import Foundation
import HummingbirdWSClient
import Logging
import Synchronization
import Testing
@testable import MailslotRelay
import MailslotTestSupport
import MailslotWire

@Suite struct LogHygieneTests {
    @Test func noTokenSessionSecretOrEnvelopeReachesTheLog() async throws {
        let log = CapturedLog()
        // The secrets come out of the scope: the log is read once the relay has stopped.
        let (token, session, refresh, bob, envelope) = try await withTestRelay(logger: log.logger) { relay in
            let token = try relay.token("alice")
            let signIn = try await relay.call("POST", "/v1/sessions", body: ["token": token])
            let session = try #require(signIn.json["session"] as? String)
            let refresh = try #require(signIn.json["refresh"] as? String)
            let bob = try await relay.signIn("bob").session
            let envelope = randomBytes(1024)
            try await relay.send(session, to: "bob", id: messageID(1), envelope: envelope)
            let socket = TestSocket.open(relay, "bob", session: bob)
            _ = try await socket.next()
            _ = try await socket.next()
            try await socket.send(.ack(messageID(1)))
            _ = try await socket.next()
            await socket.close()
            // Failures log too: a refused token, a bad session, a malformed body.
            _ = try await relay.call("POST", "/v1/sessions", body: ["token": String(token.dropLast(3))])
            _ = try await relay.call("GET", "/v1/users/bob/messages", session: session + "x")
            _ = try await relay.call("PUT", "/v1/users/bob/messages/\(messageID(2))", session: session, body: #"{"envelope":"\#(Base64URL.encode(envelope))","#)
            _ = try await relay.call("POST", "/v1/sessions/refresh", body: ["refresh": refresh])
            return (token, session, refresh, bob, envelope)
        }

        let text = log.text
        #expect(text.contains("request"), "the log was captured")
        for secret in [token, String(token.dropLast(3)), session, refresh, bob, Base64URL.encode(envelope)] {
            #expect(!text.contains(secret), "a secret reached the log")
            #expect(!text.contains(secret.prefix(24)), "part of a secret reached the log")
        }
        #expect(!text.contains(messageID(1)), "message ids are not logged either")
    }
}
