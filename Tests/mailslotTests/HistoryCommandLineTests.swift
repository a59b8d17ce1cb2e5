import Foundation
import MailslotTestSupport
import MailslotWire
import Testing

/// The CLI as documented (issue 26 item 8): `history` in the order it says, `rejected` showing
/// what was not accepted, and every `--json` command's fields in its `--help`.
@Suite struct HistoryCommandLineTests {
    /// The JSON lines of `output`.
    func lines(_ output: String) -> [[String: Any]] {
        output.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    /// "Oldest first" is the order the profile stored them in, not message-id order: a message
    /// queued by its sender (an early id) and delivered after a later one comes after it.
    @Test func historyIsInTheOrderMessagesWereStored() async throws {
        // One pending message per mailbox: alice's second send waits in her outbox (75).
        try await withTestRelay(configure: { $0.maxPendingPerMailbox = 1 }) { relay in
            for uid in ["alice", "bob", "carol"] {
                #expect(try await relay.run(["login", "--profile", uid, "--relay", relay.url(for: uid).absoluteString, "--token", try relay.token(uid)]).status == 0)
            }
            #expect(try await relay.run(["send", "--profile", "alice", "bob", "one"]).status == 0)
            let queued = try await relay.run(["send", "--profile", "alice", "bob", "two", "--json"])
            #expect(queued.status == 75, "\(queued.stderr)")
            let twoID = try #require(lines(queued.stdout).first?["id"] as? String)
            #expect(try await relay.run(["receive", "--profile", "bob"]).stdout.contains("one"))
            let three = try await relay.run(["send", "--profile", "carol", "bob", "three"])
            #expect(three.status == 0, "\(three.stderr)")
            let threeID = three.stdout.trimmingCharacters(in: .newlines)
            #expect(try await relay.run(["receive", "--profile", "bob"]).stdout.contains("three"))
            #expect(try await relay.run(["flush", "--profile", "alice"]).status == 0)
            #expect(try await relay.run(["receive", "--profile", "bob"]).stdout.contains("two"))
            #expect(twoID < threeID, "the message received last has the earlier id")

            let history = lines(try await relay.run(["history", "--profile", "bob", "--json"]).stdout)
            #expect(history.compactMap { $0["text"] as? String } == ["one", "three", "two"], "\(history)")
            #expect(history.compactMap { $0["from"] as? String } == ["alice", "carol", "alice"])
            let text = try await relay.run(["history", "--profile", "bob"]).stdout.split(separator: "\n")
            #expect(text.count == 3 && text[1].hasSuffix("carol: three") && text[2].hasSuffix("alice: two"), "\(text)")
            let sent = lines(try await relay.run(["history", "--profile", "alice", "--json"]).stdout)
            #expect(sent.map { "\($0["text"] ?? "") \($0["state"] ?? "")" } == ["one sent", "two sent"])
        }
    }

    /// Received messages that did not open or verify, and sent ones the relay refused, are listed
    /// with why, in both directions.
    @Test func rejectedListsWhatWasNotAcceptedBothWays() async throws {
        try await withTestRelay { relay in
            for uid in ["alice", "bob"] {
                #expect(try await relay.run(["login", "--profile", uid, "--relay", relay.url(for: uid).absoluteString, "--token", try relay.token(uid)]).status == 0)
            }
            #expect(try await relay.run(["rejected", "--profile", "bob"]).stdout.isEmpty)
            // In: an envelope from alice that opens for nobody.
            let garbage = messageID()
            #expect(try await relay.send(try await relay.signIn("alice").session, to: "bob", id: garbage).status == 201)
            #expect(try await relay.run(["receive", "--profile", "bob"]).status == 0)
            // Out: bob blocks alice; her next message is refused by the relay (69).
            #expect(try await relay.run(["block", "--profile", "bob", "alice"]).status == 0)
            let refused = try await relay.run(["send", "--profile", "alice", "bob", "let me in", "--json"])
            #expect(refused.status == 69, "\(refused.stderr)")
            let refusedID = try #require(lines(refused.stdout).first?["id"] as? String)

            let rejected = lines(try await relay.run(["rejected", "--profile", "bob", "--json"]).stdout)
            #expect(rejected.count == 1, "\(rejected)")
            #expect(rejected.first?["direction"] as? String == "in")
            #expect(rejected.first?["id"] as? String == garbage)
            #expect(rejected.first?["from"] as? String == "alice")
            #expect(rejected.first?["reason"] as? String == "envelope_cannot_decrypt")
            #expect((rejected.first?["at"] as? String).flatMap(Timestamp.parse) != nil)

            let refusals = lines(try await relay.run(["rejected", "--profile", "alice", "--json"]).stdout)
            #expect(refusals.count == 1, "\(refusals)")
            #expect(refusals.first?["direction"] as? String == "out")
            #expect(refusals.first?["id"] as? String == refusedID)
            #expect(refusals.first?["to"] as? String == "bob")
            #expect(refusals.first?["reason"] as? String == "blocked")
            let text = try await relay.run(["rejected", "--profile", "alice"]).stdout
            #expect(text.contains("→ bob \(refusedID) refused: blocked"), "\(text)")
            #expect(try await relay.run(["--help"]).stdout.contains("rejected"))
        }
    }

    /// Every command that prints says, in its `--help`, which fields its `--json` lines have.
    @Test func everyCommandDocumentsItsJSONFields() async throws {
        try await withTestRelay { relay in
            let group = ["id", "name", "members", "admins", "version", "status", "by"]
            let fields = [
                "login": ["uid", "fingerprint", "profile"], "send": ["id", "to", "state", "reason", "group", "copies"], "receive": ["id", "from", "type", "timestamp"],
                "listen": ["from", "state", "queued", "seconds"], "history": ["from", "to", "state", "reason"],
                "rejected": ["direction", "id", "from", "to", "reason", "group", "at"], "contacts": ["uid", "trust"],
                "fingerprint": ["safety_number", "key_changed", "previous_safety_number", "fingerprint", "key_id", "trust"],
                "trust": ["uid", "trust", "key_id"], "resend": ["id", "to", "state"], "rotate-key": ["state"], "unsend": ["id", "state", "group", "erased", "dropped"],
                "block": ["uid", "state"], "unblock": ["uid", "state"], "flush": ["queued"], "logout": ["profile", "state"],
                "push add": ["id", "provider", "tag", "created_at", "updated_at", "endpoint", "token", "sandbox", "mode"],
                "push list": ["id", "provider", "tag", "created_at", "updated_at", "woken_at", "endpoint", "token"],
                "group create": group, "group show": group, "group list": group, "group add": group + ["copies"],
                "group remove": group + ["copies"], "group promote": group + ["copies"], "group demote": group + ["copies"],
                "group rename": group + ["copies"], "group leave": group + ["copies", "successor"],
                "push remove": ["id", "state"], "push info": ["providers", "vapid_public_key", "wake_interval_seconds", "max_registrations"],
            ]
            // The README's table says the same: a row naming each command, with each field in backticks.
            let table = try MarkdownTable(in: "README.md", header: ["command", "fields"])
            for (command, names) in fields {
                let help = try await relay.run(command.split(separator: " ").map(String.init) + ["--help"]).stdout.replacingOccurrences(of: "\n", with: " ")
                    .split(whereSeparator: \.isWhitespace).joined(separator: " ")
                #expect(help.contains("--json prints"), "\(command): \(help)")
                for name in names { #expect(help.contains(name), "\(command) --help lacks \(name)") }
                let rows = table.rows.filter { $0[0].contains("`\(command)`") }
                #expect(rows.count == 1, "README rows for \(command): \(rows)")
                for name in names where name != "uid" && name != "profile" && name != "id" {
                    #expect(rows.first?[1].contains("`\(name)`") == true, "README's row for \(command) lacks \(name)")
                }
            }
            #expect(Set(table.rows.flatMap { $0[0].split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } })
                    == Set(fields.keys.map { "`\($0)`" }), "a README row for each command that prints, and only those")
        }
    }
}
