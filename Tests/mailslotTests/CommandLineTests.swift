import Foundation
import Logging
import MailslotRelay
import MailslotWire
import MailslotTestSupport
import Testing

/// The `mailslot` binary as a person at a terminal uses it, against a relay in this process.
@Suite struct CommandLineTests {
    @Test func twoProfilesExchangeMessages() async throws {
        try await withTestRelay { relay in
            let alice = try await relay.run(["login", "--profile", "alice", "--relay", relay.url(for: "alice").absoluteString, "--token", try relay.token("alice")])
            #expect(alice.status == 0, "\(alice.stderr)")
            #expect(alice.stdout.contains("logged in as alice"))
            let bob = try await relay.run(["login", "--profile", "bob", "--relay", relay.url(for: "bob").absoluteString, "--token", "-", "--json"], stdin: try relay.token("bob") + "\n")
            #expect(bob.status == 0, "\(bob.stderr)")
            let login = try JSONSerialization.jsonObject(with: Data(bob.stdout.utf8)) as? [String: Any]
            #expect(login?["uid"] as? String == "bob")
            #expect((login?["fingerprint"] as? String)?.count == 35)

            let sent = try await relay.run(["send", "--profile", "alice", "bob", "hello from the terminal"])
            #expect(sent.status == 0, "\(sent.stderr)")
            #expect(Identifier.isValidMessageID(sent.stdout.trimmingCharacters(in: .newlines)))
            #expect(try await relay.run(["send", "--profile", "alice", "bob", "--location", "52.52,13.405"]).status == 0)

            let received = try await relay.run(["receive", "--profile", "bob", "--json"])
            #expect(received.status == 0, "\(received.stderr)")
            let lines = received.stdout.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            #expect(lines.count == 2)
            #expect(lines.first?["text"] as? String == "hello from the terminal")
            #expect(lines.first?["from"] as? String == "alice")
            #expect(try await relay.run(["receive", "--profile", "bob"]).stdout.isEmpty, "acked: nothing comes twice")
            #expect(try await relay.run(["history", "--profile", "bob", "alice"]).stdout.contains("hello from the terminal"))

            // A picture travels inline, with its caption.
            let picture = relay.folder + "/dot.png"
            try Data([0x89, 0x50, 0x4E, 0x47] + randomBytes(300)).write(to: URL(fileURLWithPath: picture))
            #expect(try await relay.run(["send", "--profile", "alice", "bob", "--file", picture, "a dot"]).status == 0)
            let pictureLine = try await relay.run(["receive", "--profile", "bob", "--json"]).stdout
            let pictureMessage = try JSONSerialization.jsonObject(with: Data(pictureLine.utf8)) as? [String: Any]
            #expect(pictureMessage?["type"] as? String == "picture")
            #expect(pictureMessage?["text"] as? String == "a dot")
            #expect((pictureMessage?["attachments"] as? [[String: Any]])?.first?["bytes"] as? Int == 304)

            let bobNumber = try await relay.run(["fingerprint", "--profile", "bob", "alice"]).stdout
            let aliceNumber = try await relay.run(["fingerprint", "--profile", "alice", "bob"]).stdout
            #expect(bobNumber == aliceNumber && bobNumber.split(whereSeparator: \.isWhitespace).count == 12)
            #expect(try await relay.run(["contacts", "--profile", "bob"]).stdout.contains("alice\tpinned"))
            #expect(try await relay.run(["trust", "--profile", "bob", "alice", "--safety-number", aliceNumber]).stdout.contains("verified"))
        }
    }

    /// Global options go before the subcommand (as git and kubectl take theirs) or after it.
    @Test func globalOptionsOnEitherSideOfTheSubcommand() async throws {
        try await withTestRelay { relay in
            let login = try await relay.run(["--profile", "alice", "--json", "login", "--relay", relay.url(for: "alice").absoluteString, "--token", "-"],
                                            stdin: try relay.token("alice") + "\n")
            #expect(login.status == 0, "\(login.stderr)")
            #expect((try? JSONSerialization.jsonObject(with: Data(login.stdout.utf8)) as? [String: Any])?["uid"] as? String == "alice")
            #expect(FileManager.default.fileExists(atPath: relay.folder + "/alice/profile.json"), "the profile given before the subcommand")
            #expect(try await relay.run(["--profile=bob", "login", "--relay", relay.url(for: "bob").absoluteString, "--token", try relay.token("bob")]).status == 0)
            #expect(try await relay.run(["--profile", "alice", "send", "bob", "before"]).status == 0)
            #expect(try await relay.run(["send", "--profile", "alice", "bob", "after"]).status == 0)
            let received = try await relay.run(["--json", "--profile", "bob", "receive"])
            #expect(received.status == 0, "\(received.stderr)")
            let texts = received.stdout.split(separator: "\n").compactMap {
                (try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])?["text"] as? String
            }
            #expect(texts == ["before", "after"])
            #expect(try await relay.run(["--profile", "alice", "--bogus", "contacts"]).status == 64, "an unknown option still says so")
        }
    }

    @Test func exitCodesSayWhatHappened() async throws {
        try await withTestRelay { relay in
            #expect(try await relay.run(["send", "--profile", "nobody", "bob", "hi"]).status == 77, "not logged in")
            #expect(try await relay.run(["login", "--profile", "alice", "--relay", relay.url(for: "alice").absoluteString, "--token", try relay.token("alice")]).status == 0)
            #expect(try await relay.run(["send", "--profile", "alice", "b/ob", "hi"]).status == 64, "invalid uid")
            #expect(try await relay.run(["fingerprint", "--profile", "alice", "b/ob"]).status == 64, "invalid uid, checked by the library")
            let mismatch = try await relay.run(["login", "--profile", "alice", "--relay", relay.url(for: "alice").absoluteString, "--token", try relay.token("mallory")])
            #expect(mismatch.status == 65 && mismatch.stderr.contains("belongs to alice"), "\(mismatch.stderr)")
            let noKeys = try await relay.run(["send", "--profile", "alice", "carol", "hi"])
            #expect(noKeys.status == 65, "carol never logged in: no keys")
            #expect(noKeys.stderr.contains("no keys"))
            #expect(try await relay.run(["send", "--profile", "alice", "bob", "--location", "91,0"]).status == 64)

            // The relay goes away: the message is queued (75), and flush sends it once it is back.
            #expect(try await relay.run(["login", "--profile", "bob", "--relay", relay.url(for: "bob").absoluteString, "--token", try relay.token("bob")]).status == 0)
            #expect(try await relay.run(["send", "--profile", "alice", "bob", "first"]).status == 0, "pins bob's keys")
            let settingsPath = relay.folder + "/alice/profile.json"
            let settings = try Data(contentsOf: URL(fileURLWithPath: settingsPath))
            var edited = try #require(try JSONSerialization.jsonObject(with: settings) as? [String: Any])
            edited["relay"] = "http://127.0.0.1:1"  // nothing listens there
            try JSONSerialization.data(withJSONObject: edited).write(to: URL(fileURLWithPath: settingsPath))
            let queued = try await relay.run(["send", "--profile", "alice", "bob", "later"])
            #expect(queued.status == 75, "\(queued.stderr)")
            #expect(queued.stderr.contains("queued"))
            #expect(try await relay.run(["flush", "--profile", "alice"]).status == 75, "still unreachable")
            try settings.write(to: URL(fileURLWithPath: settingsPath))
            #expect(try await relay.run(["flush", "--profile", "alice"]).status == 0)
            #expect(try await relay.run(["receive", "--profile", "bob"]).stdout.contains("later"))

            // Blocked, refused (69); unblocked, sent; a second unblock says so and succeeds.
            #expect(try await relay.run(["block", "--profile", "bob", "alice"]).status == 0)
            #expect(try await relay.run(["send", "--profile", "alice", "bob", "blocked"]).status == 69)
            let unblocked = try await relay.run(["unblock", "--profile", "bob", "alice", "--json"])
            #expect(unblocked.status == 0 && unblocked.stdout.contains("\"unblocked\""), "\(unblocked.stdout)\(unblocked.stderr)")
            #expect(try await relay.run(["send", "--profile", "alice", "bob", "welcome back"]).status == 0)
            #expect(try await relay.run(["receive", "--profile", "bob"]).stdout.contains("welcome back"))
            let again = try await relay.run(["unblock", "--profile", "bob", "alice"])
            #expect(again.status == 0 && again.stdout.contains("was not blocked"), "\(again.stdout)")
            #expect(try await relay.run(["unblock", "--profile", "bob", "b/ob"]).status == 64, "invalid uid")

            #expect(try await relay.run(["logout", "--profile", "alice"]).status == 0)
            let mode = try FileManager.default.attributesOfItem(atPath: relay.folder + "/alice/client.sqlite")[.posixPermissions] as? Int
            #expect(mode == 0o600, "profile files are private")
        }
    }
}

extension TestRelay {
    /// Runs the `mailslot` binary as a person at a terminal would, with the test's folder as its home.
    func run(_ arguments: [String], stdin: String? = nil) async throws -> ProcessResult {
        try await ProcessRunner.run(ProcessRunner.builtProduct("mailslot"), arguments,
                                    environment: ["MAILSLOT_HOME": folder, "HOME": folder, "PATH": "/usr/bin:/bin"], stdin: stdin)
    }
}
