import Foundation
import Testing

/// The database `tools/postgres run` made for the tests, if any.
private let clusterDatabaseURL = ProcessInfo.processInfo.environment["MAILSLOT_TEST_DATABASE_URL"].flatMap { $0.isEmpty ? nil : $0 }

/// Several relay nodes on one PostgreSQL database (issue 17), short, on debug builds: senders on
/// node 1 and recipients on node 2, so every message crosses nodes. Only under `tools/postgres
/// run` (tools/test runs this suite in its PostgreSQL phase), which sets MAILSLOT_TEST_DATABASE_URL.
@Suite(.serialized, .enabled(if: clusterDatabaseURL != nil, "MAILSLOT_TEST_DATABASE_URL is not set: run the tests under tools/postgres run"))
struct ClusterBenchTests {

    /// `--postgres`: the bench starts its own cluster, runs two nodes on it, reports each node and
    /// the database, and leaves nothing behind — no cluster folder, no node folder, no server.
    @Test func twoNodesOnTheirOwnClusterDeliverEverythingAndCleanUp() async throws {
        // Traversable by others: as root, the cluster's server runs as the postgres user.
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("mailslot-cluster-bench-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o711])
        defer { try? FileManager.default.removeItem(at: folder) }
        let json = try await benchSummary(["run", "--spawn", "--nodes", "2", "--postgres", "--postgres-no-fsync", "--mode", "relay",
                                           "--senders", "2", "--recipients", "2", "--duration", "2", "--drain-timeout", "30",
                                           "--json", "--quiet"],
                                          environment: ["TMPDIR": folder.path, "MAILSLOT_PG_TMPDIR": folder.path])
        #expect(json["ok"] as? Bool == true, "\(json["problems"] ?? "")")
        #expect((json["messages"] as? Int ?? 0) > 0, "traffic flowed")
        #expect(json["nodes"] as? Int == 2)
        #expect(json["store"] as? String == "postgresql")
        let nodes = try #require(json["node_stats"] as? [[String: Any]])
        #expect(nodes.map { $0["clients"] as? String } == ["senders", "recipients"])
        for node in nodes {
            #expect((node["cpu_s"] as? Double ?? 0) > 0, "node \(node["node"] ?? "?") worked")
            #expect((node["peak_rss_bytes"] as? Int ?? 0) > 0)
        }
        let database = try #require(json["database"] as? [String: Any])
        #expect(database["own_cluster"] as? Bool == true)
        #expect((database["commits"] as? Int ?? 0) > 0, "the database committed the messages")
        #expect((database["server_cpu_s"] as? Double ?? 0) > 0)
        #expect((database["server_rss_bytes"] as? Int ?? 0) > 0)
        #expect(json.keys.contains("notifications_per_sec"))
        let left = try FileManager.default.contentsOfDirectory(atPath: folder.path)
        #expect(left.isEmpty, "the cluster and the nodes' folders are deleted: \(left)")
        #expect(!serverRuns(under: folder.path), "no PostgreSQL server of that cluster runs")
    }

    /// `crash --nodes 2 --database-url`: the nodes are killed in turn under load while the clients
    /// of the dead one move to the other; every answered message still arrives exactly once.
    @Test func killingEitherNodeLosesNothingAnswered() async throws {
        let url = try #require(clusterDatabaseURL)
        let json = try await benchSummary(["crash", "--nodes", "2", "--database-url", url, "--kills", "2",
                                           "--min-interval", "0.3", "--max-interval", "1", "--drain-timeout", "60", "--json", "--quiet"])
        #expect(json["nodes"] as? Int == 2)
        let kills = try #require(json["kill_log"] as? [[String: Any]])
        #expect(kills.map { $0["node"] as? Int } == [1, 2], "the nodes are killed in turn")
        #expect(kills.allSatisfy { ($0["sockets_moved"] as? Int ?? 0) > 0 }, "each kill cut the clients of that node")
        #expect(json["unanswered"] as? Int == 0)
        #expect((json["stored"] as? Int ?? 0) > 0, "traffic flowed")
        #expect(json["pass"] as? Bool == true, "\(json["problems"] ?? "")")
    }

    /// Whether a process's command line names `folder` (a cluster's server started in it).
    private func serverRuns(under folder: String) -> Bool {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.contains { entry in
            guard Int32(entry) != nil, let data = FileManager.default.contents(atPath: "/proc/\(entry)/cmdline") else { return false }
            return String(decoding: data, as: UTF8.self).contains(folder)
        }
    }
}
