import Foundation
import Logging
import MailslotAudit
import MailslotTestSupport
import MailslotWire
import PostgresNIO
import Synchronization
import Testing
@testable import MailslotRelay

/// Several relays on one store: the notification format, the hub's generations, and (under
/// `tools/postgres run`) relays sharing one PostgreSQL database — live delivery across nodes,
/// takeover, unsend, refresh reuse, a lost listening connection and a database restart.
@Suite(.serialized)
struct ClusterTests {
    // MARK: The notification format

    @Test func notificationsRoundTripAndRefuseWhatTheyDoNotKnow() throws {
        let node = ClusterNotification.newNode()
        #expect(node.count == 16)
        for event in [ClusterEvent.changed(mailboxes: ["alice", "bob.b-1_x"]), .recheckAll, .subscribed(mailbox: "carol", generation: 42),
                      .prekeysLow(mailbox: "dave", count: 24), .prekeysLow(mailbox: "dave", count: 0)] {
            let payload = ClusterNotification(node: node, event: event).payload
            #expect(ClusterNotification(payload: payload) == ClusterNotification(node: node, event: event), "\(payload)")
        }
        #expect(ClusterNotification(node: node, event: .changed(mailboxes: ["a"])).payload == "m \(node)\na")
        // Too many names for one payload: a re-check of everything instead, never a payload PostgreSQL refuses.
        let many = (0..<200).map { "user-\($0)-" + String(repeating: "x", count: 100) }
        let large = ClusterNotification(node: node, event: .changed(mailboxes: many)).payload
        #expect(large == "a \(node)")
        let fits = (0..<60).map { "u\($0)" + String(repeating: "y", count: 120) }
        let fitting = ClusterNotification(node: node, event: .changed(mailboxes: fits)).payload
        #expect(fitting.utf8.count <= ClusterNotification.maxPayloadBytes && fitting.hasPrefix("m "))
        // A send to many's mailboxes: split into as many `m` payloads as needed, each within the
        // limit, every mailbox in exactly one, in order — never the `a` of a re-check of everything.
        let members = (0..<1000).map { "member-\($0)-" + String(repeating: "z", count: 29) }
        let split = ClusterNotification.changed(node: node, mailboxes: members)
        #expect(split.count > 1 && split.allSatisfy { $0.utf8.count <= ClusterNotification.maxPayloadBytes })
        let announced = split.flatMap { payload -> [String] in
            guard case .changed(let mailboxes) = ClusterNotification(payload: payload)?.event else { return [] }
            return mailboxes
        }
        #expect(announced == members)
        #expect(ClusterNotification.changed(node: node, mailboxes: []).isEmpty)
        #expect(ClusterNotification.changed(node: node, mailboxes: ["a"]) == ["m \(node)\na"])
        for bad in ["", "m", "m \(node)", "x \(node)", "a NODE", "a \(node) extra", "s \(node) 0 bob", "s \(node) 01 bob",
                    "s \(node) 5 bo b", "s \(node) -5 bob", "m \(node)\n", "m \(node)\nbad uid", "a \(node.uppercased())",
                    "p \(node) -1 bob", "p \(node) 024 bob", "p \(node) 24", "p \(node) 24 bo b"] {
            #expect(ClusterNotification(payload: bad) == nil, "\(bad)")
        }
    }

    // MARK: The hub's generations

    @Test func theHighestGenerationIsTheLiveSubscriptionWhereverItBegan() {
        let hub = MailboxHub()
        let ended = Shared<[String]>([])
        final class Ending: MailboxListener {
            let name: String, log: Shared<[String]>
            init(_ name: String, _ log: Shared<[String]>) { (self.name, self.log) = (name, log) }
            func committed(_ message: StoredMessage) {}
            func erased(_ id: String) {}
            func recheck() {}
            func ended() { log.update { $0.append(name) } }
            func prekeysLow(_ count: Int) {}
        }
        func subscribe(_ name: String, _ generation: Int64?) -> MailboxHub.Subscription {
            hub.subscribe("bob", generation: generation, listener: Ending(name, ended)).0
        }
        let first = subscribe("first", 10)
        // Drawn earlier, registered later: it is already the older one.
        let late = subscribe("late", 9)
        #expect(late.isEnded && !first.isEnded && ended.value == ["late"])
        // Another node's older subscription changes nothing; its newer one ends ours.
        hub.handle(.subscribed(mailbox: "bob", generation: 5))
        #expect(!first.isEnded)
        hub.handle(.subscribed(mailbox: "bob", generation: 11))
        #expect(first.isEnded && ended.value == ["late", "first"] && hub.count == 0)
        // Announced elsewhere before ours registered (its generation drawn earlier): ours ends at once.
        hub.handle(.subscribed(mailbox: "carol", generation: 20))
        let carol = hub.subscribe("carol", generation: 19).0
        #expect(carol.isEnded && hub.count == 0)
        let newer = hub.subscribe("carol", generation: 21).0
        #expect(!newer.isEnded && hub.count == 1)
    }

    /// Another node's low-water signal reaches the mailbox's subscription here, and only it.
    @Test func anotherNodesLowWaterSignalReachesTheOwnersSubscription() {
        let hub = MailboxHub()
        let bob = RecordingListener(), carol = RecordingListener()
        _ = hub.subscribe("bob", generation: 1, listener: bob)
        _ = hub.subscribe("carol", generation: 1, listener: carol)
        hub.handle(.prekeysLow(mailbox: "bob", count: 24))
        hub.handle(.prekeysLow(mailbox: "dave", count: 24))
        #expect(bob.heard.value == ["prekeys 24"] && carol.heard.value.isEmpty)
    }

    @Test func anotherNodesMessagesMakeTheSubscriptionReadTheStoreAgain() throws {
        let hub = MailboxHub()
        let bob = RecordingListener()
        _ = hub.subscribe("bob", listener: bob)
        hub.handle(.changed(mailboxes: ["carol"]))
        #expect(bob.heard.value.isEmpty, "another mailbox: nothing to do")
        hub.handle(.changed(mailboxes: ["carol", "bob"]))
        #expect(bob.heard.value == ["recheck"], "what this node kept in memory is not all there is: read the store")
        hub.handle(.recheckAll)
        #expect(bob.heard.value == ["recheck", "recheck"])
    }

    // MARK: Relays on one PostgreSQL database

    /// Two relays (same issuer) on one new database, and its URL.
    private func withTwoRelays(_ body: (TestRelay, TestRelay, String) async throws -> Void) async throws {
        try await withTestRelay(store: .cluster(2)) { a in
            try await body(a, a.peers[0], try #require(a.databaseURL))
        }
    }

    @Test(.enabled(if: TestDatabase.unavailable == nil, "MAILSLOT_TEST_DATABASE_URL is not set: run the tests under tools/postgres run"))
    func aMessageSentThroughOneRelayReachesASubscriptionOnAnotherLiveAndInOrder() async throws {
        try await withTwoRelays { a, b, _ in
            let alice = try await a.signIn("alice").session
            let bob = try await b.signIn("bob").session
            #expect(try await a.send(alice, to: "bob", id: messageID(0)).status == 201)
            let socket = try await TestSocket.subscribed(b, "bob", session: bob)
            #expect(try await socket.next()?.message?.id == messageID(0), "the backlog")
            try await socket.send(.ack(messageID(0)))
            // Live: no reconnect, no poll; a burst keeps its order.
            let sent = (1...40).map { messageID($0) }
            for id in sent { #expect(try await a.send(alice, to: "bob", id: id).status == 201) }
            #expect(try await receive(sent.count, on: socket) == sent)
            #expect(a.counter("mailslot_cluster_notifications_sent_total") >= 1, "node A announced its commits")
            #expect(a.counter("mailslot_cluster_notifications_sent_total") <= 42, "at most one per commit batch, and one per subscription")
            #expect(b.counter("mailslot_cluster_notifications_received_total") >= 1)
            await socket.close()
        }
    }

    /// An unsend through one node of a message waiting for a subscription on the other: it is
    /// never delivered, and what was sent before and after it is, in order.
    @Test(.enabled(if: TestDatabase.unavailable == nil, "MAILSLOT_TEST_DATABASE_URL is not set: run the tests under tools/postgres run"))
    func anUnsendThroughOneRelayKeepsTheMessageFromASubscriptionOnAnother() async throws {
        let issuer = IdentityKeyPair()
        try await TestDatabase.with { url in
            try await withTestRelay(issuer: issuer, configure: { $0.databaseURL = url }) { a in
                try await withTestRelay(issuer: issuer, configure: { $0.databaseURL = url; $0.deliveryWindow = 1 }) { b in
                    let alice = try await a.signIn("alice").session
                    let bob = try await b.signIn("bob").session
                    let socket = try await TestSocket.subscribed(b, "bob", session: bob)
                    for n in 1...3 { #expect(try await a.send(alice, to: "bob", id: messageID(n)).status == 201) }
                    #expect(try await socket.next(timeout: .seconds(10))?.message?.id == messageID(1))
                    // The window (1) is full: 2 and 3 wait. 2 is unsent through node A.
                    #expect(try await a.call("DELETE", "/v1/users/bob/messages/\(messageID(2))", session: alice).status == 204)
                    try await socket.send(.ack(messageID(1)))
                    var delivered: [String] = []
                    while delivered.count < 1, let frame = try await socket.next(timeout: .seconds(10)) {
                        if let message = frame.message { delivered.append(message.id) }
                    }
                    #expect(delivered == [messageID(3)])
                    await socket.close()
                }
            }
        }
    }

    /// A claim through one relay that takes the owner's prekeys below the low-water mark reaches
    /// the owner's subscription on the other relay as one `prekeys` frame (spec/protocol.md §8.4).
    @Test(.enabled(if: TestDatabase.unavailable == nil, "MAILSLOT_TEST_DATABASE_URL is not set: run the tests under tools/postgres run"))
    func aClaimThroughOneRelayTellsTheOwnersSubscriptionOnAnother() async throws {
        try await withTwoRelays { a, b, _ in
            let bob = try await b.signIn("bob").session, alice = try await a.signIn("alice").session
            let mark = PrekeyCount.lowWater
            let prekeys = (1...UInt32(mark + 1)).map { Prekey(id: $0, key: MailboxKeyPair().publicKey) }
            #expect(try await b.call("POST", "/v1/users/bob/prekeys", session: bob, json: PrekeyUpload(prekeys: prekeys)).status == 200)
            let socket = try await TestSocket.subscribed(b, "bob", session: bob)
            #expect(try await a.call("POST", "/v1/users/bob/prekeys/claim", session: alice, body: [String: Any]()).status == 200)
            #expect(try await socket.next(timeout: .milliseconds(500)) == nil, "at the mark: nothing")
            #expect(try await a.call("POST", "/v1/users/bob/prekeys/claim", session: alice, body: [String: Any]()).status == 200)
            #expect(try await socket.next(timeout: .seconds(10)) == .prekeys(mark - 1), "told across relays")
            #expect(try await a.call("POST", "/v1/users/bob/prekeys/claim", session: alice, body: [String: Any]()).status == 200)
            #expect(try await socket.next(timeout: .milliseconds(500)) == nil, "once per crossing")
            await socket.close()
        }
    }

    /// A pool whose every connection is busy is load, not an outage: uses that waited the lease
    /// timeout while others got connections fail with `busy`, each on its own, and the pool does
    /// not start failing every use at once (which answered a bystander `503` for a second).
    @Test(.enabled(if: TestDatabase.unavailable == nil, "MAILSLOT_TEST_DATABASE_URL is not set: run the tests under tools/postgres run"))
    func aBusyPoolIsNotAnOutage() async throws {
        try await TestDatabase.with { url in
            let store = try await PostgresStore.open(url: url, logger: TestRelay.logger)
            // 12 connections' worth of queries longer than the lease timeout: the 13th use onwards
            // waits while some connections are handed on.
            let uses = PostgresStore.poolSize * 12
            let outcomes = await withTaskGroup(of: String.self) { group in
                for _ in 0..<uses {
                    group.addTask {
                        do {
                            try await store.pool.withConnection { connection in
                                _ = try await connection.query("SELECT pg_sleep(0.4)", logger: TestRelay.logger)
                            }
                            return "done"
                        } catch StoreFailure.busy {
                            return "busy"
                        } catch {
                            return "\(error)"
                        }
                    }
                }
                var outcomes: [String: Int] = [:]
                for await outcome in group { outcomes[outcome, default: 0] += 1 }
                return outcomes
            }
            #expect(outcomes["busy", default: 0] > 0 && outcomes["done", default: 0] > 0, "\(outcomes)")
            #expect(outcomes["busy", default: 0] + outcomes["done", default: 0] == uses, "nothing answered as an outage: \(outcomes)")
            #expect(!store.pool.recentlyFailed, "no fail-fast interval")
            #expect(try await store.pendingCount(recipient: "bob", now: 0) == 0, "the next use is served")
            await store.close()
        }
    }

    @Test(.enabled(if: TestDatabase.unavailable == nil, "MAILSLOT_TEST_DATABASE_URL is not set: run the tests under tools/postgres run"))
    func aNewerSubscriptionOnAnyNodeReplacesTheOlder() async throws {
        try await withTwoRelays { a, b, _ in
            let bob = try await a.signIn("bob").session
            let first = try await TestSocket.subscribed(a, "bob", session: bob)
            let second = try await TestSocket.subscribed(b, "bob", session: bob)
            #expect(await first.closeCode() == 4000, "replaced by the subscription on the other node")
            // And back: the newest, wherever it is, is the live one.
            let third = try await TestSocket.subscribed(a, "bob", session: bob)
            #expect(await second.closeCode() == 4000)
            let alice = try await b.signIn("alice").session
            #expect(try await b.send(alice, to: "bob", id: messageID(1)).status == 201)
            #expect(try await third.next(timeout: .seconds(10))?.message?.id == messageID(1))
            await third.close()
        }
    }

    @Test(.enabled(if: TestDatabase.unavailable == nil, "MAILSLOT_TEST_DATABASE_URL is not set: run the tests under tools/postgres run"))
    func aRefreshTokenSpentOnOneNodeIsReuseOnTheOther() async throws {
        try await withTwoRelays { a, b, _ in
            let (session, refresh) = try await a.signIn("bob")
            let rotated = try await b.call("POST", "/v1/sessions/refresh", body: ["refresh": refresh])
            #expect(rotated.status == 201)
            let replay = try await a.call("POST", "/v1/sessions/refresh", body: ["refresh": refresh])
            #expect(replay.problem == .refreshReused)
            // The whole family is revoked, on both nodes.
            let newSession = try #require(rotated.json["session"] as? String)
            #expect(try await b.call("GET", "/v1/users/bob/messages", session: newSession).status == 401)
            #expect(try await a.call("GET", "/v1/users/bob/messages", session: session).status == 401)
        }
    }

    /// The black-box audit (`mailslot-audit`, every group) against one relay of a pair sharing a
    /// database: what holds for a single relay holds on PostgreSQL beside another node.
    @Test(.enabled(if: TestDatabase.unavailable == nil, "MAILSLOT_TEST_DATABASE_URL is not set: run the tests under tools/postgres run"))
    func aRelayOfAPairPassesTheWholeAudit() async throws {
        let issuer = IdentityKeyPair()
        var quiet = Logger(label: "cluster-audit")
        quiet.logLevel = .critical
        try await TestDatabase.with { url in
            // The audit's floods need small rate limits, and its silent sockets a short header timeout.
            let configure: (inout RelayConfiguration) -> Void = {
                $0.databaseURL = url
                $0.createRate = 20
                $0.createBurst = 60
                $0.headerTimeout = 2
            }
            try await withTestRelay(issuer: issuer, logger: quiet, configure: configure) { a in
                try await withTestRelay(issuer: issuer, logger: quiet, configure: configure) { _ in
                    let outcomes = await Audit(.init(relay: a.url, issuer: issuer, audience: a.audience)).run(Audit.Group.allCases)
                    let failed = outcomes.filter { !$0.passed }
                    #expect(failed.isEmpty, "\(failed)")
                    #expect(outcomes.filter { !$0.skipped }.count >= 40)
                }
            }
        }
    }

    /// The listening connection dies (terminated by the server): the node listens again and
    /// re-reads every live subscription, so what was notified meanwhile still arrives.
    @Test(.enabled(if: TestDatabase.unavailable == nil, "MAILSLOT_TEST_DATABASE_URL is not set: run the tests under tools/postgres run"))
    func aLostListeningConnectionDelaysButNeverLosesADelivery() async throws {
        try await withTwoRelays { a, b, url in
            let alice = try await a.signIn("alice").session
            let bob = try await b.signIn("bob").session
            let socket = try await TestSocket.subscribed(b, "bob", session: bob)
            let before = b.counter("mailslot_cluster_rechecks_total")
            let terminated = try await TestDatabase.admin("""
                SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                WHERE application_name = '\(PostgresNotifications.applicationName)' AND datname = '\(TestDatabase.name(of: url))'
                """)
            #expect(terminated == 2, "both nodes' listeners")
            let sent = (1...5).map { messageID($0) }
            for id in sent { #expect(try await a.send(alice, to: "bob", id: id).status == 201) }
            #expect(try await receive(sent.count, on: socket) == sent)
            try await eventually("node B listened again and re-read its subscriptions") {
                b.counter("mailslot_cluster_rechecks_total") > before
            }
            await socket.close()
        }
    }

    /// The database stops: writes and readiness answer 503 `unavailable` with Retry-After,
    /// nothing 2xx; the relays keep running and recover by themselves when it is back, and a
    /// subscription opened before the outage carries on.
    @Test(.enabled(if: TestDatabase.unavailable == nil && TestDatabase.pgctl != nil,
                   "run the tests under tools/postgres run (MAILSLOT_TEST_PGCTL restarts the cluster)"))
    func theRelaysAnswer503WhileTheDatabaseIsDownAndRecoverWithoutARestart() async throws {
        try await withTwoRelays { a, b, _ in
            let alice = try await a.signIn("alice").session
            let bob = try await b.signIn("bob").session
            let carol = try await b.signIn("carol").session
            let socket = try await TestSocket.subscribed(b, "bob", session: bob)
            try await TestDatabase.pgctl(["stop", "-m", "fast"])
            var restarted = false
            do {
                let send = try await a.send(alice, to: "bob", id: messageID(1))
                #expect(send.status == 503 && send.problem == .unavailable)
                #expect(send.headers["retry-after"] == "2")
                #expect(try await a.call("GET", "/readyz").status == 503)
                let ack = try await b.call("DELETE", "/v1/users/bob/messages/\(messageID(9))", session: bob)
                #expect(ack.status == 503 && ack.problem == .unavailable)
                #expect(try await a.call("GET", "/healthz").status == 200, "the relay itself keeps running")
                // Over the socket: an ack the store cannot carry out is answered, not dropped.
                try await socket.send(.ack(messageID(9)))
                let refusedAck = try #require(try await socket.next(timeout: .seconds(10)))
                #expect(refusedAck.type == "error" && refusedAck.problem?.code == .unavailable)
                // A subscription opened meanwhile is told why, and closed with 4503.
                let opened = TestSocket.open(b, "carol", session: carol)
                let first = try await opened.next(timeout: .seconds(10))
                #expect(first?.type == "error" && first?.problem?.code == .unavailable)
                #expect(await opened.closeCode() == 4503)
                try await TestDatabase.pgctl(["start", "-w"])
                restarted = true
            } catch {
                if !restarted { try? await TestDatabase.pgctl(["start", "-w"]) }
                throw error
            }
            // Recovered without a restart: bounded wait for readiness, then the same send succeeds.
            try await eventually(within: .seconds(30), "node A is ready again") { try await a.call("GET", "/readyz").status == 200 }
            #expect(try await a.send(alice, to: "bob", id: messageID(1)).status == 201)
            #expect(try await receive(1, on: socket) == [messageID(1)], "the subscription opened before the outage carries on")
            await socket.close()
        }
    }
}

/// Up to `count` messages from `socket`, each acknowledged as it comes; stops early after ten
/// seconds without a frame.
private func receive(_ count: Int, on socket: TestSocket) async throws -> [String] {
    var received: [String] = []
    while received.count < count, let frame = try await socket.next(timeout: .seconds(10)) {
        if let message = frame.message {
            received.append(message.id)
            try await socket.send(.ack(message.id))
        }
    }
    return received
}
