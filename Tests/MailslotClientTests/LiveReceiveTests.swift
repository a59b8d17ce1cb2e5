import Foundation
import MailslotRelay
import MailslotTestSupport
import MailslotWire
import Testing
@testable import MailslotClient

@Suite struct LiveReceiveTests {
    /// A relay that cannot serve (4503: its database is unreachable) makes the client wait longer
    /// each time, as after a failure; a replaced or ordinary close starts afresh.
    @Test func aRelayThatCannotServeIsRetriedWithGrowingWaits() {
        var failures = 0
        for expected in 1...4 {
            failures = MailslotClient.failures(afterClose: 4503, previous: failures)
            #expect(failures == expected)
        }
        #expect(MailslotClient.failures(afterClose: 4000, previous: failures) == 0)
        #expect(MailslotClient.failures(afterClose: 4429, previous: 3) == 0)
        #expect(MailslotClient.failures(afterClose: 4599, previous: 3) == 4)
    }

    @Test func theStreamYieldsStoredMessagesAndAcksThem() async throws {
        try await withTestRelay { relay in
            let alice = try relay.client("alice"), bob = try relay.client("bob")
            try await alice.signIn()
            try await bob.signIn()
            try await alice.send(text: "before", to: "bob")  // backlog

            let stream = bob.messages()
            var iterator = stream.makeAsyncIterator()
            #expect(try await iterator.next()?.message.payload.text == "before")
            try await alice.send(text: "live", to: "bob")
            try await alice.send(Payload(typing: Typing(active: true)), type: .typing, to: "bob")
            #expect(try await iterator.next()?.message.payload.text == "live")
            #expect(try await iterator.next()?.message.type == .typing, "typing is shown…")
            #expect(try await bob.history().map(\.message.type) == [.text, .text], "…but never stored")

            // Everything was acknowledged: the relay keeps nothing.
            var empty = false
            for _ in 0..<100 where !empty {
                empty = try await relay.pending("bob") == 0
                if !empty { try await Task.sleep(for: .milliseconds(20)) }
            }
            #expect(empty)
        }
    }

    /// A relay may accept envelopes up to 1 MiB: its largest `message` frame still reaches the client.
    @Test func theLargestEnvelopeAnyRelayTakesArrivesLive() async throws {
        try await withTestRelay(configure: { configuration in
            configuration.maxEnvelopeBytes = Envelope.maximumSize
        }) { relay in
            let alice = try relay.client("alice"), bob = try relay.client("bob")
            try await alice.signIn()
            try await bob.signIn()
            let text = String(repeating: "x", count: 600 * 1024)  // sealed into the 1 MiB size class
            guard case .sent = try await alice.send(text: text, to: "bob") else { Issue.record("not sent"); return }
            // Bounded: a client that refuses the frame reconnects for ever instead of failing.
            let received = await withTaskGroup(of: String?.self) { group in
                group.addTask {
                    var iterator = bob.messages().makeAsyncIterator()
                    return try? await iterator.next()?.message.payload.text
                }
                group.addTask {
                    try? await Task.sleep(for: .seconds(20))
                    return nil
                }
                let first = await group.next() ?? nil
                group.cancelAll()
                return first
            }
            #expect(received == text, "the 1 MiB envelope arrived within 20 s")
        }
    }

    @Test func aCrashBetweenStoreAndAckLosesNothingAndDuplicatesNothing() async throws {
        try await withTestRelay { relay in
            let alice = try relay.client("alice"), bob = try relay.client("bob")
            try await alice.signIn()
            try await bob.signIn()
            guard case .sent(let id) = try await alice.send(text: "exactly once", to: "bob") else { Issue.record("not sent"); return }

            // Bob's client stores the message, then "crashes" before its ack reaches the relay.
            #expect(try await bob.acceptFirstWithoutAck().message?.id == id)
            #expect(try await relay.pending("bob") == 1, "not acked: still on the relay")

            // After the restart the relay delivers it again; the store drops the duplicate and acks it.
            let restarted = try relay.client("bob")
            #expect(try await restarted.receive().isEmpty, "not yielded twice")
            #expect(try await restarted.history().map(\.id) == [id], "stored once")
            #expect(try await relay.pending("bob") == 0, "and now erased from the relay")
        }
    }
}
