import Foundation
import MailslotWire
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import Testing
@testable import MailslotRelay
import MailslotTestSupport

/// A relay with the webhook provider configured, end to end on SQLite: bob registers, alice sends
/// him three messages in a row, and the webhook receiver on 127.0.0.1 gets exactly one signed
/// POST (the interval coalesces the rest); a `410` from it removes the registration.
@Suite struct WakeUpRelayTests {
    @Test func threeMessagesOneSignedWebhookCallThen410RemovesIt() async throws {
        let secretPath = FileManager.default.temporaryDirectory.appendingPathComponent("whsec-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: secretPath) }
        _ = FileManager.default.createFile(atPath: secretPath, contents: Data("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n".utf8),
                                           attributes: [.posixPermissions: 0o600])
        let status = NIOLockedValueBox<HTTPResponseStatus>(.noContent)
        let recorded = NIOLockedValueBox<[FakeS3.Request]>([])
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { child in
                child.eventLoop.makeCompletedFuture {
                    try child.pipeline.syncOperations.configureHTTPServerPipeline()
                    try child.pipeline.syncOperations.addHandler(FakeS3Handler(answer: { _ in FakeS3.Answer(status.withLockedValue { $0 }) },
                                                                               recorded: recorded))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        defer { channel.close(promise: nil) }
        let port = try #require(channel.localAddress?.port)
        let offset = NIOLockedValueBox<Int64>(0)
        try await withTestRelay(store: .sqlite, configure: { configuration in
            configuration.clock = RelayClock { EpochMilliseconds.now() + offset.withLockedValue { $0 } }
            configuration.push.webhook.url = "http://127.0.0.1:\(port)/hook"
            configuration.push.webhook.secretFile = secretPath
        }) { relay in
            let bob = try await relay.signIn("bob"), alice = try await relay.signIn("alice")
            let put = try await relay.call("PUT", "/v1/users/bob/push/Hq2vX0Ck9m1Lr8sWbTn2pQ", session: bob.session,
                                           body: ["provider": "webhook", "token": "device-1", "tag": "k3J9vQ0aZx"])
            #expect(put.status == 201, "\(put.text)")
            for n in 0..<3 { #expect(try await relay.send(alice.session, to: "bob", id: messageID(n)).status == 201) }
            try await eventually("the wake-up's call ended") {
                !recorded.withLockedValue { $0 }.isEmpty && relay.relay.metricsText().contains(#"mailslot_push_sent_total{provider="webhook"} 1"#)
            }
            // The coalescing is decided when a message is stored: the later messages' wake-up (if
            // any is left) is due an interval after the first was sent, not now.
            if let due = try await relay.relay.store.nextWakeupDue() {
                #expect(due >= relay.relay.configuration.clock.now() + 25_000, "the next wake-up waits for the interval")
            }
            let calls = recorded.withLockedValue { $0 }
            #expect(calls.count == 1, "one wake-up for three messages within the interval")
            let head = try #require(calls.first?.head)
            #expect(head.method == .POST && head.uri == "/hook")
            #expect(head.headers.first(name: "webhook-id")?.hasPrefix("msg_") == true)
            #expect(head.headers.first(name: "webhook-signature")?.hasPrefix("v1,") == true)
            #expect(head.headers.first(name: "content-type") == "application/json")
            #expect(relay.relay.metricsText().contains(#"mailslot_push_sent_total{provider="webhook"} 1"#))
            // The backend says the device is gone: the registration goes. (A new wake-up needs the
            // interval to pass: the clock is moved past it.)
            status.withLockedValue { $0 = .gone }
            offset.withLockedValue { $0 = 31_000 }
            #expect(try await relay.send(alice.session, to: "bob", id: messageID(9)).status == 201)
            var listed = 1
            try await eventually("the registration is removed") {
                let list = try await relay.call("GET", "/v1/users/bob/push", session: bob.session)
                listed = (try? list.decoded(PushRegistrationList.self).registrations.count) ?? -1
                return listed == 0
            }
            #expect(listed == 0, "a 410 removes the registration")
        }
    }
}
