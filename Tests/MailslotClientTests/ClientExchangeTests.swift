import Foundation
import Logging
import MailslotClient
import MailslotRelay
import MailslotTestSupport
import MailslotWire
import Testing

/// Two or more clients against a real relay on 127.0.0.1.
@Suite struct ClientExchangeTests {
    @Test func deliveryBothWaysLeavesNothingOnTheRelay() async throws {
        try await withTestRelay { relay in
            let alice = try relay.client("alice"), bob = try relay.client("bob")
            #expect(try await alice.signIn() == "alice")
            #expect(try await bob.signIn() == "bob")

            guard case .sent(let first) = try await alice.send(text: "hello bob", to: "bob") else { Issue.record("not sent"); return }
            try await alice.send(Payload(location: Location(latitude: 52.52, longitude: 13.405)), type: .location, to: "bob")
            let inbox = try await bob.receive()
            #expect(inbox.map(\.id).first == first)
            #expect(inbox.first?.message.payload.text == "hello bob")
            #expect(inbox.first?.sender == "alice")
            #expect(inbox.last?.message.payload.location?.latitude == 52.52)
            #expect(try await bob.history(from: "alice").count == 2, "stored locally")

            try await bob.send(Payload(receipt: Receipt(kind: .read, messageIDs: [first])), type: .receipt, to: "alice")
            try await bob.send(text: "hi alice", to: "alice")
            let back = try await alice.receive()
            #expect(back.map(\.message.type) == [.receipt, .text])
            #expect(back.first?.message.payload.receipt?.messageIDs == [first])

            // Nothing is left on the relay, and the safety numbers agree.
            #expect(try await bob.receive().isEmpty)
            #expect(try await alice.receive().isEmpty)
            #expect(try await alice.safetyNumber(with: "bob") == (try await bob.safetyNumber(with: "alice")))
        }
    }

    @Test func aRelayThatIsDownLeavesMessagesQueuedUntilFlush() async throws {
        try await withTestRelay { relay in
            let alice = try relay.client("alice"), bob = try relay.client("bob")
            try await alice.signIn()
            try await bob.signIn()
            _ = try await alice.contact("bob")  // keys pinned while the relay is up

            // The same client state, pointed at a port where nothing listens.
            let offline = try relay.client("alice", url: URL(string: "http://127.0.0.1:1")!)
            guard case .queued(let id, let reason) = try await offline.send(text: "are you there?", to: "bob") else {
                Issue.record("should be queued"); return
            }
            #expect(reason == .unreachable)
            #expect(try await offline.outgoing().first?.state == .queued)
            #expect(try await bob.receive().isEmpty)

            // Back online: the flush sends the same id with the same envelope, once.
            #expect(try await alice.flush(now: Date().addingTimeInterval(3600)) == 0)
            #expect(try await alice.flush(now: Date().addingTimeInterval(3600)) == 0, "a second flush sends nothing twice")
            let received = try await bob.receive()
            #expect(received.map(\.id) == [id])
            #expect(try await alice.outgoing().first?.state == .sent)
        }
    }

    @Test func aChangedKeyIsRefusedUntilTrusted() async throws {
        try await withTestRelay { relay in
            let alice = try relay.client("alice"), bob = try relay.client("bob")
            try await alice.signIn()
            try await bob.signIn()
            try await alice.send(text: "one", to: "bob")
            #expect(try await bob.receive().count == 1)  // bob pinned alice

            // Alice reinstalls: same uid, new keys, published over the old ones.
            let reinstalled = try relay.client("alice", profile: "alice-2")
            try await reinstalled.signIn()
            try await reinstalled.send(text: "new phone", to: "bob")
            #expect(try await bob.receive().isEmpty, "held back")
            #expect(try await bob.rejected().map(\.reason) == [.keyChanged])
            guard case .held(_, "alice") = try await bob.send(text: "hello?", to: "alice") else { Issue.record("not held"); return }

            // After comparing safety numbers (the new key's, the same on both sides), bob trusts the
            // new key; new messages flow again.
            let compared = try await reinstalled.safetyNumber(with: "bob")
            #expect(try await bob.safetyNumber(with: "alice") == compared)
            try await bob.trust("alice", safetyNumber: compared)
            #expect(try await bob.contacts().first?.trust == .verified)
            try await reinstalled.send(text: "again", to: "bob")
            #expect(try await bob.receive().map(\.message.payload.text) == ["again"])
            guard case .sent = try await bob.send(text: "welcome back", to: "alice") else { Issue.record("not sent"); return }
            // The message refused before the trust was held, and went out with it.
            #expect(try await reinstalled.receive().map(\.message.payload.text) == ["hello?", "welcome back"])
        }
    }

    @Test func forgedAndTamperedEnvelopesAreRejectedWithoutBlockingTheMailbox() async throws {
        try await withTestRelay { relay in
            let alice = try relay.client("alice"), bob = try relay.client("bob"), mallory = try relay.client("mallory")
            try await alice.signIn()
            try await bob.signIn()
            try await mallory.signIn()
            try await alice.send(text: "first", to: "bob")
            _ = try await bob.receive()

            // Mallory drops a random "envelope" and one that claims to be from alice.
            let session = try await relay.signIn("mallory").session
            #expect(try await relay.send(session, to: "bob", id: MessageID.generate(), envelope: randomBytes(512)).status == 201)
            let forged = try Envelope.seal(ChatMessage(type: .text, sender: Sender(id: "alice"), payload: Payload(text: "send money"), timestamp: 1),
                                           id: "01KF00000000000000000FORGE", from: "alice", identity: IdentityKeyPair(), to: "bob",
                                           mailboxKey: try await bobMailboxKey(relay))
            #expect(try await relay.send(session, to: "bob", id: "01KF00000000000000000FORGE", envelope: forged).status == 201)
            try await alice.send(text: "second", to: "bob")

            let received = try await bob.receive()
            #expect(received.map(\.message.payload.text) == ["second"], "the genuine message still arrives")
            #expect(Set(try await bob.rejected().map(\.reason)) == [.unreadable(code: "envelope_cannot_decrypt"), .authorMismatch])
            #expect(try await bob.receive().isEmpty, "rejected ones were acked too: nothing blocks the mailbox")
        }
    }

    @Test func unsendTakesBackAPendingMessageAndBlockingRefusesAnAuthor() async throws {
        try await withTestRelay { relay in
            let alice = try relay.client("alice"), bob = try relay.client("bob")
            try await alice.signIn()
            try await bob.signIn()
            guard case .sent(let regret) = try await alice.send(text: "oops", to: "bob") else { Issue.record("not sent"); return }
            try await alice.unsend(regret, to: "bob")
            #expect(try await bob.receive().isEmpty, "gone before bob received it")
            await #expect(throws: ClientError.self) { try await alice.unsend(regret, to: "bob") }

            try await bob.block("alice")
            guard case .refused(_, let reason) = try await alice.send(text: "let me in", to: "bob") else {
                Issue.record("a blocked send is refused for good"); return
            }
            #expect(reason == .relay(.blocked))
            #expect(try await alice.flush(now: Date().addingTimeInterval(3600)) == 0, "not retried")
            #expect(try await alice.outgoing().last?.state == .refused)
            #expect(try await bob.receive().isEmpty)

            // Unblocked: alice's messages go in again; a second unblock finds nothing to undo.
            #expect(try await bob.unblock("alice"), "alice was blocked")
            guard case .sent = try await alice.send(text: "thank you", to: "bob") else { Issue.record("not sent after unblock"); return }
            #expect(try await bob.receive().map(\.message.payload.text) == ["thank you"])
            #expect(try await bob.unblock("alice") == false, "not blocked any more: not an error")
            await #expect(throws: ClientError.invalidUID(text: "b/ob")) { try await bob.unblock("b/ob") }
        }
    }

    func bobMailboxKey(_ relay: TestRelay) async throws -> MailboxPublicKey {
        let carol = try await relay.signIn("carol").session
        return try KeyBundle.decode(Array(try await relay.call("GET", "/v1/users/bob/keys", session: carol).body), for: "bob").mailboxKey
    }
}

/// Errors the client makes itself are its own, not the relay's.
@Suite struct ClientErrorTests {
    @Test func aBadUIDAndAnotherUsersStoreAreTheClientsErrors() async throws {
        try await withTestRelay { relay in
            let alice = try relay.client("alice", profile: "shared")
            try await alice.signIn()
            await #expect(throws: ClientError.invalidUID(text: "b/ob")) { _ = try await alice.contact("b/ob") }
            // The same store, signed in as someone else: refused, and alice's keys stay hers.
            let bob = try relay.client("bob", profile: "shared")
            await #expect(throws: ClientError.profileMismatch(owner: "alice", requested: "bob")) { _ = try await bob.signIn() }
            let me = try relay.client("alice", profile: "shared")
            #expect(try await me.receive().isEmpty, "the store still signs in as alice: bob's session was not kept")
        }
    }
}
