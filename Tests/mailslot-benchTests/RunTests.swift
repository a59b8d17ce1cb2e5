import Testing

/// `mailslot-bench run`, short, on debug builds: a closed loop with idle subscribers beside it,
/// and end-to-end runs in both envelope versions.
/// Every subscription must open and get its `ready` frame (a frame that arrives in the same read
/// as the upgrade's 101 response must not be lost), every answered message must be delivered
/// exactly once, and the JSON line must carry the names scripts use.
@Suite struct RunTests {
    @Test func aShortRunDeliversEverythingAndReportsIt() async throws {
        let json = try await benchSummary(["run", "--spawn", "--mode", "relay", "--senders", "2", "--recipients", "2",
                                           "--size", "256", "--duration", "2", "--subscribers", "300", "--json", "--quiet"])
        #expect((json["messages"] as? Int ?? 0) > 0, "traffic flowed")
        #expect(json["ok"] as? Bool == true, "\(json["problems"] ?? "")")
        for name in ["delivered_per_sec", "relay_peak_rss_bytes", "relay_cpu_us_per_msg", "rss_per_idle_connection_bytes"] {
            #expect(json[name] != nil, "\(name) is reported")
        }
        let latency = try #require(json["latency_ms"] as? [String: [String: Double]])
        #expect(latency["receive"]?["p99"] != nil && latency["erased"]?["p99"] != nil)
    }

    /// E2e mode in both envelope versions: every message opens (version 2: in the session the
    /// recipient accepted from the first to arrive, with a claimed one-time prekey, kept across a
    /// slow recipient's reconnection), and the report carries the client CPU per message and the
    /// in-process comparison.
    @Test(arguments: ["v1", "v2"])
    func anEndToEndRunOpensEveryMessage(envelope: String) async throws {
        let json = try await benchSummary(["run", "--spawn", "--mode", "e2e", "--envelope", envelope, "--senders", "2", "--recipients", "2",
                                           "--slow-recipients", "1", "--size", "256", "--messages", "120",
                                           "--crypto-batches", "1", "--crypto-batch-messages", "60", "--json", "--quiet"]
                                          + (envelope == "v2" ? ["--one-time-prekeys"] : []))
        #expect(json["ok"] as? Bool == true, "\(json["problems"] ?? "")")
        #expect(json["envelope"] as? String == envelope)
        #expect((json["delivered"] as? Int ?? 0) > 0, "traffic flowed")
        #expect((json["rejected"] as? [String: Int])?.isEmpty == true, "every message opened: \(json["rejected"] ?? "")")
        // A session start's 44 bytes take a 256 B body with the bench's uids past 512 B.
        #expect(json["envelope_bytes"] as? Int == (envelope == "v1" ? 512 : 1024))
        // Two senders, three recipients (one slow): every session started with a claimed prekey.
        #expect(json["one_time_prekey_sessions"] as? Int == (envelope == "v1" ? nil : 6))
        let client = try #require(json["client_cpu_us_per_msg"] as? [String: Double])
        #expect((client["seal"] ?? 0) > 0 && (client["open"] ?? 0) > 0 && abs(client["total"]! - client["seal"]! - client["open"]!) < 0.01)
        let cost = try #require(json["crypto_cpu_us_per_msg"] as? [String: Double])
        for name in ["v1_seal", "v1_open", "v2_seal", "v2_open", "v2_turn_every_message", "v2_turn_every_50"] {
            #expect((cost[name] ?? 0) > 0, "\(name) is measured")
        }
    }
}
