import Foundation

/// One reading of the counters of several nodes and their database: each node's CPU time, the
/// cross-node notifications the nodes have sent, the database's commits and its server's CPU time.
struct ClusterReading: Sendable {
    /// The counter the relays add when they deliver across nodes (LISTEN/NOTIFY).
    static let notificationsMetric = "mailslot_cluster_notifications_sent_total"

    let nodeCPU: [Double?]
    /// Summed over the nodes; nil when a node does not report it.
    let notifications: Double?
    let serverCPU: Double?
    let commits: Int?

    /// Reads everything now, the commit count last: after ``DatabaseProbe/statisticsDelay``, so
    /// that it includes the commits up to now.
    static func take(_ target: RelayTarget) async -> ClusterReading {
        var nodeCPU: [Double?] = [], notifications: Double? = 0
        for node in target.nodes {
            nodeCPU.append(await node.cpuSeconds())
            let sent = await node.metrics()?[notificationsMetric]
            notifications = notifications.flatMap { total in sent.map { total + $0 } }
        }
        let serverCPU = target.database?.serverCPUSeconds()
        var commits: Int?
        if target.database?.url != nil {
            try? await Task.sleep(nanoseconds: DatabaseProbe.statisticsDelay)
            commits = await target.database?.commits()
        }
        return ClusterReading(nodeCPU: nodeCPU, notifications: notifications, serverCPU: serverCPU, commits: commits)
    }
}

/// What a run reports about several nodes and their database (nothing for one relay on SQLite):
/// per node CPU and memory, the database server's CPU and memory, commits and notifications per second.
struct ClusterFigures {
    let before: ClusterReading
    let after: ClusterReading
    let nodePeakRSS: [Int?]
    let nodeRSS: [Int?]
    let serverMemory: (rss: Int?, pss: Int?)

    /// Reads the memory figures at the end of a run.
    static func finish(_ target: RelayTarget, before: ClusterReading, after: ClusterReading) async -> ClusterFigures {
        var peaks: [Int?] = [], rss: [Int?] = []
        for node in target.nodes {
            peaks.append(await node.peakResidentBytes())
            rss.append(await node.residentBytes())
        }
        return ClusterFigures(before: before, after: after, nodePeakRSS: peaks, nodeRSS: rss,
                              serverMemory: target.database?.serverMemory() ?? (nil, nil))
    }

    /// The report's lines and JSON members, for `messages` stored by `senders` senders to
    /// `recipients` recipients; rates over `seconds`, from the clock's start to the drain (the
    /// readings' window, whether or not everything arrived).
    func report(target: RelayTarget, senders: Int, recipients: Int, messages: Int, seconds: Double) -> (lines: [String], json: [(String, JSON)]) {
        func delta(_ before: Double?, _ after: Double?) -> Double? { before.flatMap { b in after.map { $0 - b } } }
        func perMessage(_ seconds: Double?) -> Double? { seconds.map { $0 * 1e6 / Double(max(1, messages)) } }
        let count = target.nodes.count
        let senderNodes = Set((0..<senders).map { target.placement.senderNode($0, nodes: count) })
        let recipientNodes = Set((0..<recipients).map { target.placement.recipientNode($0, nodes: count) })
        let roles = target.nodes.indices.map { node -> String in
            switch (senderNodes.contains(node), recipientNodes.contains(node)) {
            case (true, true): "senders and recipients"
            case (true, false): "senders"
            case (false, true): "recipients"
            case (false, false): "no senders or recipients"
            }
        }
        var lines: [String] = []
        var nodes: [JSON] = []
        for (index, node) in target.nodes.enumerated() {
            let cpu = delta(before.nodeCPU[index], after.nodeCPU[index])
            lines.append("  node \(index + 1) (\(node.address), \(roles[index])): CPU \(Format.optional(perMessage(cpu), "%.1f")) µs/msg"
                         + " (\(Format.optional(cpu, "%.2f")) s), peak RSS \(Format.bytes(nodePeakRSS[index])), RSS at end \(Format.bytes(nodeRSS[index]))")
            nodes.append(.object([
                ("node", .int(index + 1)), ("address", .string(node.address)), ("clients", .string(roles[index])),
                ("cpu_s", .number(cpu)), ("cpu_us_per_msg", .number(perMessage(cpu))),
                ("peak_rss_bytes", .int(nodePeakRSS[index])), ("rss_end_bytes", .int(nodeRSS[index])),
            ]))
        }
        let serverCPU = delta(before.serverCPU, after.serverCPU)
        let commits = before.commits.flatMap { b in after.commits.map { $0 - b } }
        let commitsPerSecond = commits.map { Double($0) / seconds }
        let notifications = delta(before.notifications, after.notifications)
        let notificationsPerSecond = notifications.map { $0 / seconds }
        if target.database != nil {
            lines.append("  PostgreSQL server: CPU \(Format.optional(perMessage(serverCPU), "%.1f")) µs/msg (\(Format.optional(serverCPU, "%.2f")) s),"
                         + " RSS at end \(Format.bytes(serverMemory.rss)) (PSS \(Format.bytes(serverMemory.pss)));"
                         + " \(commits.map(String.init) ?? "n/a") commits, \(Format.optional(commitsPerSecond, "%.0f"))/s,"
                         + " \(Format.optional(commits.map { Double($0) / Double(max(1, messages)) }, "%.2f")) per message")
        }
        lines.append(notifications.map { String(format: "  cross-node notifications: %.0f, %.0f/s", $0, notificationsPerSecond ?? 0) }
                     ?? "  cross-node notifications: n/a (not every node serves \(ClusterReading.notificationsMetric))")
        let json: [(String, JSON)] = [
            ("nodes", .int(target.nodes.count)), ("placement", .string(target.placement.rawValue)),
            ("store", .string(target.database != nil ? "postgresql" : "unknown")),
            ("node_stats", .array(nodes)),
            ("database", target.database == nil ? .null : .object([
                ("own_cluster", .bool(target.postgres != nil)),
                ("server_cpu_s", .number(serverCPU)), ("server_cpu_us_per_msg", .number(perMessage(serverCPU))),
                ("server_rss_bytes", .int(serverMemory.rss)), ("server_pss_bytes", .int(serverMemory.pss)),
                ("commits", .int(commits)), ("commits_per_sec", .number(commitsPerSecond)),
                ("commits_per_msg", .number(commits.map { Double($0) / Double(max(1, messages)) })),
            ])),
            ("notifications_sent", .number(notifications)), ("notifications_per_sec", .number(notificationsPerSecond)),
        ]
        return (lines, json)
    }
}
