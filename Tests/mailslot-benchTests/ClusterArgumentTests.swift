import ArgumentParser
import Foundation
import MailslotTestSupport
import Testing
@testable import mailslot_bench

/// The flags for several relay nodes on one database (`--nodes`, `--postgres`, `--database-url`,
/// `--placement`): what they refuse, and where each client goes. No database needed.
@Suite struct ClusterArgumentTests {
    /// Why parsing `arguments` fails, or nil when they parse (and validate).
    private func refusal(_ arguments: [String]) -> String? {
        do {
            _ = try MailslotBench.parseAsRoot(arguments)
            return nil
        } catch {
            return MailslotBench.message(for: error)
        }
    }

    @Test func severalNodesNeedOneDatabase() {
        #expect(refusal(["run", "--spawn", "--nodes", "2"])?.contains("--postgres or --database-url") == true)
        #expect(refusal(["crash", "--nodes", "2"])?.contains("--postgres or --database-url") == true)
        #expect(refusal(["run", "--spawn", "--nodes", "0", "--postgres"])?.contains("--nodes must be 1 to 6") == true)
        #expect(refusal(["run", "--spawn", "--nodes", "7", "--postgres"])?.contains("--nodes must be 1 to 6") == true)
        #expect(refusal(["run", "--spawn", "--nodes", "2", "--postgres", "--database-url", "postgres://u:p@127.0.0.1/db"])?
            .contains("either --postgres or --database-url") == true)
        #expect(refusal(["run", "--spawn", "--postgres-no-fsync"])?.contains("go with --postgres") == true)
        #expect(refusal(["run", "--spawn", "--postgres-script", "/bin/true"])?.contains("go with --postgres") == true)
        #expect(refusal(["run", "--spawn", "--placement", "diagonal", "--postgres"]) != nil)
    }

    @Test func aDatabaseURLMustBePostgresAndIsNeverEchoed() throws {
        for url in ["mysql://u:secret-password@127.0.0.1/db", "postgres://u:secret-password@127.0.0.1", "postgres:///db", "not a url"] {
            let message = try #require(refusal(["run", "--spawn", "--database-url", url]), "\(url) is refused")
            #expect(message.contains("postgres://USER:PASSWORD@HOST:PORT/DATABASE"))
            #expect(!message.contains("secret-password"), "the password stays out of the message")
        }
        #expect(refusal(["run", "--spawn", "--pgdata", "/tmp/x"])?.contains("--pgdata goes with --database-url") == true)
    }

    @Test func remoteNodesAreTheURLsGiven() throws {
        let key = ["--issuer-secret-key", "/dev/null"]
        #expect(refusal(["run", "--relay", "http://127.0.0.1:1", "--nodes", "2", "--database-url", "postgres://u:p@127.0.0.1/db"] + key)?
            .contains("each URL is a node") == true)
        #expect(refusal(["run", "--relay", "http://127.0.0.1:1", "--postgres"] + key)?.contains("--postgres goes with --spawn") == true)
        #expect(refusal(["run", "--relay", "http://127.0.0.1:1", "--relay", "ftp://127.0.0.1:2"] + key)?.contains("http:// or https://") == true)
        let parsed = try MailslotBench.parseAsRoot(["run", "--relay", "http://127.0.0.1:1", "--relay", "http://127.0.0.1:2",
                                                    "--placement", "first", "--database-url", "postgres://u:p@127.0.0.1:5432/db",
                                                    "--pgdata", "/tmp/x"] + key)
        let run = try #require(parsed as? RunCommand)
        #expect(run.target.relay == ["http://127.0.0.1:1", "http://127.0.0.1:2"])
        #expect(run.target.cluster.placement == .first)
        let spawn = try #require(try MailslotBench.parseAsRoot(["run", "--spawn", "--nodes", "3", "--postgres", "--postgres-no-fsync"]) as? RunCommand)
        #expect(spawn.target.cluster.nodes == 3 && spawn.target.cluster.postgres && spawn.target.cluster.postgresNoFsync)
        let crash = try #require(try MailslotBench.parseAsRoot(["crash", "--nodes", "2", "--postgres"]) as? CrashCommand)
        #expect(crash.cluster.nodes == 2 && crash.cluster.placement == .split)
    }

    /// Split: every sender's node differs from every recipient's, and both halves are used.
    @Test func splitPlacementCrossesNodesOnEveryPath() {
        for nodes in 2...ClusterOptions.maxNodes {
            let senders = Set((0..<12).map { Placement.split.senderNode($0, nodes: nodes) })
            let recipients = Set((0..<12).map { Placement.split.recipientNode($0, nodes: nodes) })
            #expect(senders.isDisjoint(with: recipients), "\(nodes) nodes")
            #expect(senders.union(recipients) == Set(0..<nodes), "\(nodes) nodes: every node has clients")
            #expect(Set((0..<12).map { Placement.split.idleNode($0, nodes: nodes) }) == Set(0..<nodes))
        }
        #expect(Placement.split.senderNode(0, nodes: 2) == 0 && Placement.split.recipientNode(0, nodes: 2) == 1)
        for index in 0..<5 {
            #expect(Placement.split.senderNode(index, nodes: 1) == 0 && Placement.split.recipientNode(index, nodes: 1) == 0)
            #expect(Placement.first.senderNode(index, nodes: 3) == 0 && Placement.first.recipientNode(index, nodes: 3) == 0)
            #expect(Placement.first.idleNode(index, nodes: 3) == 0)
        }
    }

    @Test func theClusterScriptsExportsAreRead() {
        let text = """
            export MAILSLOT_TEST_DATABASE_URL='postgres://mailslot:abc@127.0.0.1:5433/mailslot'
            export MAILSLOT_TEST_PGDATA='/tmp/mailslot-pg.x/data'
            # stop and delete: tools/postgres stop /tmp/mailslot-pg.x
            """
        let values = ThrowawayPostgres.parseExports(text)
        #expect(values["MAILSLOT_TEST_DATABASE_URL"] == "postgres://mailslot:abc@127.0.0.1:5433/mailslot")
        #expect(values["MAILSLOT_TEST_PGDATA"] == "/tmp/mailslot-pg.x/data")
        #expect(values.count == 2)
    }

    /// The executable itself: bad cluster flags exit 64 with the reason, before anything starts.
    @Test func theExecutableRefusesSeveralNodesWithoutADatabase() async throws {
        let result = try await ProcessRunner.run(ProcessRunner.builtProduct("mailslot-bench"), ["run", "--spawn", "--nodes", "2"])
        #expect(result.status == 64)
        #expect(result.stderr.contains("--postgres or --database-url"), "\(result.stderr)")
    }
}
