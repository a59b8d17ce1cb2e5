import Foundation
import MailslotClient
@testable import MailslotRelay
import MailslotTestSupport
import MailslotWire
import Testing

/// `mailslot send --file` and `receive --save-to` as a person at a terminal uses them, against a
/// relay in this process cutting blobs into 1 MiB parts.
@Suite struct AttachmentCommandLineTests {
    /// The round trip's size in MiB: 12 by default (CI time); `MAILSLOT_TEST_FILE_MIB=64` runs
    /// the issue's 64 MiB video.
    static let roundTripMiB = Int(ProcessInfo.processInfo.environment["MAILSLOT_TEST_FILE_MIB"] ?? "") ?? 12

    @Test func aFileArrivesByteForByteInTheSaveToFolder() async throws {
        try await withBlobRelay { relay in
            try await loginBoth(relay)
            let bytes = randomBytes(Self.roundTripMiB << 20)
            let source = try file(bytes, in: relay, named: "video.mp4")
            let sent = try await relay.run(["send", "--profile", "alice", "bob", "--file", source, "our trip", "--json"])
            #expect(sent.status == 0, "\(sent.stderr)")
            let outcome = try json(sent.stdout).first
            #expect(outcome?["state"] as? String == "sent")
            #expect(!sent.stderr.contains("%"), "no progress bar when stderr is not a terminal")

            let folder = relay.folder + "/downloads"
            let received = try await relay.run(["receive", "--profile", "bob", "--save-to", folder, "--json"])
            #expect(received.status == 0, "\(received.stderr)")
            let message = try #require(try json(received.stdout).first)
            #expect(message["type"] as? String == "file" && message["text"] as? String == "our trip")
            let attachment = try #require((message["attachments"] as? [[String: Any]])?.first)
            #expect(attachment["path"] as? String == folder + "/video.mp4")
            #expect(attachment["bytes"] as? Int == bytes.count && attachment["media_type"] as? String == "video/mp4")
            #expect(attachment["name"] as? String == "video.mp4")
            #expect(FileManager.default.contents(atPath: folder + "/video.mp4") == Data(bytes), "byte for byte")
            #expect(try FileManager.default.attributesOfItem(atPath: folder)[.posixPermissions] as? Int == 0o700)

            // Acknowledged once saved: the relay erases the blob.
            #expect(relay.counter("mailslot_blobs_acknowledged_total") == 1)

            // Without --save-to, into the profile's files/ folder (private); the text output prints the path.
            let picture = try file(randomBytes(2_000), in: relay, named: "dot.png")
            #expect(try await relay.run(["send", "--profile", "alice", "bob", "--file", picture]).status == 0)
            let text = try await relay.run(["receive", "--profile", "bob"])
            #expect(text.stdout.contains("saved \(relay.folder)/bob/files/dot.png"), "\(text.stdout)")
            #expect(try FileManager.default.attributesOfItem(atPath: relay.folder + "/bob/files")[.posixPermissions] as? Int == 0o700)
        }
    }

    /// `receive --save-to` on a terminal (a pseudo-terminal from `script`): a progress bar per
    /// downloaded file on stderr, as `send --file` has; none with `--json`.
    @Test func receiveShowsADownloadProgressBarOnATerminalOnly() async throws {
        try await withBlobRelay { relay in
            try await loginBoth(relay)
            for round in 0..<2 {
                let source = try file(randomBytes(3 << 20), in: relay, named: "clip\(round).bin")
                #expect(try await relay.run(["send", "--profile", "alice", "bob", "--file", source, "--json"]).status == 0)
            }
            let folder = relay.folder + "/downloads"
            let mailslot = ProcessRunner.builtProduct("mailslot").path
            let environment = ["MAILSLOT_HOME": relay.folder, "HOME": relay.folder, "PATH": "/usr/bin:/bin", "TERM": "dumb"]
            let onTerminal = try await ProcessRunner.run(URL(fileURLWithPath: "/usr/bin/script"),
                                                         ["-qec", "'\(mailslot)' receive --profile bob --save-to '\(folder)'", "/dev/null"],
                                                         environment: environment)
            #expect(onTerminal.status == 0, "\(onTerminal.stdout)")
            for name in ["clip0.bin", "clip1.bin"] {
                #expect(onTerminal.stdout.contains("\r\(name)  downloading  100%"), "\(onTerminal.stdout)")
                #expect(onTerminal.stdout.contains("\r\(name)  decrypting  100%"), "\(onTerminal.stdout)")
            }
            #expect(FileManager.default.fileExists(atPath: folder + "/clip1.bin"))

            let source = try file(randomBytes(3 << 20), in: relay, named: "quiet.bin")
            #expect(try await relay.run(["send", "--profile", "alice", "bob", "--file", source, "--json"]).status == 0)
            let json = try await ProcessRunner.run(URL(fileURLWithPath: "/usr/bin/script"),
                                                   ["-qec", "'\(mailslot)' receive --profile bob --save-to '\(folder)' --json", "/dev/null"],
                                                   environment: environment)
            #expect(json.status == 0 && json.stdout.contains("quiet.bin"), "\(json.stdout)")
            #expect(!json.stdout.contains("downloading"), "quiet with --json")
        }
    }

    @Test func aSendKilledMidwayIsFinishedByFlushWithAtMostOnePartAgain() async throws {
        try await withBlobRelay { relay in
            try await loginBoth(relay)
            let bytes = randomBytes(48 << 20)
            let parts = 49  // 48 MiB and the stream's overhead, in 1 MiB parts
            let source = try file(bytes, in: relay, named: "big.bin")
            // Killed (as by a crash or `kill -9`) once a few parts are stored.
            let result = try await sendFile(source, in: relay, signal: SIGKILL, afterParts: 3)
            try #require(result.status == 137, "killed mid-send: \(result.status) \(result.stderr)")
            // The part in flight ends on the relay (stored or dropped): Alice holds no transfer.
            try await eventually("alice's part in flight ended on the relay") { relay.relay.blobs.transfers.count("alice") == 0 }
            let stored = Int(relay.counter("mailslot_blob_parts_received_total"))
            try #require(stored < parts, "the send was killed before its end")
            let putsBefore = relay.partUploads()

            let flushed = try await relay.run(["flush", "--profile", "alice"])
            #expect(flushed.status == 0, "\(flushed.stderr)")
            #expect(Int(relay.counter("mailslot_blob_parts_received_total")) == parts)
            #expect(relay.partUploads() - putsBefore == parts - stored, "flush sends only the parts the relay does not have")
            #expect(relay.partUploads() <= parts + 1, "at most the part in flight was sent twice")

            let folder = relay.folder + "/downloads"
            #expect(try await relay.run(["receive", "--profile", "bob", "--save-to", folder]).status == 0)
            #expect(FileManager.default.contents(atPath: folder + "/big.bin") == Data(bytes))
        }
    }

    @Test func ctrlCLeavesTheSendQueuedForFlush() async throws {
        try await withBlobRelay { relay in
            try await loginBoth(relay)
            let bytes = randomBytes(48 << 20)
            let result = try await sendFile(try file(bytes, in: relay, named: "big.bin"), in: relay, signal: SIGINT, afterParts: 3)
            try #require(result.status != 0, "interrupted before its end")
            #expect(result.status == 75, "\(result.stderr)")
            #expect(result.stderr.contains("queued: `mailslot flush` finishes it"), "\(result.stderr)")
            #expect(try await relay.run(["flush", "--profile", "alice"]).status == 0)
            let folder = relay.folder + "/downloads"
            #expect(try await relay.run(["receive", "--profile", "bob", "--save-to", folder]).status == 0)
            #expect(FileManager.default.contents(atPath: folder + "/big.bin") == Data(bytes))
        }
    }

    @Test func namesStayInTheFolderAndNothingIsOverwritten() async throws {
        try await withBlobRelay { relay in
            try await loginBoth(relay)
            let folder = relay.folder + "/downloads"
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            try Data("mine".utf8).write(to: URL(fileURLWithPath: folder + "/x"))
            // The sender's name is theirs to choose: a library client sends `../../x` (inline and as a blob).
            let alice = try MailslotClient(relay: relay.url, databasePath: relay.folder + "/alice/client.sqlite") { throw CLIError() }
            try await alice.send(Payload(attachments: [Attachment(mediaType: "image/png", data: randomBytes(100), name: "../../x")]),
                                 type: .picture, to: "bob")
            let blob = randomBytes(300_000)
            let transfer = try await alice.send(file: OutgoingFile(url: URL(fileURLWithPath: try file(blob, in: relay, named: "y")), name: "../../x"), to: "bob")
            #expect(try await transfer.outcome() == .sent(id: transfer.messageID))

            let received = try await relay.run(["receive", "--profile", "bob", "--save-to", folder, "--json"])
            #expect(received.status == 0, "\(received.stderr)")
            let paths = try json(received.stdout).compactMap { ($0["attachments"] as? [[String: Any]])?.first?["path"] as? String }
            #expect(paths == [folder + "/x (1)", folder + "/x (2)"])
            #expect(FileManager.default.contents(atPath: folder + "/x") == Data("mine".utf8), "never overwritten")
            #expect(FileManager.default.contents(atPath: folder + "/x (2)") == Data(blob))
            #expect(try FileManager.default.contentsOfDirectory(atPath: relay.folder).filter { $0 == "x" || $0 == "x (1)" }.isEmpty, "nothing outside DIR")
        }
    }

    @Test func exitCodesOfFileSends() async throws {
        try await withTestRelay(store: try .configured.singleNode, configure: { $0.blobPartBytes = 1 << 20; $0.maxFileBytes = 1 << 20 }) { relay in
            try await loginBoth(relay)
            // Larger than the relay takes: 65, with a clear message, and nothing queued.
            let big = try file(randomBytes((1 << 20) + 1), in: relay, named: "big.bin")
            let tooLarge = try await relay.run(["send", "--profile", "alice", "bob", "--file", big])
            #expect(tooLarge.status == 65, "\(tooLarge.stderr)")
            #expect(tooLarge.stderr.contains("larger than the relay takes"))
            #expect(try await relay.run(["flush", "--profile", "alice"]).status == 0, "nothing left queued")
            #expect(try await relay.run(["send", "--profile", "alice", "bob", "--file", relay.folder + "/missing"]).status == 64)

            // The relay unreachable: queued (75), and `flush` finishes it.
            let settings = relay.folder + "/alice/profile.json"
            let saved = try Data(contentsOf: URL(fileURLWithPath: settings))
            try Data(String(decoding: saved, as: UTF8.self).replacingOccurrences(of: relay.url.absoluteString, with: "http://127.0.0.1:1").utf8)
                .write(to: URL(fileURLWithPath: settings))
            let bytes = randomBytes(500_000)
            let queued = try await relay.run(["send", "--profile", "alice", "bob", "--file", try file(bytes, in: relay, named: "a.bin")])
            #expect(queued.status == 75, "\(queued.stderr)")
            #expect(queued.stderr.contains("queued: `mailslot flush` finishes it"))
            #expect(try await relay.run(["flush", "--profile", "alice"]).status == 75, "still unreachable")
            try saved.write(to: URL(fileURLWithPath: settings))
            #expect(try await relay.run(["flush", "--profile", "alice"]).status == 0)
            let folder = relay.folder + "/downloads"
            #expect(try await relay.run(["receive", "--profile", "bob", "--save-to", folder]).status == 0)
            #expect(FileManager.default.contents(atPath: folder + "/a.bin") == Data(bytes))
        }
    }

    // MARK: Helpers

    struct CLIError: Error {}

    /// One relay even on a cluster: blobs without S3 are files in one relay's data folder.
    private func withBlobRelay(_ body: (TestRelay) async throws -> Void) async throws {
        try await withTestRelay(store: try .configured.singleNode, configure: { $0.blobPartBytes = 1 << 20 }, body)
    }

    /// Runs `mailslot send --profile alice bob --file source` and sends it `signal` once the relay
    /// has stored `afterParts` parts; how it ended.
    private func sendFile(_ source: String, in relay: TestRelay, signal: Int32, afterParts: Double) async throws -> ProcessResult {
        let pidFile = relay.folder + "/send-\(UUID().uuidString).pid"
        let command = "echo $$ > '\(pidFile)'; exec '\(ProcessRunner.builtProduct("mailslot").path)' send --profile alice bob --file '\(source)'"
        let environment = ["MAILSLOT_HOME": relay.folder, "HOME": relay.folder, "PATH": "/usr/bin:/bin"]
        let sending = Task { try await ProcessRunner.run(URL(fileURLWithPath: "/bin/sh"), ["-c", command], environment: environment) }
        let start = relay.counter("mailslot_blob_parts_received_total")
        var sent = false
        // Signalled as soon as the relay has stored that many parts (checked every few ms).
        try? await eventually(within: .seconds(60), "the relay stored \(afterParts) parts of the send") {
            if relay.counter("mailslot_blob_parts_received_total") - start >= afterParts,
               let text = try? String(contentsOfFile: pidFile, encoding: .utf8), let pid = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)) {
                kill(pid, signal)
                sent = true
            }
            return sent
        }
        if !sent, let text = try? String(contentsOfFile: pidFile, encoding: .utf8), let pid = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)) {
            kill(pid, SIGKILL)  // never left running, whatever happened
        }
        #expect(sent, "the relay never stored \(afterParts) parts of the send")
        return try await sending.value
    }

    private func loginBoth(_ relay: TestRelay) async throws {
        for uid in ["alice", "bob"] {
            let login = try await relay.run(["login", "--profile", uid, "--relay", relay.url(for: uid).absoluteString, "--token", try relay.token(uid)])
            try #require(login.status == 0, "\(login.stderr)")
        }
    }

    private func file(_ bytes: [UInt8], in relay: TestRelay, named name: String) throws -> String {
        let folder = relay.folder + "/sources-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try Data(bytes).write(to: URL(fileURLWithPath: folder + "/" + name))
        return folder + "/" + name
    }

    private func json(_ text: String) throws -> [[String: Any]] {
        text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }
}
