import Foundation
import MailslotTestSupport
import Testing
@testable import MailslotRelay
import MailslotWire

/// The WebSocket subscription: backlog, live push, acks, the window, redelivery, takeover, sends.
@Suite struct SubscriptionTests {
    @Test func backlogThenLiveThenAckErases() async throws {
        try await withTestRelay { relay in
            let alice = try await relay.signIn("alice").session
            let bob = try await relay.signIn("bob").session
            for n in 1...3 { try await relay.send(alice, to: "bob", id: messageID(n)) }

            let socket = TestSocket.open(relay, "bob", session: bob)
            let ready = try #require(try await socket.next())
            #expect(ready.type == "ready")
            #expect(ready.pending == 3)
            var delivered: [String] = []
            for _ in 1...3 {
                let frame = try #require(try await socket.next())
                #expect(frame.type == "message")
                #expect(frame.message?.author == "alice")
                #expect(frame.message?.envelope != nil)
                delivered.append(frame.message?.id ?? "")
            }
            #expect(delivered == [messageID(1), messageID(2), messageID(3)], "oldest first")

            try await relay.send(alice, to: "bob", id: messageID(4))
            let live = try #require(try await socket.next())
            #expect(live.type == "message" && live.message?.id == messageID(4), "pushed as it lands")

            for n in 1...4 {
                try await socket.send(.ack(messageID(n)))
                let acked = try #require(try await socket.next())
                #expect(acked.type == "acked" && acked.id == messageID(n))
            }
            try await socket.send(.ack(messageID(4)))
            #expect(try await socket.next()?.type == "acked", "a repeated ack is acknowledged too")
            let rows = try await relay.sqlite.pool.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM messages") }
            #expect(rows == 0, "nothing is left on the relay")
            await socket.close()
        }
    }

    @Test func theWindowBoundsUnackedDeliveriesAndUnackedOnesComeAgain() async throws {
        try await withTestRelay(configure: { $0.deliveryWindow = 2 }) { relay in
            let alice = try await relay.signIn("alice").session
            let bob = try await relay.signIn("bob").session
            for n in 1...5 { try await relay.send(alice, to: "bob", id: messageID(n)) }

            let first = TestSocket.open(relay, "bob", session: bob)
            #expect(try await first.next()?.pending == 5)
            #expect(try await first.next()?.message?.id == messageID(1))
            #expect(try await first.next()?.message?.id == messageID(2))
            #expect(try await first.next(timeout: .milliseconds(300)) == nil, "the window is full")
            try await first.send(.ack(messageID(1)))
            #expect(try await first.next()?.type == "acked")
            #expect(try await first.next()?.message?.id == messageID(3), "an ack makes room")
            await first.close()

            // 2 and 3 were delivered but never acked: they come again, first.
            let second = TestSocket.open(relay, "bob", session: bob)
            #expect(try await second.next()?.pending == 4)
            #expect(try await second.next()?.message?.id == messageID(2))
            #expect(try await second.next()?.message?.id == messageID(3))
            await second.close()
        }
    }

    /// Live messages are handed to the subscription in memory while it is caught up; more than
    /// that memory holds (here: 80 × 4 KiB, over its 256 KiB) must come from the store, in order,
    /// each once.
    @Test func liveMessagesBeyondWhatMemoryHoldsComeFromTheStoreInOrder() async throws {
        try await withTestRelay(configure: { $0.deliveryWindow = 1 }) { relay in
            let alice = try await relay.signIn("alice").session
            let bob = try await relay.signIn("bob").session
            let socket = TestSocket.open(relay, "bob", session: bob)
            #expect(try await socket.next()?.pending == 0)
            let count = Subscriber.Machine.Limits(window: 1).freshBytes / 4096 + 16
            for n in 1...count {
                #expect(try await relay.send(alice, to: "bob", id: messageID(n), envelope: randomBytes(4096)).status == 201)
            }
            var delivered: [String] = []
            var lastSeq: Int64 = 0
            while delivered.count < count {
                let frame = try #require(try await socket.next(), "message \(delivered.count + 1) of \(count)")
                guard frame.type == "message", let message = frame.message else { continue }  // the acks' answers
                delivered.append(message.id)
                #expect(message.seq ?? 0 > lastSeq, "in store order")
                lastSeq = message.seq ?? 0
                try await socket.send(.ack(message.id))
            }
            #expect(delivered == (1...count).map { messageID($0) })
            #expect(try await socket.next()?.type == "acked")
            #expect(try await socket.next(timeout: .milliseconds(300)) == nil, "nothing twice")
            await socket.close()
        }
    }

    /// A message its author unsends while it waits (in memory) behind a full window is not delivered.
    @Test func anUnsentMessageWaitingBehindAFullWindowIsNotDelivered() async throws {
        try await withTestRelay(configure: { $0.deliveryWindow = 1 }) { relay in
            let alice = try await relay.signIn("alice").session
            let bob = try await relay.signIn("bob").session
            let socket = try await TestSocket.subscribed(relay, "bob", session: bob)
            try await relay.send(alice, to: "bob", id: messageID(1))
            #expect(try await socket.next()?.message?.id == messageID(1))
            try await relay.send(alice, to: "bob", id: messageID(2))
            try await relay.send(alice, to: "bob", id: messageID(3))
            #expect(try await relay.call("DELETE", "/v1/users/bob/messages/\(messageID(2))", session: alice).status == 204)
            try await socket.send(.ack(messageID(1)))
            #expect(try await socket.next()?.type == "acked")
            #expect(try await socket.next()?.message?.id == messageID(3), "the unsent message is skipped")
            await socket.close()
        }
    }

    /// Many authors writing at once: one socket sees every message once, in the mailbox's order.
    @Test func concurrentSendsArriveOnceInMailboxOrder() async throws {
        try await withTestRelay { relay in
            let bob = try await relay.signIn("bob").session
            let socket = try await TestSocket.subscribed(relay, "bob", session: bob)
            var authors: [String] = []
            for n in 1...4 { authors.append(try await relay.signIn("author\(n)").session) }
            let perAuthor = 25
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (a, session) in authors.enumerated() {
                    group.addTask {
                        for k in 0..<perAuthor {
                            let status = try await relay.send(session, to: "bob", id: messageID(a * 1000 + k)).status
                            #expect(status == 201)
                        }
                    }
                }
                try await group.waitForAll()
            }
            var seen = Set<String>()
            var lastSeq: Int64 = 0
            for _ in 0..<(authors.count * perAuthor) {
                let message = try #require(try await socket.next()?.message)
                #expect(seen.insert(message.id).inserted, "delivered once")
                #expect(message.seq ?? 0 > lastSeq, "in the mailbox's order")
                lastSeq = message.seq ?? 0
            }
            #expect(seen.count == authors.count * perAuthor)
            #expect(try await socket.next(timeout: .milliseconds(300)) == nil, "nothing more")
            await socket.close()
        }
    }

    @Test func framesSentWithoutWaitingAreStoredAndAnsweredInTheirOrder() async throws {
        try await withTestRelay { relay in
            let bob = try await relay.signIn("bob").session
            let socket = try await TestSocket.subscribed(relay, "bob", session: bob)
            // More frames than the relay works on at once, without waiting for any answer; a bad
            // one and a refused one among them.
            let count = Subscriptions.maxQueuedAnswers * 3
            var expected: [String] = []
            for n in 0..<count {
                switch n {
                case 40:
                    try await socket.send(.send(ref: "r\(n)", to: "carol", id: "short", envelope: randomBytes(512)))
                    expected.append("error r\(n)")
                case 41:
                    try await socket.send(.ack(messageID(99_999)))
                    expected.append("acked \(messageID(99_999))")
                default:
                    try await socket.send(.send(ref: "r\(n)", to: "carol", id: messageID(n), envelope: randomBytes(512)))
                    expected.append("sent r\(n)")
                }
            }
            var answers: [String] = []
            for _ in 0..<count {
                let frame = try #require(try await socket.next())
                answers.append("\(frame.type) \(frame.ref ?? frame.id ?? "")")
            }
            #expect(answers == expected, "one answer per frame, in frame order")
            // Carol's mailbox holds them in the order they were sent.
            let ids = try await relay.sqlite.pool.read { db in
                try String.fetchAll(db, sql: "SELECT id FROM messages WHERE recipient = 'carol' ORDER BY seq")
            }
            #expect(ids == (0..<count).filter { $0 != 40 && $0 != 41 }.map { messageID($0) })
            await socket.close()
        }
    }

    @Test func aNewerSubscriptionTakesOver() async throws {
        try await withTestRelay { relay in
            let bob = try await relay.signIn("bob").session
            let older = try await TestSocket.subscribed(relay, "bob", session: bob)
            let newer = try await TestSocket.subscribed(relay, "bob", session: bob)
            #expect(await older.closeCode() == CloseCode.replaced)
            let alice = try await relay.signIn("alice").session
            try await relay.send(alice, to: "bob", id: messageID(1))
            #expect(try await newer.next()?.message?.id == messageID(1))
            await newer.close()
        }
    }

    @Test func sendsTravelOnTheSameSocketWithTheSameRules() async throws {
        try await withTestRelay { relay in
            let bob = try await relay.signIn("bob").session
            let carol = try await relay.signIn("carol").session
            let socket = try await TestSocket.subscribed(relay, "bob", session: bob)
            let envelope = randomBytes(512)
            try await socket.send(.send(ref: "r1", to: "carol", id: messageID(1), envelope: envelope))
            let sent = try #require(try await socket.next())
            #expect(sent.type == "sent" && sent.ref == "r1" && sent.created == true)
            #expect(sent.message?.author == "bob")
            #expect(sent.message?.envelope == nil, "the author does not get the envelope back")
            try await socket.send(.send(ref: "r2", to: "carol", id: messageID(1), envelope: envelope))
            let retry = try #require(try await socket.next())
            #expect(retry.type == "sent" && retry.created == false)
            try await socket.send(.send(ref: "r3", to: "carol", id: messageID(1), envelope: randomBytes(512)))
            #expect(try await socket.next()?.problem?.code == .conflict)
            try await socket.send(.send(ref: "r4", to: "carol", id: "short", envelope: envelope))
            let invalid = try #require(try await socket.next())
            #expect(invalid.type == "error" && invalid.ref == "r4" && invalid.problem?.code == .invalidMessageID)
            // The owner of another mailbox cannot ack (erase) carol's message through this socket.
            try await socket.send(.ack(messageID(1)))
            #expect(try await socket.next()?.type == "acked", "an ack only ever touches the socket owner's own mailbox")
            let list = try await relay.call("GET", "/v1/users/carol/messages", session: carol)
            #expect((list.json["messages"] as? [[String: Any]])?.first?["id"] as? String == messageID(1), "carol's message is intact")
            await socket.close()
        }
    }

    @Test func refusedSubscriptionsSayWhyThenClose() async throws {
        try await withTestRelay { relay in
            let carol = try await relay.signIn("carol").session
            let anonymous = TestSocket.open(relay, "bob", session: nil)
            #expect(try await anonymous.next()?.problem?.code == .unauthenticated)
            #expect(await anonymous.closeCode() == 4401)
            let stranger = TestSocket.open(relay, "bob", session: carol)
            #expect(try await stranger.next()?.problem?.code == .forbidden)
            #expect(await stranger.closeCode() == 4403)
            let invalid = TestSocket.open(relay, "b..%20b", session: carol)
            #expect(try await invalid.next()?.problem?.code == .invalidUID)
            #expect(await invalid.closeCode() == 4400)
        }
    }

    @Test func anOversizedFrameClosesTheSocketAndLosesNothing() async throws {
        try await withTestRelay(configure: { $0.maxEnvelopeBytes = 512 }) { relay in  // frames up to 512 × 4/3 + 4096 = 4778 bytes
            #expect(relay.relay.configuration.maxFrameBytes == 4778)
            let bob = try await relay.signIn("bob").session
            let alice = try await relay.signIn("alice").session
            try await relay.send(alice, to: "bob", id: messageID(1))
            let socket = try await TestSocket.subscribed(relay, "bob", session: bob)
            #expect(try await socket.next()?.type == "message")
            try await socket.send(text: #"{"type":"ack","id":""# + String(repeating: "x", count: 8000) + #""}"#)
            _ = await socket.closeCode()
            #expect(try await socket.next(timeout: .milliseconds(200)) == nil, "the relay closed the socket")
            let list = try await relay.call("GET", "/v1/users/bob/messages", session: bob)
            #expect((list.json["messages"] as? [Any])?.count == 1, "the unacked message is still there for the next subscription")
        }
    }

    @Test func signingOutEndsAnOpenSubscription() async throws {
        try await withTestRelay(configure: { $0.sessionCheckInterval = 0.1 }) { relay in
            let bob = try await relay.signIn("bob").session
            let socket = try await TestSocket.subscribed(relay, "bob", session: bob)
            #expect(try await relay.call("DELETE", "/v1/sessions/current", session: bob).status == 204)
            #expect(await socket.closeCode() == CloseCode.sessionEnded)
        }
    }

    @Test func anExpiringSessionEndsAnIdleSubscription() async throws {
        // Long enough to open the socket on a machine loaded by the parallel suites, short enough
        // to end within the wait for the close.
        try await withTestRelay(configure: { $0.sessionLifetime = 12; $0.sessionCheckInterval = 0.5 }) { relay in
            let socket = TestSocket.open(relay, "bob", session: try await relay.signIn("bob").session)
            #expect(try await socket.next()?.type == "ready")
            #expect(await socket.closeCode(timeout: .seconds(30)) == CloseCode.sessionEnded)
        }
    }

    @Test func malformedFramesGetErrorsAndPersistentGarbageIsDisconnected() async throws {
        try await withTestRelay { relay in
            let bob = try await relay.signIn("bob").session
            let socket = try await TestSocket.subscribed(relay, "bob", session: bob)
            try await socket.send(text: #"{"type":"dance"}"#)
            #expect(try await socket.next()?.problem?.code == .badRequest)
            try await socket.send(text: #"{"type":"send","ref":"","to":"carol","id":"01KF0000000000000000000001","envelope":"AAAA"}"#)
            let noRef = try #require(try await socket.next())
            #expect(noRef.problem?.code == .badRequest && noRef.ref == nil, "an unusable ref is not echoed")
            for text in Array(repeating: "{not json", count: 7) + [#"{"type":"ack"}"#, #"{"type":"send","ref":"r"}"#, #"{"type":"ack","type":"send"}"#] {
                try await socket.send(text: text)
                #expect(try await socket.next()?.problem?.code == .invalidJSON)
            }
            #expect(await socket.closeCode() == CloseCode.protocolViolation)
        }
    }
}
