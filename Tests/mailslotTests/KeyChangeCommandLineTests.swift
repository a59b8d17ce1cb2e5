import Foundation
import MailslotTestSupport
import MailslotWire
import Testing

/// The flow of issue 18 through the binary: alice and bob exchange a message, bob reinstalls (a
/// new profile, new keys, the same uid), alice sends again. Nothing is lost in silence: her send
/// says the key changed (exit 65, the message held), `trust` sends it, and a message that was in
/// flight comes back to her as undelivered, to be resent.
@Suite struct KeyChangeCommandLineTests {
    /// The JSON lines of `output`.
    func lines(_ output: String) -> [[String: Any]] {
        output.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    @Test func aReinstalledContactLosesNothing() async throws {
        try await withTestRelay { relay in
            for (profile, uid) in [("alice", "alice"), ("bob", "bob")] {
                let login = try await relay.run(["login", "--profile", profile, "--relay", relay.url.absoluteString, "--token", try relay.token(uid)])
                #expect(login.status == 0, "\(login.stderr)")
            }
            #expect(try await relay.run(["send", "--profile", "alice", "bob", "hello"]).status == 0)
            #expect(try await relay.run(["receive", "--profile", "bob"]).stdout.contains("hello"))

            // In flight when bob reinstalls: sealed to keys his new device never had.
            let inFlight = try await relay.run(["send", "--profile", "alice", "bob", "in flight"])
            #expect(inFlight.status == 0)
            let inFlightID = inFlight.stdout.trimmingCharacters(in: .newlines)
            let reinstall = try await relay.run(["login", "--profile", "bob-new", "--relay", relay.url.absoluteString, "--token", try relay.token("bob")])
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
            let trusted = try await relay.run(["trust", "--profile", "alice", "bob"])
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

    @Test func aRotatedMailboxKeyIsFollowedWithoutAsking() async throws {
        try await withTestRelay { relay in
            for uid in ["alice", "bob"] {
                #expect(try await relay.run(["login", "--profile", uid, "--relay", relay.url.absoluteString, "--token", try relay.token(uid)]).status == 0)
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
