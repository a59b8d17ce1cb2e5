import Foundation
import MailslotTestSupport
import MailslotWire
import Testing

/// `mailslot push` and `send --no-wake` as a person at a terminal uses them: what they refuse
/// before asking the relay, and what they say when the relay cannot be reached (design §7.2).
/// PushRegistrationCommandLineTests has the commands against the relay's push routes.
@Suite struct PushCommandLineTests {
    static let p256dh = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
    static let auth = "BTBZMqHH6r4Tts7J_aSIgg"

    /// Logs `uid` in with profile `uid`; fails the test when it does not work.
    static func login(_ uid: String, _ relay: TestRelay) async throws {
        let login = try await relay.run(["login", "--profile", uid, "--relay", relay.url(for: uid).absoluteString, "--token", try relay.token(uid)])
        try #require(login.status == 0, "\(login.stderr)")
    }

    @Test func badArgumentsAreRefusedWithExit64() async throws {
        try await withTestRelay { relay in
            try await Self.login("bob", relay)
            let refused: [[String]] = [
                ["push", "add", "webpush", "https://push.example.net/x", "--p256dh", "not base64!", "--auth", Self.auth],
                ["push", "add", "webpush", "https://push.example.net/x", "--p256dh", Self.p256dh, "--auth", "QUJD"],
                ["push", "add", "webpush", "not a url", "--p256dh", Self.p256dh, "--auth", Self.auth],
                ["push", "add", "webpush", "https://push.example.net/x", "--auth", Self.auth],
                ["push", "add", "apns", "xyz"],
                ["push", "add", "apns", "abcd"],
                ["push", "add", "fcm", "token", "--id", "short"],
                ["push", "add", "fcm", "token", "--tag", "a tag with spaces"],
                ["push", "add", "carrier-pigeon", "x"],
                ["push", "remove", "../../keys"],
            ]
            for arguments in refused {
                let result = try await relay.run(arguments + ["--profile", "bob"])
                #expect(result.status == 64, "\(arguments): \(result.status) \(result.stderr)")
                #expect(result.stdout.isEmpty, "\(arguments) printed \(result.stdout)")
            }
            let file = relay.folder + "/note.txt"
            try Data("x".utf8).write(to: URL(fileURLWithPath: file))
            let noWakeFile = try await relay.run(["send", "--profile", "bob", "alice", "--file", file, "--no-wake"])
            #expect(noWakeFile.status == 64 && noWakeFile.stderr.contains("--no-wake"), "\(noWakeFile.stderr)")
        }
    }

    @Test func aRelayOutOfReachIsExit75AndTheTargetIsKept() async throws {
        try await withTestRelay { relay in
            try await Self.login("bob", relay)
            // The profile now points at a port where nothing listens.
            let settings = relay.folder + "/bob/profile.json"
            let text = try String(contentsOfFile: settings, encoding: .utf8)
            try text.replacingOccurrences(of: relay.url(for: "bob").absoluteString, with: "http://127.0.0.1:1")
                .write(toFile: settings, atomically: true, encoding: .utf8)

            let add = try await relay.run(["push", "add", "webpush", "https://push.example.net/up/1", "--p256dh", Self.p256dh,
                                           "--auth", Self.auth, "--id", "kept-for-the-next-login", "--profile", "bob"])
            #expect(add.status == 75, "\(add.stderr)")
            #expect(add.stdout == "kept-for-the-next-login\n", "the id is printed: the target is kept")
            #expect(add.stderr.contains("registered at the next `mailslot login`"), "\(add.stderr)")
            let generated = try await relay.run(["push", "add", "webhook", "--profile", "bob", "--json"])
            #expect(generated.status == 75)
            let kept = try JSONSerialization.jsonObject(with: Data(generated.stdout.utf8)) as? [String: Any]
            #expect(kept?["state"] as? String == "kept" && kept?["provider"] as? String == "webhook")
            #expect(PushGrammar.isValidRegistrationID(kept?["id"] as? String ?? ""), "a generated id")

            for arguments in [["push", "list"], ["push", "info"], ["push", "remove", "kept-for-the-next-login"]] {
                let result = try await relay.run(arguments + ["--profile", "bob"])
                #expect(result.status == 75, "\(arguments): \(result.status) \(result.stderr)")
                #expect(result.stderr.contains("cannot be reached"), "\(result.stderr)")
            }
        }
    }

    /// The commands against the relay's push routes: add (text and --json), list, info, remove,
    /// the refusals' exit codes, and a login that registers the kept target again.
    @Test func addListInfoRemoveAgainstTheRelay() async throws {
        try await withTestRelay(configure: { try PushTestCredentials.enableWebPushAndWebhook(&$0) }) { relay in
            try await Self.login("bob", relay)
            let add = try await relay.run(["--profile", "bob", "push", "add", "webpush", "https://push.example.net/up/bob", "--p256dh",
                                           Self.p256dh, "--auth", Self.auth, "--tag", "bob-laptop"])
            #expect(add.status == 0, "\(add.stderr)")
            let id = add.stdout.trimmingCharacters(in: .newlines)
            #expect(PushGrammar.isValidRegistrationID(id))
            let hook = try await relay.run(["push", "add", "webhook", "--token", "device-7", "--id", "bob-webhook-0000001", "--profile", "bob", "--json"])
            #expect(hook.status == 0, "\(hook.stderr)")
            let hookJSON = try JSONSerialization.jsonObject(with: Data(hook.stdout.utf8)) as? [String: Any]
            #expect(hookJSON?["id"] as? String == "bob-webhook-0000001" && hookJSON?["provider"] as? String == "webhook")
            #expect(hookJSON?["token"] as? String == "device-7")

            let list = try await relay.run(["--profile", "bob", "push", "list"])
            #expect(list.status == 0, "\(list.stderr)")
            let lines = list.stdout.split(separator: "\n").map { $0.split(separator: "\t").map(String.init) }
            #expect(lines.contains([id, "webpush", "bob-laptop", "push.example.net", "-"]), "\(list.stdout)")
            let hookLine = try #require(lines.first { $0.first == "bob-webhook-0000001" }, "\(list.stdout)")
            #expect(hookLine.count == 5 && hookLine[1] == "webhook" && hookLine[3] == "device-7" && hookLine[4] == "-")
            #expect(hookLine.count == 5 && hookLine[2].count == 22, "the profile's own tag")
            let listJSON = try await relay.run(["push", "list", "--profile", "bob", "--json"]).stdout.split(separator: "\n")
                .compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            #expect(listJSON.compactMap { $0["id"] as? String } == [id, "bob-webhook-0000001"].sorted())
            #expect(!listJSON.contains { $0["p256dh"] != nil || $0["auth"] != nil }, "the keys are never given back")

            let info = try await relay.run(["--profile", "bob", "--json", "push", "info"])
            let infoJSON = try JSONSerialization.jsonObject(with: Data(info.stdout.utf8)) as? [String: Any]
            #expect(infoJSON?["providers"] as? [String] == ["webhook", "webpush"])
            #expect((infoJSON?["vapid_public_key"] as? String)?.count == 87)
            #expect(try await relay.run(["push", "info", "--profile", "bob"]).stdout.contains("providers: webhook, webpush"))

            // Refusals: the provider the relay does not have (69), an endpoint it will not call (65).
            let apns = try await relay.run(["push", "add", "apns", String(repeating: "ab", count: 32), "--profile", "bob"])
            #expect(apns.status == 69 && apns.stderr.contains("push_provider_disabled"), "\(apns.stderr)")
            let privateEndpoint = try await relay.run(["push", "add", "webpush", "https://10.0.0.7/x", "--p256dh", Self.p256dh,
                                                       "--auth", Self.auth, "--profile", "bob"])
            #expect(privateEndpoint.status == 65 && privateEndpoint.stderr.contains("push_endpoint_refused"), "\(privateEndpoint.stderr)")

            // Gone from the relay (another sign-in's removal): the next login registers it again.
            let other = try await relay.signIn("bob").session
            #expect(try await relay.call("DELETE", "/v1/users/bob/push/\(id)", session: other).status == 204)
            try await Self.login("bob", relay)
            #expect(try await relay.run(["push", "list", "--profile", "bob"]).stdout.contains(id))

            let removed = try await relay.run(["push", "remove", id, "--profile", "bob"])
            #expect(removed.status == 0 && removed.stdout == "removed \(id)\n", "\(removed.stderr)")
            #expect(try await relay.run(["push", "remove", id, "--profile", "bob"]).status == 0, "already gone: done")
            try await Self.login("bob", relay)
            #expect(try await !relay.run(["push", "list", "--profile", "bob"]).stdout.contains(id), "removed: not registered again")
        }
    }
}
