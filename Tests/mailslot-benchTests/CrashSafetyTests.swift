import Testing

/// Crash safety, short: `mailslot-bench crash` kills a spawned relay with SIGKILL three times
/// under load and proves that every answered create reached its recipient exactly once and that
/// nothing is left on the relay. (`tools/crash-test` runs the long version on release builds.)
@Suite struct CrashSafetyTests {
    @Test func answeredMessagesSurviveKillNineExactlyOnce() async throws {
        let json = try await benchSummary(["crash", "--kills", "3", "--min-interval", "0.3", "--max-interval", "1",
                                           "--drain-timeout", "60", "--json", "--quiet"])
        #expect((json["kills"] as? Int ?? 0) >= 3)
        #expect(json["unanswered"] as? Int == 0)
        #expect((json["stored"] as? Int ?? 0) > 0, "traffic flowed")
        #expect(json["pass"] as? Bool == true, "\(json["problems"] ?? "")")
    }
}
