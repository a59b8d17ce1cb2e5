import Foundation
import Synchronization
import MailslotTestSupport
import Testing
@testable import MailslotRelay
import MailslotWire

/// A full disk is a state the relay reports and survives. Where this process may mount a file
/// system (root, as CI runs), the relay's data folder is a 24 MiB tmpfs that the test really
/// fills; elsewhere that test says so and does nothing. The watermark is also shown with the free
/// space the relay sees injected, which runs everywhere.
@Suite(.serialized) struct DiskFullTests {
    /// A tmpfs of `megabytes` mounted for `body`, unmounted after it; nil when mounting is not allowed here.
    static func withSmallDisk<T>(megabytes: Int, _ body: (String) async throws -> T) async throws -> T? {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("mailslot-disk-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        guard try await run("/bin/mount", "-t", "tmpfs", "-o", "size=\(megabytes)m,mode=0700", "tmpfs", folder) else { return nil }
        do {
            let result = try await body(folder)
            _ = try await run("/bin/umount", "-l", folder)
            return result
        } catch {
            _ = try? await run("/bin/umount", "-l", folder)
            throw error
        }
    }

    /// Through ``ProcessRunner`` (posix_spawn), as every test that starts a process.
    private static func run(_ arguments: String...) async throws -> Bool {
        try await ProcessRunner.run(URL(fileURLWithPath: arguments[0]), Array(arguments.dropFirst())).status == 0
    }

    /// Writes zeros to `path` until the disk refuses more.
    static func fill(_ path: String) {
        guard let handle = FileHandle(forWritingAtPath: path) ?? {
            _ = FileManager.default.createFile(atPath: path, contents: nil)
            return FileHandle(forWritingAtPath: path)
        }() else { return }
        defer { try? handle.close() }
        let chunk = Data(count: 64 * 1024)
        while (try? handle.write(contentsOf: chunk)) != nil {}
        var small = Data(count: 512)
        while !small.isEmpty, (try? handle.write(contentsOf: small)) == nil { small.removeLast(small.count / 2 + 1) }
        while (try? handle.write(contentsOf: Data(count: 1))) != nil {}
    }

    @Test func aFullDiskRefusesCreatesKeepsAcksAndSignInsAndLosesNothing() async throws {
        let ran: Void? = try await Self.withSmallDisk(megabytes: 24) { disk in
            let data = (disk as NSString).appendingPathComponent("data")
            try await withTestRelay(dataDirectory: data, configure: { configuration in
                configuration.minFreeBytes = 4 * 1024 * 1024
                configuration.reserveBytes = 2 * 1024 * 1024
                configuration.createRate = 10_000
                configuration.createBurst = 10_000
            }) { relay in
                let alice = try await relay.signIn("alice"), bob = try await relay.signIn("bob")
                var stored: [String] = []
                var refusal: TestRelay.Answer?
                for n in 0..<400 where refusal == nil {
                    let answer = try await relay.send(alice.session, to: "bob", id: messageID(n), envelope: randomBytes(64 * 1024))
                    if answer.status == 201 { stored.append(messageID(n)) } else { refusal = answer }
                }
                #expect(refusal?.status == 507 && refusal?.problem == .storageFull, "\(refusal.map { "\($0.status) \($0.code ?? "")" } ?? "none")")
                #expect(Int(refusal?.headers["retry-after"] ?? "") ?? 0 >= 1)
                #expect(stored.count > 50, "the 24 MiB disk took \(stored.count) envelopes of 64 KiB")
                let ready = try await relay.call("GET", "/readyz")
                #expect(ready.status == 503 && ready.json["reason"] as? String == "storage_full")

                // One ack, so that the erasure truncates the WAL; then something else fills the disk.
                #expect(try await relay.call("DELETE", "/v1/users/bob/messages/\(stored.removeFirst())", session: bob.session).status == 204)
                try await eventually("the erasure truncated the WAL") {
                    let wal = (data as NSString).appendingPathComponent("relay.sqlite-wal")
                    return (try? FileManager.default.attributesOfItem(atPath: wal)[.size] as? Int) ?? 0 == 0
                }
                Self.fill((disk as NSString).appendingPathComponent("filler"))
                let reserve = (data as NSString).appendingPathComponent("relay.reserve")
                #expect(FileManager.default.fileExists(atPath: reserve))

                // Erasing needs room in the WAL: the reserve makes it, and acks, sign-ins, refreshes go on.
                for id in stored.prefix(3) {
                    let ack = try await relay.call("DELETE", "/v1/users/bob/messages/\(id)", session: bob.session)
                    #expect(ack.status == 204, "ack on a full disk: \(ack.status) \(ack.code ?? "")")
                }
                stored.removeFirst(3)
                #expect(!FileManager.default.fileExists(atPath: reserve), "released when the disk ran out")
                #expect(try await relay.call("POST", "/v1/sessions", body: ["token": try relay.token("carol")]).status == 201)
                #expect(try await relay.call("POST", "/v1/sessions/refresh", body: ["refresh": bob.refresh]).status == 201)
                let socket = try await TestSocket.subscribed(relay, "bob", session: try await relay.signIn("bob").session)
                let delivered = try await socket.next()
                #expect(delivered?.type == "message")
                try await socket.send(.ack(delivered?.message?.id ?? ""))
                var answer = try await socket.next()
                while answer?.type == "message" { answer = try await socket.next() }  // the window's other deliveries
                #expect(answer?.type == "acked" || answer?.type == "error", "an ack is answered, never dropped")
                if answer?.type == "acked", let id = delivered?.message?.id { stored.removeAll { $0 == id } }
                await socket.close()
                let refused = try await relay.send(alice.session, to: "bob", id: messageID(999), envelope: randomBytes(512))
                #expect(refused.status == 507)

                // Space comes back: every message answered 201 and not yet acked is still there.
                try FileManager.default.removeItem(atPath: (disk as NSString).appendingPathComponent("filler"))
                let session = try await relay.signIn("bob").session
                var listed: [String] = []
                var after: String?
                repeat {
                    let page = try await relay.call("GET", "/v1/users/bob/messages?limit=50" + (after.map { "&after=\($0)" } ?? ""), session: session)
                    listed += (page.json["messages"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String }
                    after = page.json["next"] as? String
                } while after != nil
                #expect(listed.count == stored.count && listed == stored,
                        "nothing answered 201 is lost: missing \(Set(stored).subtracting(listed).sorted()), extra \(Set(listed).subtracting(stored).sorted())")
                for id in listed { _ = try await relay.call("DELETE", "/v1/users/bob/messages/\(id)", session: session) }
                try await eventually("ready again without a restart") { try await relay.call("GET", "/readyz").status == 200 }
                #expect(try await relay.send(alice.session, to: "bob", id: messageID(1000)).status == 201)
                #expect(FileManager.default.fileExists(atPath: reserve), "the reserve is back")
            }
        }
        if ran == nil { print("DiskFullTests: no tmpfs can be mounted here (not root?); only the injected watermark test ran") }
    }

    /// The watermark, with the free space the relay sees injected: runs everywhere.
    @Test func belowTheWatermarkCreatesAreRefusedAndTheRelayIsNotReadyUntilSpaceReturns() async throws {
        do {
            let free = Atomic<Int64>(1 << 40)
            try await withTestRelay(configure: { configuration in
                configuration.minFreeBytes = 1 << 20
                configuration.reserveBytes = 0
                configuration.diskSpaceProbe = { _ in free.load(ordering: .relaxed) }
            }) { relay in
                let alice = try await relay.signIn("alice"), bob = try await relay.signIn("bob")
                #expect(try await relay.send(alice.session, to: "bob", id: messageID(1)).status == 201)
                free.store(1000, ordering: .relaxed)
                // The relay reads the free space again once its last reading is old enough.
                try await eventually("not ready once the free space is below the watermark") {
                    try await relay.call("GET", "/readyz").status == 503
                }
                #expect(try await relay.send(alice.session, to: "bob", id: messageID(2)).problem == .storageFull)
                #expect(try await relay.call("DELETE", "/v1/users/bob/messages/\(messageID(1))", session: bob.session).status == 204)
                free.store(1 << 40, ordering: .relaxed)
                try await eventually("ready again once space returns") { try await relay.call("GET", "/readyz").status == 200 }
                #expect(try await relay.send(alice.session, to: "bob", id: messageID(2)).status == 201)
            }
        }
    }
}
