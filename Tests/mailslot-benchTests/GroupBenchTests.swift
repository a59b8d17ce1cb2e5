import Foundation
import MailslotTestSupport
import Testing
@testable import mailslot_bench

/// `mailslot-bench group`, small, on debug builds: ten members, half online, two seconds. The
/// report carries every figure docs/performance.md quotes, every online member got every message
/// but its own during the run, the offline ones got their backlog after it, and every copy opened
/// for its member (the bench fails the run itself otherwise). No timing is asserted.
@Suite struct GroupBenchTests {
    @Test func everyMemberGetsEveryMessageAndTheReportIsComplete() async throws {
        let result = try await ProcessRunner.run(ProcessRunner.builtProduct("mailslot-bench"),
                                                 ["group", "--spawn", "--members", "10", "--senders", "3", "--online", "50",
                                                  "--rate", "4", "--seconds", "2", "--json", "--quiet"])
        #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
        let line = try #require(result.stdout.split(separator: "\n").last.map { Data($0.utf8) })
        let json = try #require(try JSONSerialization.jsonObject(with: line) as? [String: Any])
        #expect(json["ok"] as? Bool == true, "\(json["problems"] ?? "")")
        let messages = try #require(json["messages"] as? Int)
        #expect(messages >= 1)
        #expect(json["online"] as? Int == 5 && json["offline"] as? Int == 5)
        // 3 first sends and the measured ones, 9 copies each, all stored; the 5 online members
        // (the 3 senders among them) got every message but their own.
        let total = 3 + messages
        #expect(json["copies_stored"] as? Int == total * 9 && json["copies_expected"] as? Int == total * 9)
        // Every sender is online, and is not sent its own: each message reaches 4 of the 5.
        #expect(json["online_expected"] as? Int == 4 * total)
        #expect(json["online_received"] as? Int == json["online_expected"] as? Int)
        #expect(json["received"] as? Int == total * 9)
        #expect(json["missing"] as? Int == 0 && json["repeats"] as? Int == 0)
        #expect(json["opened"] as? Int == total * 9, "every copy kept (all of them, at this size) opened and checked")
        #expect(json["commit_unknown"] as? Int == 0, "each batch's commit time read from the relay's histogram")
        for name in ["commit_ms", "seal_ms", "send_to_answer_ms", "commit_to_online_delivery_ms", "send_to_online_delivery_ms"] {
            let figures = try #require(json[name] as? [String: Any], "\(name) is reported")
            #expect(figures["p50"] != nil && figures["p99"] != nil, "\(name) has p50 and p99")
        }
        let first = try #require(json["first_send"] as? [String: Any])
        #expect((first["commit_ms"] as? [String: Any])?["count"] as? Int == 3)
        for name in ["relay_cpu_us_per_copy", "relay_rss_after_bytes", "relay_rss_peak_bytes", "offline_catch_up_s"] {
            #expect(((json[name] as? Double) ?? Double(json[name] as? Int ?? -1)) >= 0, "\(name) is reported")
        }
    }

    @Test func createdAtParsesAsTheRelayWritesIt() {
        #expect(WallClock.parse("1970-01-01T00:00:00.000Z") == 0)
        #expect(WallClock.parse("2026-11-27T06:33:15.123Z") == 1_795_761_195_123)
        #expect(WallClock.parse("2000-02-29T23:59:59.999Z") == 951_868_799_999)
        #expect(WallClock.parse("2026-11-27T06:33:15Z") == nil)
        #expect(WallClock.parse("2026-13-27T06:33:15.123Z") == nil)
    }
}
