import Foundation
import MailslotTestSupport
import Testing

/// Crash safety, short: `mailslot-bench crash` kills a spawned relay with SIGKILL three times
/// under load and proves that every answered create reached its recipient exactly once and that
/// nothing is left on the relay. (`tools/crash-test` runs the long version on release builds.)
@Suite struct CrashSafetyTests {
    @Test func answeredMessagesSurviveKillNineExactlyOnce() async throws {
        let result = try await ProcessRunner.run(ProcessRunner.builtProduct("mailslot-bench"),
                                                 ["crash", "--kills", "3", "--min-interval", "0.3", "--max-interval", "1",
                                                  "--drain-timeout", "60", "--json", "--quiet"])
        #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
        let summary = try #require(result.stdout.split(separator: "\n").last.map { Data($0.utf8) })
        let json = try #require(try JSONSerialization.jsonObject(with: summary) as? [String: Any])
        #expect(json["lost"] as? Int == 0)
        #expect(json["duplicated"] as? Int == 0)
        #expect(json["relay_remaining"] as? Int == 0)
        #expect((json["kills"] as? Int ?? 0) >= 3)
        #expect(json["unanswered"] as? Int == 0)
        #expect((json["stored"] as? Int ?? 0) > 0, "traffic flowed")
        #expect(json["pass"] as? Bool == true, "\(json["problems"] ?? "")")
    }
}
