import Testing

/// `mailslot-bench run`, short, on debug builds: a closed loop with idle subscribers beside it.
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
}
