import Foundation
@testable import MailslotRelay
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

    /// An ack the relay could not carry out (5xx) is sent again after waits that double from half a
    /// second, at least the relay's `retry_after`, at most 30 s, six times at most; a refusal, an id
    /// never acked here, and one confirmed meanwhile are not.
    @Test func anAckTheRelayCouldNotCarryOutIsSentAgainWithGrowingWaits() {
        var acks = AckRetries()
        let unavailable = Problem(.unavailable, retryAfter: 1)
        #expect(acks.retry(after: unavailable, id: "m1") == nil, "never acked on this subscription")
        acks.sent("m1")
        let waits = (0..<8).map { _ in acks.retry(after: Problem(.unavailable), id: "m1", random: 0) }
        #expect(waits == [.milliseconds(500), .seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(16), nil, nil])
        #expect(acks.count == 0, "given up: the next subscription brings the message again")

        acks.sent("m2")
        #expect(acks.retry(after: unavailable, id: "m2", random: 0) == .seconds(1), "the relay's retry_after is a floor")
        #expect(acks.retry(after: Problem(.storageFull), id: "m2", random: 0.999) == .milliseconds(750), "jitter shortens by up to a quarter")
        acks.confirmed("m2")
        #expect(acks.retry(after: unavailable, id: "m2") == nil, "confirmed meanwhile")

        acks.sent("m3")
        #expect(acks.retry(after: Problem(.forbidden), id: "m3") == nil, "a refusal is final")
        #expect(acks.count == 0)
        acks.sent("m4")
        for _ in 0..<10 { _ = acks.retry(after: Problem(.internalError, retryAfter: 120), id: "m4", random: 0) }
        acks.sent("m5")
        #expect(acks.retry(after: Problem(.internalError, retryAfter: 120), id: "m5", random: 0) == .seconds(30), "at most 30 s")
    }

    /// A listening client keeps its one-time prekeys topped up while another account claims
    /// them: the claim that takes the supply below the low-water mark makes the relay send a
    /// `prekeys` frame (spec/protocol.md §8.4), and the client uploads more at once — not only at
    /// its next connect, sign-in or receive.
    @Test func aListeningClientTopsUpItsPrekeysAsOthersClaimThem() async throws {
        try await withTestRelay(configure: { $0.prekeyMailboxBurst = 1000; $0.prekeyClaimBurst = 1000 }) { relay in
            let bob = try relay.client("bob")
            try await bob.signIn()
            let api = RelayAPI(base: relay.url)
            let alice = try await relay.signIn("alice").session, bobSession = try await relay.signIn("bob").session
            let supply = MailslotClient.prekeySupply
            func count() async throws -> Int { try await api.prekeyCount(owner: "bob", session: bobSession) }
            #expect(try await count() == supply)
            let listening = Task { for try await _ in bob.messages() {} }
            defer { listening.cancel() }
            // Subscribed before the claims: otherwise the `ready` frame's count would top up too.
            try await eventually("bob's subscription is registered on his relay") { relay.node(for: "bob").relay.mailboxes.hub.count == 1 }
            for _ in 0..<(supply - PrekeyCount.lowWater + 1) {
                #expect(try await api.claimPrekey(for: "bob", session: alice) != nil)
            }
            try await eventually("topped up to \(supply) while listening") { try await count() == supply }
        }
    }

    @Test func theStreamYieldsStoredMessagesAndAcksThem() async throws {
        try await withTestRelay { relay in
            // On two relays (MAILSLOT_TEST_STORE=cluster) Alice sends through one and Bob listens
            // on the other: the live message crosses between them.
            #expect(relay.nodes.count == 1 || relay.node(for: "alice") !== relay.node(for: "bob"))
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
            try await eventually("the relay keeps nothing for bob") { try await relay.pending("bob") == 0 }
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
            let received = try await withDeadline(.seconds(20), "the 1 MiB envelope arrives") {
                var iterator = bob.messages().makeAsyncIterator()
                return try await iterator.next()?.message.payload.text
            }
            #expect(received == text)
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

            // After the restart the relay delivers it again; the store drops the duplicate and acks
            // it, and the copy stored before the crash — never handed to the app — is returned once.
            let restarted = try relay.client("bob")
            #expect(try await restarted.receive().map(\.id) == [id], "handed over once: the crash came before the app saw it")
            #expect(try await restarted.receive().isEmpty, "not yielded twice")
            #expect(try await restarted.history().map(\.id) == [id], "stored once")
            #expect(try await relay.pending("bob") == 0, "and now erased from the relay")
        }
    }

    /// At least once (MessageStream's rule): a message yielded to a loop that "crashes" before
    /// asking for the next one — the client dropped, nothing handled — comes again from a new
    /// client on the same store, although the relay erased it; once the loop asked for the next
    /// one, it is handled, and comes neither from the stream nor from `receive` again.
    @Test func aMessageNotHandledBeforeACrashComesAgainAfterTheRestart() async throws {
        try await withTestRelay { relay in
            let alice = try relay.client("alice")
            try await alice.signIn()
            try await relay.client("bob").signIn()
            guard case .sent(let id) = try await alice.send(text: "handle me", to: "bob") else { Issue.record("not sent"); return }

            // The first run: the message is yielded, and the app dies while handling it.
            do {
                let crashing = try relay.client("bob")
                let iterator = crashing.messages().makeAsyncIterator()
                #expect(try await Self.next(iterator)?.id == id)
            }
            try await eventually("stored, so acknowledged: the relay erased it") { try await relay.pending("bob") == 0 }

            // The restart: the store brings it again, before anything new.
            let restarted = try relay.client("bob")
            let iterator = restarted.messages().makeAsyncIterator()
            #expect(try await Self.next(iterator)?.id == id, "yielded again after the crash")
            // The loop asks for the next one: the first is handled now, and nothing else waits —
            // the stream has nothing stored left to yield and waits for news from the relay.
            let asking = Task { var iterator = iterator; return try await iterator.next() }
            try await eventually("the stream waits for a new message") { iterator.isWaitingForMessages }
            #expect(try await restarted.store.unhandledCount() == 0, "handled once the loop asked for the next")
            asking.cancel()
            #expect(try await asking.value == nil, "nothing else was waiting")
            let third = try relay.client("bob")
            #expect(try await third.receive().isEmpty, "handled: not handed over a third time")
            #expect(try await third.history().map(\.id) == [id], "stored once")
        }
    }

    /// Back-pressure: with a slow app, the stream stores at most `unhandledLimit` messages it has
    /// not handled and stops reading from the relay, which keeps the rest; they all come, in
    /// order, as the app catches up.
    @Test func aSlowConsumerLeavesTheRestOnTheRelay() async throws {
        try await withTestRelay { relay in
            let alice = try relay.client("alice"), bob = try relay.client("bob")
            try await alice.signIn()
            try await bob.signIn()
            await bob.limitUnhandled(to: 3)
            let texts = (1...7).map { "m\($0)" }
            for text in texts { _ = try await alice.send(text: text, to: "bob") }

            let iterator = bob.messages().makeAsyncIterator()
            #expect(try await Self.next(iterator)?.message.payload.text == "m1")
            // The app is busy with m1: the receive loop stored three it has not handled and
            // stopped reading; the relay keeps the other four (once the three acks are through).
            try await eventually("the receive loop waits for room") { iterator.isWaitingForRoom }
            #expect(try await bob.store.unhandledCount() == 3, "no more stored than the limit")
            try await eventually("the relay keeps bob's four") { try await relay.pending("bob") == 4 }
            #expect(iterator.isWaitingForRoom, "no more read while the app is behind")
            var seen = ["m1"]
            while seen.count < texts.count, let message = try await Self.next(iterator) {
                seen.append(message.message.payload.text ?? "")
            }
            #expect(seen == texts)
            try await eventually("the relay keeps nothing for bob") { try await relay.pending("bob") == 0 }
        }
    }

    /// The next element of `iterator`; a stream that yields nothing fails the test (after a
    /// generous bound) instead of hanging the suite.
    static func next(_ iterator: MessageStream.AsyncIterator, sourceLocation: SourceLocation = #_sourceLocation) async throws -> ReceivedMessage? {
        try await withDeadline(.seconds(20), "the next message", sourceLocation: sourceLocation) {
            var iterator = iterator
            return try await iterator.next()
        }
    }
}

extension MailslotClient {
    /// A smaller ``maxUnhandled``, to see the back-pressure with a few messages.
    func limitUnhandled(to limit: Int) { unhandledLimit = limit }
}
