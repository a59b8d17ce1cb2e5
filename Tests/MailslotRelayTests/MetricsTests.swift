import Foundation
import MailslotTestSupport
import Testing
@testable import MailslotRelay
import MailslotWire

/// /metrics, /healthz and /readyz: a scripted exchange moves exactly the counters it should, and
/// no label carries a uid, a message id or a secret.
@Suite struct MetricsTests {
    /// The samples of a Prometheus text exposition: `name{labels}` → value.
    func scrape(_ relay: TestRelay, token: String? = nil) async throws -> (text: String, samples: [String: Double]) {
        let answer = try await relay.call("GET", "/metrics", headers: token.map { ["Authorization": "Bearer \($0)"] } ?? [:])
        #expect(answer.status == 200)
        #expect(answer.headers["content-type"]?.hasPrefix("text/plain") == true)
        let text = String(decoding: answer.body, as: UTF8.self)
        var samples: [String: Double] = [:]
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else { continue }
            samples[String(line[..<space])] = value
        }
        return (text, samples)
    }

    @Test func aScriptedExchangeMovesTheCounters() async throws {
        try await withTestRelay(configure: { $0.maxPendingPerMailbox = 2 }) { relay in
            let alice = try await relay.signIn("alice").session
            let bob = try await relay.signIn("bob").session
            #expect(try await relay.call("POST", "/v1/sessions", body: ["token": "v4.public.garbage"]).status == 401)

            // Alice sends three; the third meets the full mailbox. Bob receives one over the socket
            // and acks it; alice unsends the other.
            let first = messageID(1), second = messageID(2), envelope = randomBytes(512)
            #expect(try await relay.send(alice, to: "bob", id: first).status == 201)
            #expect(try await relay.send(alice, to: "bob", id: second, envelope: envelope).status == 201)
            #expect(try await relay.send(alice, to: "bob", id: second, envelope: envelope).status == 200, "an identical retry creates nothing")
            #expect(try await relay.send(alice, to: "bob", id: messageID(3)).status == 429)
            #expect(try await relay.send(alice, to: "bob", id: messageID(4), envelope: randomBytes(700)).status == 400)
            #expect(try await relay.call("DELETE", "/v1/users/bob/messages/\(second)", session: alice).status == 204)

            // An HTTP read is a read, not a delivery: it may return the same message again.
            #expect(try await relay.call("GET", "/v1/users/bob/messages", session: bob).status == 200)
            let socket = try await TestSocket.subscribed(relay, "bob", session: bob)
            #expect(try await socket.next()?.message?.id == first)
            let during = try await scrape(relay).samples
            #expect(during["mailslot_messages_unacked"] == 1, "delivered, not yet acked")
            #expect(during["mailslot_websockets_open"] == 1)
            #expect(during["mailslot_messages_pending"] == 1)
            #expect((during["mailslot_messages_oldest_pending_age_seconds"] ?? -1) >= 0)
            #expect(during["mailslot_storage_full"] == 0)
            #expect((during["mailslot_disk_free_bytes"] ?? 0) > 0)
            try await socket.send(.ack(first))
            #expect(try await socket.next()?.type == "acked")
            await socket.close()

            let (text, after) = try await scrape(relay)
            #expect(after["mailslot_messages_created_total"] == 2)
            #expect(after["mailslot_messages_delivered_total"] == 1)
            #expect(after["mailslot_messages_read_total"] == 1)
            #expect(after["mailslot_messages_acked_total"] == 1)
            #expect(after["mailslot_messages_unsent_total"] == 1)
            #expect(after[#"mailslot_messages_rejected_total{reason="mailbox_full"}"#] == 1)
            #expect(after[#"mailslot_messages_rejected_total{reason="invalid_envelope"}"#] == 1)
            #expect(after["mailslot_messages_unacked"] == 0)
            #expect(after["mailslot_messages_pending"] == 0)
            #expect(after[#"mailslot_signins_total{outcome="ok"}"#] == 2)
            #expect(after[#"mailslot_signins_total{outcome="token_malformed"}"#] == 1)
            #expect(after[#"mailslot_http_requests_total{method="PUT",route="/v1/users/{uid}/messages/{id}",status="201"}"#] == 2)
            #expect(after[#"mailslot_http_requests_total{method="PUT",route="/v1/users/{uid}/messages/{id}",status="429"}"#] == 1)
            #expect(after.keys.contains { $0.hasPrefix("mailslot_store_duration_seconds_count{operation=\"create_message\"") })
            #expect((after["process_resident_memory_bytes"] ?? 0) > 0)
            #expect((after["process_cpu_seconds_total"] ?? 0) > 0)
            // Labels name routes, statuses, reasons and operations: never a uid, an id or a secret.
            for secret in ["alice", "bob", first, second, alice, bob] { #expect(!text.contains(secret)) }
        }
    }

    /// `mailslot_batch_seconds` (docs/operations.md): one sample per send to many that stored
    /// something, HTTP or WebSocket; none for a batch whose every entry was refused.
    @Test func eachSendToManyThatStoresIsOneBatchSample() async throws {
        try await withTestRelay { relay in
            let alice = try await relay.signIn("alice").session
            #expect(try await scrape(relay).samples["mailslot_batch_seconds_count"] == 0)
            let stored = try BatchTests.results(try await BatchTests.post(relay, alice, [BatchTests.entry("bob", messageID(1)),
                                                                                            BatchTests.entry("carol", messageID(1))]))
            #expect(stored.allSatisfy { $0.created == true })
            let refused = try BatchTests.results(try await BatchTests.post(relay, alice, [BatchTests.entry("bob", messageID(2), envelope: randomBytes(700))]))
            #expect(refused.first?.problem?.code == .invalidEnvelope)
            let socket = try await TestSocket.subscribed(relay, "alice", session: alice)
            try await socket.send(.sendMany(SendManyFrame(ref: "r1", entries: [BatchEntry(to: "dave", id: messageID(3), envelope: randomBytes(512))])))
            #expect(try await socket.next()?.type == "sent_many")
            await socket.close()
            let after = try await scrape(relay).samples
            #expect(after["mailslot_batch_seconds_count"] == 2, "the HTTP batch and the socket's; not the refused one")
            #expect((after["mailslot_batch_seconds_sum"] ?? 0) > 0)
            #expect(after[#"mailslot_batch_seconds_bucket{le="5.0"}"#] == 2)
        }
    }

    @Test func metricsNeedTheTokenWhenOneIsConfigured() async throws {
        let token = "a-metrics-token-of-32-characters"
        try await withTestRelay(configure: { $0.metricsToken = token }) { relay async throws in
            #expect(try await relay.call("GET", "/metrics").status == 401)
            #expect(try await relay.call("GET", "/metrics", headers: ["Authorization": "Bearer \(token)x"]).status == 401)
            #expect(try await scrape(relay, token: token).samples["mailslot_websockets_open"] == 0)
        }
    }

    @Test func healthAndReadiness() async throws {
        try await withTestRelay { relay async throws in
            #expect(try await relay.call("GET", "/healthz").json["status"] as? String == "ok")
            #expect(try await relay.call("GET", "/readyz").json["status"] as? String == "ready")
            #expect(await relay.relay.store.isReady())
        }
    }

    @Test func theConfigurationCheckRefusesUnsafeCombinations() throws {
        var configuration = RelayConfiguration()
        configuration.dataDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("mailslot-check-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: configuration.dataDirectory, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(atPath: configuration.dataDirectory) }
        #expect(ConfigurationCheck.problems(configuration, developmentKeyTrusted: true).isEmpty, "loopback development is fine")

        configuration.host = "0.0.0.0"
        #expect(ConfigurationCheck.problems(configuration, developmentKeyTrusted: false).isEmpty)
        #expect(ConfigurationCheck.problems(configuration, developmentKeyTrusted: true).first?.contains("development issuer key") == true)
        #expect(ConfigurationCheck.problems(configuration, developmentKeyTrusted: false, logLevel: "trace").count == 1)
        configuration.metricsToken = "short"
        configuration.sessionLifetime = configuration.refreshLifetime + 1
        configuration.defaultMessageTTL = configuration.maxMessageTTL + 1
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: configuration.dataDirectory)
        let problems = ConfigurationCheck.problems(configuration, developmentKeyTrusted: false)
        #expect(problems.count == 2, "the short metrics token and the open folder: \(problems)")
        #expect(problems.contains { $0.contains("chmod 700") })
        // Lifetimes that contradict each other cannot run at all: every relay refuses them (RelayConfigurationTests).
        #expect(configuration.problems.filter { $0.contains("lifetime") }.count == 2)
    }

    /// A create burst below the entries of one send to many: a full batch could never pass whole
    /// (each entry takes a token), so `serve` refuses to start (spec/protocol.md §5.5).
    @Test func theConfigurationCheckRefusesABurstBelowTheBatchSize() throws {
        var configuration = RelayConfiguration()
        configuration.dataDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("mailslot-check-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: configuration.dataDirectory, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(atPath: configuration.dataDirectory) }
        #expect(ConfigurationCheck.problems(configuration, developmentKeyTrusted: true).isEmpty, "the defaults: 2000 ≥ 1000")
        configuration.createBurst = 999
        #expect(ConfigurationCheck.problems(configuration, developmentKeyTrusted: true).first?.contains("--create-burst") == true)
        configuration.maxBatchEntries = 999
        #expect(ConfigurationCheck.problems(configuration, developmentKeyTrusted: true).isEmpty)
    }
}
