import Foundation
import Testing
@testable import mailslot_bench

/// The folder `tools/push run` made, if the tests run under it.
private let pushStandinFolder = ProcessInfo.processInfo.environment["MAILSLOT_TEST_PUSH_DIR"].flatMap { $0.isEmpty ? nil : $0 }

/// `mailslot-bench run --wake-registrations` (docs/design/wakeups.md §9.5), short, on debug
/// builds, against the push stand-ins `tools/push run` starts (skipped without
/// MAILSLOT_TEST_PUSH_DIR, like the other stand-in suites): the report carries the relay's push
/// counters, memory and CPU, and the wake-ups really went out — accepted by the stand-in with no
/// fault, failed (5xx) when it answers 500. One run at a time: the stand-in's fault is shared.
@Suite(.serialized, .enabled(if: pushStandinFolder != nil, "MAILSLOT_TEST_PUSH_DIR is not set: run the tests under tools/push run"))
struct WakeUpBenchTests {
    /// A 3-second open-loop run with 4 offline owners at the minimum interval: each is woken (or
    /// tried) at once, since none was woken before.
    func run(_ fault: PushFault) async throws -> (json: [String: Any], push: [String: Any]) {
        let json = try await benchSummary(["run", "--spawn", "--senders", "2", "--recipients", "2", "--rate", "200", "--duration", "3",
                                           "--wake-registrations", "4", "--push-standin", pushStandinFolder!, "--push-fault", fault.rawValue,
                                           "--wake-interval", "5", "--json", "--quiet"])
        #expect(json["ok"] as? Bool == true, "\(json["problems"] ?? "")")
        let push = try #require(json["push"] as? [String: Any], "the report has a push member")
        for name in ["sent", "failed", "dropped", "due", "relay_rss_before_bytes", "relay_vmrss_end_bytes", "relay_vmhwm_bytes", "relay_cpu_s"] {
            #expect(push[name] is Int || push[name] is Double, "push.\(name) is reported: \(push[name] ?? "absent")")
        }
        #expect(push["fault"] as? String == fault.rawValue)
        #expect(push["registrations"] as? Int == 4)
        // The owners' messages were stored and acknowledged at the end (relay_remaining 0: benchSummary).
        #expect((push["wake_messages_stored"] as? Int ?? 0) > 0)
        #expect(push["wake_messages_acknowledged"] as? Int == push["wake_messages_stored"] as? Int)
        return (json, push)
    }

    @Test func wakeUpsAreSentWhenTheProviderAccepts() async throws {
        let (json, push) = try await run(.none)
        #expect((push["sent"] as? Int ?? 0) >= 4, "every owner woken: \(push)")
        #expect(push["failed"] as? Int == 0)
        let standin = try #require(push["standin"] as? [String: Int])
        #expect((standin["accepted"] ?? 0) >= 4, "the stand-in checked and decrypted them: \(standin)")
        #expect((json["delivered"] as? Int ?? 0) > 0, "the message load ran beside them")
    }

    @Test func wakeUpsFailWhenTheProviderAnswers500() async throws {
        let (json, push) = try await run(.status500)
        #expect(push["sent"] as? Int == 0, "\(push)")
        #expect((push["failed"] as? Int ?? 0) >= 1)
        let reasons = try #require(push["failed_by_reason"] as? [String: Int])
        #expect((reasons["status_5xx"] ?? 0) >= 1, "\(reasons)")
        #expect((json["delivered"] as? Int ?? 0) > 0, "the message load ran beside them")
    }
}

/// The pieces of the wake-up mode that need no stand-in.
@Suite struct WakeUpBenchPartsTests {
    /// Why parsing `arguments` fails, or nil when they parse (and validate).
    private func refusal(_ arguments: [String]) -> String? {
        do {
            _ = try MailslotBench.parseAsRoot(arguments)
            return nil
        } catch {
            return MailslotBench.message(for: error)
        }
    }

    @Test func theWakeUpFlagsGoTogetherWithASpawnedRelay() throws {
        let standin = ["--push-standin", "/nonexistent"]
        #expect(refusal(["run", "--spawn", "--push-fault", "hang"])?.contains("go with --wake-registrations") == true)
        #expect(refusal(["run", "--spawn", "--wake-interval", "10"])?.contains("go with --wake-registrations") == true)
        #expect(refusal(["run", "--spawn", "--push-standin", "/nonexistent"])?.contains("go with --wake-registrations") == true)
        #expect(refusal(["run", "--relay", "http://127.0.0.1:1", "--issuer-secret-key", "/dev/null", "--wake-registrations", "4"] + standin)?
            .contains("needs --spawn") == true)
        #expect(refusal(["run", "--spawn", "--wake-registrations", "4", "--wake-interval", "4"] + standin)?.contains("5 to 3600") == true)
        #expect(refusal(["run", "--spawn", "--wake-registrations", "10001"] + standin)?.contains("0 to 10000") == true)
        #expect(refusal(["run", "--spawn", "--wake-registrations", "0", "--push-fault", "500"] + standin)?.contains("needs registrations") == true)
        #expect(refusal(["run", "--spawn", "--wake-registrations", "4", "--push-fault", "404"] + standin) != nil)
        let parsed = try MailslotBench.parseAsRoot(["run", "--spawn", "--wake-registrations", "4", "--push-fault", "500", "--wake-interval", "7"] + standin)
        let run = try #require(parsed as? RunCommand)
        #expect(run.pushFault == .status500 && run.wakeInterval == 7 && run.wakeRegistrations == 4)
    }

    /// A folder that is not one tools/push made is a usage error (exit 64) that says what is missing.
    @Test func aFolderWithoutTheStandinsFilesIsRefused() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("wake-bench-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        do {
            _ = try PushStandin(folder: folder)
            Issue.record("an empty folder was taken for the stand-ins'")
        } catch let failure as BenchFailure {
            #expect(failure.status == 64 && failure.description.contains("no ports.json"), "\(failure)")
        }
        try Data(#"{"control":1234,"webpush":1235}"#.utf8).write(to: URL(fileURLWithPath: folder + "/ports.json"))
        try Data(#"["--vapid-key","/x/vapid.pem"]"#.utf8).write(to: URL(fileURLWithPath: folder + "/relay-arguments.json"))
        #expect(throws: BenchFailure.self) { try PushStandin(folder: folder) }  // no private-address allowance
        try Data(#"["--push-allow-private-addresses","true","--vapid-key","/x/vapid.pem"]"#.utf8)
            .write(to: URL(fileURLWithPath: folder + "/relay-arguments.json"))
        let standin = try PushStandin(folder: folder)
        #expect(standin.relayArguments == ["--push-allow-private-addresses", "--vapid-key", "/x/vapid.pem"])
    }

    /// The stand-ins' relay-arguments.json writes the allowance as a flag and a value, as the
    /// environment variable takes it; `serve` takes it as a switch.
    @Test func theStandinsArgumentsBecomeServeArguments() throws {
        let arguments = try PushStandin.serveArguments(["--push-allow-private-addresses", "true", "--vapid-key", "/x/vapid.pem"])
        #expect(arguments == ["--push-allow-private-addresses", "--vapid-key", "/x/vapid.pem"])
        #expect(throws: BenchFailure.self) { try PushStandin.serveArguments(["--vapid-key", "/x/vapid.pem"]) }
        #expect(throws: BenchFailure.self) { try PushStandin.serveArguments(["--vapid-key"]) }
    }

    /// Counters are summed by one label's value, with the exposition format's escapes undone.
    @Test func metricsAreSummedByLabel() {
        let text = PrometheusText("""
            # TYPE mailslot_push_failed_total counter
            mailslot_push_failed_total{provider="webpush",reason="timeout"} 3
            mailslot_push_failed_total{provider="apns",reason="timeout"} 2
            mailslot_push_failed_total{reason="status_5xx",provider="webpush"} 7
            mailslot_push_sent_total{provider="webpush"} 11
            other{a="x \\"y\\", z",reason="q"} 1
            """)
        #expect(text["mailslot_push_failed_total"] == 12)
        #expect(text.sum("mailslot_push_failed_total", by: "reason") == ["timeout": 5, "status_5xx": 7])
        #expect(text.sum("mailslot_push_sent_total", by: "reason").isEmpty)
        #expect(text.sum("other", by: "a") == ["x \"y\", z": 1])
        #expect(text.sum("other", by: "reason") == ["q": 1])
    }
}
