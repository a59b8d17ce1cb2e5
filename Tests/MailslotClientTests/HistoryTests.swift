import Foundation
@testable import MailslotClient
import MailslotTestSupport
import MailslotWire
import Testing

/// History in the order it says (issue 26 item 8): oldest first by when this client stored each
/// message, not by message id (ids carry their sender's clock); rejected messages with when.
@Suite struct HistoryTests {
    @Test func historyAndTimelineAreInStoredOrderNotIdOrder() async throws {
        // One pending message per mailbox: alice's second message waits in her outbox.
        try await withTestRelay(configure: { $0.maxPendingPerMailbox = 1 }) { relay in
            let alice = try relay.client("alice"), bob = try relay.client("bob"), carol = try relay.client("carol")
            for client in [alice, bob, carol] { try await client.signIn() }
            try await alice.send(text: "one", to: "bob")
            guard case .queued(let two, _) = try await alice.send(text: "two", to: "bob") else { Issue.record("should wait"); return }
            #expect(try await bob.receive().map(\.message.payload.text) == ["one"])
            guard case .sent(let three) = try await carol.send(text: "three", to: "bob") else { Issue.record("not sent"); return }
            #expect(try await bob.receive().map(\.message.payload.text) == ["three"])
            #expect(try await alice.flush(now: Date().addingTimeInterval(3600)) == 0)
            #expect(try await bob.receive().map(\.message.payload.text) == ["two"])
            #expect(two < three, "received last, with the earlier id")

            #expect(try await bob.history().map(\.message.payload.text) == ["one", "three", "two"])
            #expect(try await bob.history(from: "alice").map(\.message.payload.text) == ["one", "two"])
            let timeline = try await bob.timeline()
            #expect(timeline.map(\.id) == (try await bob.history().map(\.id)))
            #expect(zip(timeline, timeline.dropFirst()).allSatisfy { $0.storedAt <= $1.storedAt })

            // Alice's side: what she wrote, in the order she wrote it, with where it stands.
            let sent = try await alice.timeline(with: "bob")
            #expect(sent.map(\.id).last == two)
            guard case .sent(let last) = sent.last else { Issue.record("a sent message"); return }
            #expect(last.state == .sent && last.message?.payload.text == "two")
        }
    }

    @Test func rejectedMessagesSayWhoWhyAndWhen() async throws {
        try await withTestRelay { relay in
            let bob = try relay.client("bob")
            try await bob.signIn()
            let before = Date()
            let id = messageID()
            #expect(try await relay.send(try await relay.signIn("mallory").session, to: "bob", id: id).status == 201)
            #expect(try await bob.receive().isEmpty)
            let rejected = try #require(try await bob.rejected().first)
            #expect(rejected.id == id && rejected.author == "mallory" && !rejected.reason.code.isEmpty)
            #expect(rejected.receivedAt >= before.addingTimeInterval(-1) && rejected.receivedAt <= Date())
        }
    }
}
