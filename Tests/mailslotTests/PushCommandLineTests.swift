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
}
