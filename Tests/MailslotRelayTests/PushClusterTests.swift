import Foundation
import MailslotAudit
import MailslotTestSupport
import MailslotWire
import Synchronization
import Testing
@testable import MailslotRelay

/// Wake-ups across relays sharing one PostgreSQL database (docs/design/wakeups.md §2.3–2.4, §9.3;
/// issue 29: "a message stored through one wakes a device whose owner is connected to neither,
/// exactly once"). Needs both `tools/postgres run` and `tools/push run` (tools/test nests them);
/// without either it skips, saying why.
@Suite(.serialized, .enabled(if: PushStandins.available, PushStandins.skipReason))
struct PushClusterTests {
    var standins: PushStandins { PushStandins.current! }

    /// Two relays on one database, both at the stand-ins, alice and bob signed in on each.
    func withTwoRelays<T>(_ body: (_ a: TestRelay, _ b: TestRelay) async throws -> T) async throws -> T {
        let standins = standins
        try await standins.reset()
        return try await withTestRelay(store: .cluster(2), configure: { try standins.configure(&$0) }) { relay in
            try await body(relay.nodes[0], relay.nodes[1])
        }
    }

    /// Bob is connected to neither relay: one wake-up, whichever relay stored the messages, and
    /// only one of the two relays sends it.
    @Test func aMessageThroughEitherRelayWakesAnOfflineOwnerExactlyOnce() async throws {
        try await withTwoRelays { a, b in
            for (index, through) in [a, b].enumerated() {
                let uid = "bob\(index)"
                let bob = try await a.signIn(uid).session
                let alice = try await through.signIn("alice").session
                let registration = try await a.registerPush(.webpush, uid: uid, session: bob, standins: standins)
                for _ in 0..<3 { try await through.sendMessage(alice, to: uid) }
                let first = try await standins.awaitRequests(.webpush, for: registration.target)
                try await eventually("the wake-up was sent and neither relay has a call in flight") {
                    a.sum("mailslot_push_sent_total", labelsContaining: []) + b.sum("mailslot_push_sent_total", labelsContaining: []) >= Double(index + 1)
                        && a.counter("mailslot_push_in_flight") == 0 && b.counter("mailslot_push_in_flight") == 0
                }
                try await a.expectNoWakeUpDueBeforeTheInterval(["bob0", "bob1"], interval: 5_000, waitForSend: false)
                #expect(try await standins.requests(.webpush, for: registration.target).count == 1,
                        "stored through relay \(index): exactly one wake-up")
                #expect(first[0].ok && first[0].tag == registration.tag)
            }
            let sent = a.sum("mailslot_push_sent_total", labelsContaining: ["webpush"]) + b.sum("mailslot_push_sent_total", labelsContaining: ["webpush"])
            #expect(sent == 2, "two wake-ups sent in all, by whichever relay claimed each: \(sent)")
        }
    }

    /// Bob listens on relay A; a message stored through relay B wakes nothing (A's subscription is
    /// live in the database), and the wake-up comes once he closes it.
    @Test func aSubscriptionOnAnotherRelayMeansNoWakeUp() async throws {
        try await withTwoRelays { a, b in
            let bob = try await a.signIn("bob").session
            let alice = try await b.signIn("alice").session
            let registration = try await a.registerPush(.webpush, uid: "bob", session: bob, standins: standins)
            let socket = try await RelaySocket.subscribed(a, "bob", session: bob)
            try await b.sendMessage(alice, to: "bob")
            #expect(try await socket.next(timeout: .seconds(5))?.type == "message", "delivered live across relays")
            // Either relay's claim postpones the due row (bob is live on A): only then look.
            try await eventually(within: .seconds(20), "a relay postponed the wake-up") {
                a.sum("mailslot_push_skipped_total", labelsContaining: [#""connected""#])
                    + b.sum("mailslot_push_skipped_total", labelsContaining: [#""connected""#]) >= 1
            }
            #expect(try await standins.requests(.webpush, for: registration.target).isEmpty, "no wake-up while bob listens on A")
            await socket.close()
            // The message is still pending (not acked): once bob is gone, the postponed row wakes him.
            _ = try await standins.awaitRequests(.webpush, for: registration.target, within: .seconds(30))
        }
    }

    /// Bob listens on a relay process that is killed (SIGKILL: no goodbye, its presence row stays);
    /// a message through another relay still wakes him, once the dead node's heartbeat is stale:
    /// within the 30 s presence window plus the interval.
    @Test func aKilledNodesSubscriptionStopsCountingAndTheWakeUpComes() async throws {
        try await withTwoRelays { a, _ in
            let databaseURL = try #require(a.databaseURL)
            let process = try SpawnedRelay(databaseURL: databaseURL, issuer: a.issuer.publicKey.paserk, audience: a.audience,
                                           arguments: standins.serveArguments())
            defer { process.kill() }
            try await process.waitUntilListening()
            let node = AuditHTTP(base: process.url)
            let grant = try await node.call("POST", "/v1/sessions", body: ["token": try a.token("bob")])
            let bob = try #require(grant.json["session"] as? String, "sign-in on the spawned relay: \(grant.summary)")
            let registration = try await a.registerPush(.webpush, uid: "bob", session: bob, standins: standins)
            let socket = RelaySocket(url: "ws://127.0.0.1:\(process.port)/v1/users/bob/subscribe", authorization: "Bearer \(bob)")
            #expect(try await socket.next()?.type == "ready")
            process.kill()
            let alice = try await a.signIn("alice").session
            try await a.sendMessage(alice, to: "bob")
            let requests = try await standins.awaitRequests(.webpush, for: registration.target, within: .seconds(50))
            #expect(requests[0].ok && requests[0].tag == registration.tag)
            await socket.close()
        }
    }
}

/// A `mailslot-relay serve` process on the test database, so that a test can kill it with
/// SIGKILL (an in-process relay can only be stopped gracefully).
final class SpawnedRelay: Sendable {
    let pid: pid_t
    let port: Int
    let folder: String
    private let killed = Mutex(false)
    var url: URL { URL(string: "http://127.0.0.1:\(port)")! }

    init(databaseURL: String, issuer: String, audience: String, arguments: [String]) throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("mailslot-spawned-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        // Free now; another process may take it before the relay binds it: waitUntilListening()
        // then fails with the relay's log.
        port = try LoopbackPort.unused()
        let executable = ProcessRunner.builtProduct("mailslot-relay").path
        let argv = [executable, "serve", "--listen", "127.0.0.1:\(port)", "--data", folder + "/data", "--database-url", databaseURL,
                    "--issuer-public-key", issuer, "--audience", audience] + arguments
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, folder + "/out.log", O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, folder + "/err.log", O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        let cArguments = argv.map { strdup($0) } + [nil]
        defer { cArguments.forEach { free($0) } }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, executable, &actions, nil, cArguments, environ)
        guard result == 0 else { throw POSIXError(POSIXErrorCode(rawValue: result) ?? .EINVAL) }
        self.pid = pid
    }

    /// Waits (20 s at most) until `/healthz` answers.
    func waitUntilListening() async throws {
        let http = AuditHTTP(base: url)
        do {
            try await eventually(within: .seconds(20), "the spawned relay answers /healthz") {
                (try? await http.call("GET", "/healthz"))?.status == 200
            }
        } catch {
            let log = (try? String(contentsOfFile: folder + "/err.log", encoding: .utf8)) ?? ""
            throw TestRelayError("the spawned relay did not start: \(error); its log: \(log.suffix(2_000))")
        }
    }

    /// SIGKILL, then reaps it and removes its folder. Killing twice kills once.
    func kill() {
        guard killed.withLock({ killed in defer { killed = true }; return !killed }) else { return }
        if Glibc.kill(pid, SIGKILL) == 0 {
            var status: Int32 = 0
            while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        }
        try? FileManager.default.removeItem(atPath: folder)
    }
}
