import Foundation
import MailslotTestSupport
import Testing
@testable import mailslot_bench

/// `mailslot-bench transfer`, small, on debug builds: files of several parts go up and come back
/// whole in both modes, every blob is acknowledged and erased (the bench fails the run itself
/// otherwise: `ok` is false), and the JSON line carries the figures docs/performance.md quotes.
@Suite struct TransferTests {
    @Test(arguments: ["relay", "e2e"])
    func filesOfSeveralPartsComeBackWholeAndAreErased(mode: String) async throws {
        // 17 MiB of file: three parts of the relay's 8 MiB.
        let result = try await ProcessRunner.run(ProcessRunner.builtProduct("mailslot-bench"),
                                                 ["transfer", "--spawn", "--mode", mode, "--clients", "2", "--files", "3",
                                                  "--size", "17MiB", "--json", "--quiet"])
        #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
        let line = try #require(result.stdout.split(separator: "\n").last.map { Data($0.utf8) })
        let json = try #require(try JSONSerialization.jsonObject(with: line) as? [String: Any])
        #expect(json["ok"] as? Bool == true, "\(json["problems"] ?? "")")
        #expect(json["upload_files"] as? Int == 3 && json["download_files"] as? Int == 3)
        // 17 MiB is a size class (1 MiB steps from 16 to 32 MiB): 272 chunks of 64 KiB, 17 bytes each, and the header.
        #expect(json["ciphertext_size"] as? Int == 24 + 17 * 1_048_576 + 17 * 272)
        for name in ["upload_mb_per_s", "download_mb_per_s", "upload_relay_cpu_ms_per_mib", "relay_rss_growth_bytes"] {
            #expect(((json[name] as? Double) ?? Double(json[name] as? Int ?? -1)) >= 0, "\(name) is reported")
        }
    }

    /// `--max-transfer-rate` reaches the spawned relay's `serve`: a rate it takes runs (and is
    /// reported), one under its 1 MB/s floor stops the relay from starting, with its reason.
    @Test func theTransferRateCapReachesTheSpawnedRelay() async throws {
        let bench = ProcessRunner.builtProduct("mailslot-bench")
        let small = ["transfer", "--spawn", "--clients", "1", "--files", "1", "--size", "1MiB", "--json", "--quiet"]
        let capped = try await ProcessRunner.run(bench, small + ["--max-transfer-rate", "500MB"])
        #expect(capped.status == 0, "\(capped.stdout)\n\(capped.stderr)")
        let line = try #require(capped.stdout.split(separator: "\n").last.map { Data($0.utf8) })
        let json = try #require(try JSONSerialization.jsonObject(with: line) as? [String: Any])
        #expect(json["ok"] as? Bool == true && json["max_transfer_rate"] as? Int == 500_000_000, "\(json)")
        let refused = try await ProcessRunner.run(bench, small + ["--max-transfer-rate", "1000"])
        #expect(refused.status != 0)
        #expect((refused.stdout + refused.stderr).contains("the transfer rate (1000 bytes/s)"), "\(refused.stdout)\n\(refused.stderr)")
    }

    @Test func sizesTakeBinaryAndDecimalUnits() {
        #expect(TransferCommand.bytes("256MiB") == 256 << 20)
        #expect(TransferCommand.bytes("1GiB") == 1 << 30)
        #expect(TransferCommand.bytes("5MB") == 5_000_000)
        #expect(TransferCommand.bytes("123") == 123)
        #expect(TransferCommand.bytes("MiB") == nil)
        #expect(TransferCommand.bytes("-1MiB") == nil)
    }
}
