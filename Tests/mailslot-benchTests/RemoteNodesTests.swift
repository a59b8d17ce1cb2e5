import Foundation
import MailslotTestSupport
import MailslotWire
import Testing

/// `run --relay URL --relay URL`: running nodes, given by URL. Both URLs here reach one relay (no
/// database needed), so the mechanics are checked — senders on the first URL, recipients on the
/// second, the figures per node — while delivery is the relay's own.
@Suite struct RemoteNodesTests {
    @Test func severalURLsAreNodesWithTheirOwnClients() async throws {
        try await withTestRelay { relay in
            let keyFile = relay.folder + "/issuer.secret"
            // The issuer's secret, as an operator's key file: private to this user.
            #expect(FileManager.default.createFile(atPath: keyFile, contents: Data((relay.issuer.paserk + "\n").utf8),
                                                   attributes: [.posixPermissions: 0o600]))
            let base = relay.url.absoluteString
            // Within the test relay's per-author burst: 1 sender, 200 messages.
            let json = try await benchSummary(["run", "--relay", base, "--relay", base, "--issuer-secret-key", keyFile,
                                               "--audience", relay.audience, "--senders", "1", "--recipients", "1",
                                               "--messages", "200", "--json", "--quiet"])
            #expect(json["ok"] as? Bool == true, "\(json["problems"] ?? "")")
            #expect(json["messages"] as? Int == 200)
            #expect(json["nodes"] as? Int == 2)
            #expect(json["database"] is NSNull, "no database given")
            let nodes = try #require(json["node_stats"] as? [[String: Any]])
            #expect(nodes.map { $0["clients"] as? String } == ["senders", "recipients"])
            let address = base.hasSuffix("/") ? String(base.dropLast()) : base
            #expect(nodes.allSatisfy { $0["address"] as? String == address })
        }
    }
}
