import Foundation
import MailslotTestSupport
import MailslotWire
import Testing

/// The flow of issue 18 through the binary: alice and bob exchange a message, bob reinstalls (a
/// new profile, new keys, the same uid), alice sends again. Nothing is lost in silence: her send
/// says the key changed (exit 65, the message held), `trust` sends it, and a message that was in
/// flight comes back to her as undelivered, to be resent. `trust` takes the safety number the two
/// compared, and refuses another (issue 26).
@Suite struct KeyChangeCommandLineTests {
    /// The JSON lines of `output`.
    func lines(_ output: String) -> [[String: Any]] {
        output.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    @Test func aReinstalledContactLosesNothing() async throws {
        try await withTestRelay { relay in
            for (profile, uid) in [("alice", "alice"), ("bob", "bob")] {
                let login = try await relay.run(["login", "--profile", profile, "--relay", relay.url(for: uid).absoluteString, "--token", try relay.token(uid)])
                #expect(login.status == 0, "\(login.stderr)")
            }
            #expect(try await relay.run(["send", "--profile", "alice", "bob", "hello"]).status == 0)
            #expect(try await relay.run(["receive", "--profile", "bob"]).stdout.contains("hello"))

            // In flight when bob reinstalls: sealed to keys his new device never had.
            let inFlight = try await relay.run(["send", "--profile", "alice", "bob", "in flight"])
            #expect(inFlight.status == 0)
            let inFlightID = inFlight.stdout.trimmingCharacters(in: .newlines)
            let reinstall = try await relay.run(["login", "--profile", "bob-new", "--relay", relay.url(for: "bob").absoluteString, "--token", try relay.token("bob")])
            #expect(reinstall.status == 0, "\(reinstall.stderr)")

            // Alice's next send is told of the new identity key: held, exit 65, and said so.
            let held = try await relay.run(["--profile", "alice", "--json", "send", "bob", "after the reinstall"])
            #expect(held.status == 65, "\(held.stderr)")
            #expect(held.stderr.contains("identity key changed") && held.stderr.contains("mailslot trust bob"), "\(held.stderr)")
            let heldID = try #require(lines(held.stdout).first?["id"] as? String)
            #expect(lines(held.stdout).first?["state"] as? String == "held")

            // Bob's new device cannot open the message in flight: it tells alice, who sees it undelivered.
            #expect(try await relay.run(["receive", "--profile", "bob-new"]).stdout.isEmpty)
            #expect(try await relay.run(["receive", "--profile", "alice"]).status == 0)
            let history = lines(try await relay.run(["history", "--profile", "alice", "bob", "--json"]).stdout)
            let states = Dictionary(uniqueKeysWithValues: history.compactMap { line in
                (line["id"] as? String).map { ($0, line["state"] as? String ?? "received") }
            })
            #expect(states[inFlightID] == "undelivered", "\(history)")
            #expect(states[heldID] == "held", "\(history)")
            let text = try await relay.run(["history", "--profile", "alice"]).stdout
            #expect(text.contains("[undelivered]") && text.contains("mailslot resend \(inFlightID)"), "\(text)")

            // Resending before trusting is refused and keeps it; trust sends what was held; resend the rest.
            #expect(try await relay.run(["resend", "--profile", "alice", inFlightID]).status == 65)
            // Both compare the NEW key's number, and it is the same: alice trusts with it.
            let aliceSees = try #require(lines(try await relay.run(["fingerprint", "--profile", "alice", "bob", "--json"]).stdout).first)
            let bobReadsOut = try #require(lines(try await relay.run(["fingerprint", "--profile", "bob-new", "alice", "--json"]).stdout).first)
            #expect(aliceSees["key_changed"] as? Bool == true && bobReadsOut["key_changed"] as? Bool == false)
            let number = try #require(bobReadsOut["safety_number"] as? String)
            #expect(aliceSees["safety_number"] as? String == number, "a genuine reinstall: the same new number on both sides")
            let trusted = try await relay.run(["trust", "--profile", "alice", "bob", "--safety-number", number])
            #expect(trusted.status == 0, "\(trusted.stderr)")
            let resent = try await relay.run(["resend", "--profile", "alice", inFlightID])
            #expect(resent.status == 0, "\(resent.stderr)")
            #expect(try await relay.run(["resend", "--profile", "alice", inFlightID]).status == 64, "nothing left to resend")

            let received = lines(try await relay.run(["receive", "--profile", "bob-new", "--json"]).stdout)
            #expect(Set(received.compactMap { $0["text"] as? String }) == ["after the reinstall", "in flight"], "\(received)")
            let after = lines(try await relay.run(["history", "--profile", "alice", "bob", "--json"]).stdout)
            #expect(after.compactMap { $0["state"] as? String }.allSatisfy { $0 == "sent" }, "\(after)")
        }
    }

    /// Issue 26 item 1 through the binary: someone holding the issuer key logs in as bob with keys
    /// of its own. Alice is shown the new key's number (and told it is new), which differs from
    /// what the real bob reads out; trusting with bob's number is refused and nothing is sent.
    @Test func aForgedKeyChangeIsCaughtByComparingNumbers() async throws {
        try await withTestRelay { relay in
            for (profile, uid) in [("alice", "alice"), ("bob", "bob")] {
                #expect(try await relay.run(["login", "--profile", profile, "--relay", relay.url(for: uid).absoluteString, "--token", try relay.token(uid)]).status == 0)
            }
            #expect(try await relay.run(["send", "--profile", "alice", "bob", "hello"]).status == 0)
            #expect(try await relay.run(["receive", "--profile", "bob"]).stdout.contains("hello"))
            let forged = try await relay.run(["login", "--profile", "mallory", "--relay", relay.url(for: "bob").absoluteString, "--token", try relay.token("bob")])
            #expect(forged.status == 0, "\(forged.stderr)")

            let held = try await relay.run(["send", "--profile", "alice", "bob", "the launch code is 0000"])
            #expect(held.status == 65)
            #expect(held.stderr.contains("mailslot fingerprint bob") && held.stderr.contains("mailslot trust bob --safety-number"), "\(held.stderr)")

            let aliceSees = try #require(lines(try await relay.run(["fingerprint", "--profile", "alice", "bob", "--json"]).stdout).first)
            let bobReadsOut = try #require(lines(try await relay.run(["fingerprint", "--profile", "bob", "alice", "--json"]).stdout).first)
            let bobNumber = try #require(bobReadsOut["safety_number"] as? String)
            #expect(aliceSees["key_changed"] as? Bool == true)
            #expect(aliceSees["trust"] as? String == "changed")
            #expect(aliceSees["previous_safety_number"] as? String == bobNumber, "the old number is the one bob still has")
            #expect(aliceSees["safety_number"] as? String != bobNumber, "the numbers alice and bob read differ")
            #expect((aliceSees["fingerprint"] as? String)?.count == 35 && (aliceSees["key_id"] as? String)?.isEmpty == false)
            #expect(bobReadsOut["key_changed"] as? Bool == false && bobReadsOut["previous_safety_number"] is NSNull)
            let text = try await relay.run(["fingerprint", "--profile", "alice", "bob"]).stdout
            let newNumber = (aliceSees["safety_number"] as? String ?? "").split(separator: " ")
            #expect(text.contains("bob's identity key CHANGED") && text.contains("The NEW safety number is:")
                    && text.contains(newNumber[0..<4].joined(separator: " ")) && text.contains("The old one was:")
                    && text.contains("mailslot trust bob --safety-number DIGITS"), "\(text)")

            // Trusting with what bob read out: refused (65), nothing trusted, nothing sent.
            let refused = try await relay.run(["trust", "--profile", "alice", "bob", "--safety-number", bobNumber])
            #expect(refused.status == 65, "\(refused.stderr)")
            #expect(refused.stderr.contains("nothing was trusted"), "\(refused.stderr)")
            #expect(try await relay.run(["contacts", "--profile", "alice"]).stdout.contains("bob\tchanged"))
            #expect(lines(try await relay.run(["history", "--profile", "alice", "bob", "--json"]).stdout).last?["state"] as? String == "held")
            #expect(try await pending(relay, "bob") == 0, "the relay got nothing")

            // No number: not asked of a pipe, refused (64); not a number: 64.
            let blind = try await relay.run(["trust", "--profile", "alice", "bob"])
            #expect(blind.status == 64 && blind.stderr.contains("--safety-number"), "\(blind.stderr)")
            #expect(try await relay.run(["trust", "--profile", "alice", "bob", "--safety-number", "12345 67890"]).status == 64)
            #expect(try await relay.run(["contacts", "--profile", "alice"]).stdout.contains("bob\tchanged"))
            #expect(try await pending(relay, "bob") == 0)
        }
    }

    /// Without --safety-number, a terminal is asked for the number (a pasted three-line number is
    /// read whole) and the answer is checked like the option. `script` gives the binary a terminal.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/script")))
    func aTerminalIsAskedForTheNumber() async throws {
        try await withTestRelay { relay in
            for uid in ["alice", "bob"] {
                #expect(try await relay.run(["login", "--profile", uid, "--relay", relay.url(for: uid).absoluteString, "--token", try relay.token(uid)]).status == 0)
            }
            let bobReadsOut = try await relay.run(["fingerprint", "--profile", "bob", "alice"]).stdout
            #expect(bobReadsOut.split(separator: "\n").count == 3)
            let trust = "'\(ProcessRunner.builtProduct("mailslot").path)' trust --profile alice bob"
            let environment = ["MAILSLOT_HOME": relay.folder, "HOME": relay.folder, "PATH": "/usr/bin:/bin"]
            let url = URL(fileURLWithPath: "/usr/bin/script")
            let wrong = try await ProcessRunner.run(url, ["-qec", trust, "/dev/null"], environment: environment,
                                                    stdin: String(repeating: "11111 ", count: 12) + "\n")
            #expect(wrong.status == 65, "\(wrong.stdout) \(wrong.stderr)")
            #expect(wrong.stdout.contains("The safety number you compared with bob"), "\(wrong.stdout)")
            #expect(try await relay.run(["contacts", "--profile", "alice"]).stdout.contains("bob\tdisputed"), "a failed comparison is kept")
            let right = try await ProcessRunner.run(url, ["-qec", trust, "/dev/null"], environment: environment, stdin: bobReadsOut)
            #expect(right.status == 0, "\(right.stdout) \(right.stderr)")
            #expect(try await relay.run(["contacts", "--profile", "alice"]).stdout.contains("bob\tverified"))
        }
    }

    /// How many messages wait in `uid`'s mailbox, asked as its owner.
    func pending(_ relay: TestRelay, _ uid: String) async throws -> Int {
        let page = try await relay.call("GET", "/v1/users/\(uid)/messages", session: try await relay.signIn(uid).session)
        return try page.decoded(MessagePage.self).messages.count
    }

    @Test func aRotatedMailboxKeyIsFollowedWithoutAsking() async throws {
        try await withTestRelay { relay in
            for uid in ["alice", "bob"] {
                #expect(try await relay.run(["login", "--profile", uid, "--relay", relay.url(for: uid).absoluteString, "--token", try relay.token(uid)]).status == 0)
            }
            #expect(try await relay.run(["send", "--profile", "alice", "bob", "one"]).status == 0)
            let rotated = try await relay.run(["rotate-key", "--profile", "bob"])
            #expect(rotated.status == 0, "\(rotated.stderr)")
            #expect(try await relay.run(["send", "--profile", "alice", "bob", "two"]).status == 0, "re-sealed to the new key, no trust needed")
            let received = lines(try await relay.run(["receive", "--profile", "bob", "--json"]).stdout)
            #expect(received.compactMap { $0["text"] as? String } == ["one", "two"])
        }
    }
}
