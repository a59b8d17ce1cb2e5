import Foundation
@testable import MailslotClient
import MailslotRelay
import MailslotTestSupport
import MailslotWire
import Testing

/// Keys that stay current: a sender whose copy of the recipient's keys is stale learns it from
/// the relay, and a recipient that cannot open a message tells its author. Every message is read
/// by its recipient or shown to its sender as undelivered (or held).
@Suite struct KeyChangeTests {
    @Test func aReinstalledRecipientGetsTheMessageOnceTrustedAndNothingIsLost() async throws {
        try await withTestRelay { relay in
            let alice = try relay.client("alice"), bob = try relay.client("bob")
            try await alice.signIn()
            try await bob.signIn()
            try await alice.send(text: "before", to: "bob")
            #expect(try await bob.receive().map(\.message.payload.text) == ["before"])

            // Bob reinstalls: a new profile, new keys, the same uid.
            let newBob = try relay.client("bob", profile: "bob-2")
            try await newBob.signIn()

            // Alice's pinned keys are stale: the relay refuses the send, her client fetches the new
            // bundle, sees another identity key and holds the message instead of losing it.
            guard case .held(_, "bob") = try await alice.send(text: "are you there?", to: "bob") else { Issue.record("not held"); return }
            let held = try #require(try await alice.outgoing().last)
            #expect(held.state == .held)
            #expect(held.message?.payload.text == "are you there?")
            #expect(try await alice.contacts().first { $0.uid == "bob" }?.trust == .changed)
            #expect(try await newBob.receive().isEmpty, "nothing sealed to a key bob no longer has")

            // Alice is shown the number of the NEW key (the one trusting installs), and it is the
            // number bob's new device shows her: compared by voice, they agree.
            let aliceSees = try await alice.safetyNumberCheck(with: "bob")
            let bobReadsOut = try await newBob.safetyNumber(with: "alice")
            #expect(aliceSees.isNewKey && aliceSees.trust == .changed)
            #expect(aliceSees.safetyNumber == bobReadsOut, "a genuine reinstall: both see the new key's number")
            #expect(try await alice.safetyNumber(with: "bob") == bobReadsOut)
            #expect(aliceSees.previousSafetyNumber != nil && aliceSees.previousSafetyNumber != bobReadsOut)
            let newKeys = try #require(try await newBob.store.identity())
            #expect(aliceSees.keyID == KeyBundle.keyID(identityKey: newKeys.signing.publicKey, mailboxKey: newKeys.mailbox.publicKey))
            await #expect(throws: ClientError.invalidSafetyNumber) { try await alice.trust("bob", safetyNumber: String(bobReadsOut.dropLast())) }

            // She trusts it with the number compared (as typed, on one line): the held message goes out.
            try await alice.trust("bob", safetyNumber: bobReadsOut.replacingOccurrences(of: "\n", with: " "))
            #expect(try await alice.safetyNumberCheck(with: "bob").isNewKey == false)
            #expect(try await alice.outgoing().first { $0.id == held.id }?.state == .sent)
            let received = try await newBob.receive()
            #expect(received.map(\.id) == [held.id])
            #expect(received.map(\.message.payload.text) == ["are you there?"])
            #expect(try await relay.pending("bob") == 0)
        }
    }

    /// Issue 26 item 1: someone holding the issuer key (or the relay itself) signs in as bob with
    /// keys of its own. The number alice is asked to compare is the forged key's, so it differs
    /// from the number the real bob reads out, and trusting with bob's number is refused.
    @Test func aForgedKeyChangeShowsANumberTheRealContactDoesNotAndIsNotTrustedWithTheirs() async throws {
        try await withTestRelay { relay in
            let alice = try relay.client("alice"), bob = try relay.client("bob")
            try await alice.signIn()
            try await bob.signIn()
            try await alice.send(text: "hello", to: "bob")
            #expect(try await bob.receive().count == 1, "bob pinned alice")
            let before = try await alice.safetyNumber(with: "bob")
            #expect(before == (try await bob.safetyNumber(with: "alice")), "the same number before the change")

            // The attacker: bob's uid, its own keys (its own database), published over bob's.
            let mallory = try relay.client("bob", profile: "mallory-as-bob")
            try await mallory.signIn()
            guard case .held(_, "bob") = try await alice.send(text: "the launch code is 0000", to: "bob") else { Issue.record("not held"); return }
            let held = try #require(try await alice.outgoing().last)
            #expect(held.state == .held)

            // What each user sees when they compare.
            let aliceSees = try await alice.safetyNumberCheck(with: "bob")
            let bobReadsOut = try await bob.safetyNumber(with: "alice")
            #expect(aliceSees.isNewKey)
            #expect(aliceSees.previousSafetyNumber == before)
            #expect(bobReadsOut == before, "the real bob still holds his key")
            #expect(aliceSees.safetyNumber != bobReadsOut, "the numbers alice and bob read differ: the change is detected")
            #expect(aliceSees.safetyNumber == (try await mallory.safetyNumber(with: "alice")), "alice's is the attacker's key's")

            // Alice, told the digits bob read out, trusts with them: refused, nothing changes, nothing leaves.
            await #expect(throws: ClientError.safetyNumberMismatch(uid: "bob")) { try await alice.trust("bob", safetyNumber: bobReadsOut) }
            #expect(try await alice.contacts().first { $0.uid == "bob" }?.trust == .changed)
            #expect(try await alice.outgoing().first { $0.id == held.id }?.state == .held)
            #expect(try await relay.pending("bob") == 0, "the relay got nothing")
            #expect(try await mallory.receive().isEmpty)
            #expect(try await bob.receive().isEmpty)
        }
    }

    /// The relay can offer another bundle between the number being shown and `trust`: trusting
    /// with the number shown refuses, since it is not the number of what would be installed.
    @Test func aBundleSwappedAfterTheNumberWasShownIsNotTrusted() async throws {
        try await withTestRelay { relay in
            let alice = try relay.client("alice"), bob = try relay.client("bob")
            try await alice.signIn()
            try await bob.signIn()
            _ = try await alice.contact("bob")
            let newBob = try relay.client("bob", profile: "bob-2")
            try await newBob.signIn()
            guard case .held(_, "bob") = try await alice.send(text: "held", to: "bob") else { Issue.record("not held"); return }
            let shown = try await alice.safetyNumber(with: "bob")
            #expect(shown == (try await newBob.safetyNumber(with: "alice")))

            // Before alice trusts, other keys are published for bob, and her client sees them (as
            // any send or receive would fetch them).
            let swapped = try relay.client("bob", profile: "bob-3")
            try await swapped.signIn()
            await #expect(throws: ClientError.keyChanged(uid: "bob")) { try await alice.refreshKeys(of: "bob") }

            await #expect(throws: ClientError.safetyNumberMismatch(uid: "bob")) { try await alice.trust("bob", safetyNumber: shown) }
            #expect(try await alice.contacts().first { $0.uid == "bob" }?.trust == .changed)
            #expect(try await alice.outgoing().last?.state == .held)
            #expect(try await relay.pending("bob") == 0, "nothing sent to the swapped keys")

            // Shown again, the number is the swapped keys'; trusted with that one, the message goes to them.
            let again = try await alice.safetyNumber(with: "bob")
            let swappedReadsOut = try await swapped.safetyNumber(with: "alice")
            #expect(again != shown && again == swappedReadsOut)
            try await alice.trust("bob", safetyNumber: again)
            #expect(try await swapped.receive().map(\.message.payload.text) == ["held"])
        }
    }

    /// At first contact too, trusting takes the number of the pinned key, and only that one; a
    /// number that did not match leaves the key disputed: nothing is sealed to it until one does.
    @Test func aPinnedContactIsTrustedOnlyWithItsNumberAndAMismatchHoldsSending() async throws {
        try await withTestRelay { relay in
            let alice = try relay.client("alice"), bob = try relay.client("bob")
            try await alice.signIn()
            try await bob.signIn()
            let check = try await alice.safetyNumberCheck(with: "bob")  // pins bob on first use
            #expect(!check.isNewKey && check.previousSafetyNumber == nil && check.trust == .pinned)
            #expect(check.keyID == (try await alice.contact("bob").keyID))
            // The number bob read out is not the pinned key's (keys substituted at first contact).
            let wrong = String(repeating: "12345 ", count: 12)
            await #expect(throws: ClientError.safetyNumberMismatch(uid: "bob")) { try await alice.trust("bob", safetyNumber: wrong) }
            #expect(try await alice.contacts().first { $0.uid == "bob" }?.trust == .disputed)
            #expect(try await alice.safetyNumberCheck(with: "bob").trust == .disputed)
            guard case .held(_, "bob") = try await alice.send(text: "held while disputed", to: "bob") else { Issue.record("not held"); return }
            #expect(try await alice.outgoing().last?.state == .held)
            #expect(try await relay.pending("bob") == 0, "nothing sealed to the disputed key")

            // The comparison matches after all: verified, and the held message goes.
            #expect(try await alice.trust("bob", safetyNumber: try await bob.safetyNumber(with: "alice")).trust == .verified)
            #expect(try await bob.receive().map(\.message.payload.text) == ["held while disputed"])
        }
    }

    /// A change whose offered keys are not kept (a store from an older version) shows no number
    /// of the old key as if nothing changed: the keys are fetched again and the new one is shown.
    @Test func aChangeWithoutAnOfferFetchesTheKeysAgainBeforeShowingANumber() async throws {
        try await withTestRelay { relay in
            let alice = try relay.client("alice"), bob = try relay.client("bob")
            try await alice.signIn()
            try await bob.signIn()
            _ = try await alice.contact("bob")
            let newBob = try relay.client("bob", profile: "bob-2")
            try await newBob.signIn()
            await #expect(throws: ClientError.keyChanged(uid: "bob")) { try await alice.refreshKeys(of: "bob") }
            try await alice.store.pool.write { db in try db.execute(sql: "UPDATE contacts SET offered_bundle = NULL WHERE uid = 'bob'") }
            let shown = try await alice.safetyNumberCheck(with: "bob")
            let newBobReadsOut = try await newBob.safetyNumber(with: "alice")
            #expect(shown.isNewKey)
            #expect(shown.safetyNumber == newBobReadsOut)
            try await alice.trust("bob", safetyNumber: shown.safetyNumber)
            #expect(try await alice.contact("bob").identityKey == (try await newBob.identity().signing.publicKey))
        }
    }

    /// A comparison made against a key trusted meanwhile (in another process) does not mark the
    /// newly trusted key as changed.
    @Test func aStaleComparisonDoesNotMarkAKeyTrustedMeanwhile() async throws {
        try await withTestRelay { relay in
            let alice = try relay.client("alice"), bob = try relay.client("bob")
            try await alice.signIn()
            try await bob.signIn()
            let pinned = try await alice.contact("bob")
            let other = KeyBundle(uid: "bob", identity: IdentityKeyPair(), mailboxKey: MailboxKeyPair().publicKey)
            try await alice.store.markChanged("bob", offered: other, replacing: IdentityKeyPair().publicKey)
            #expect(try await alice.contact("bob").trust == .pinned, "compared with a key bob no longer has: nothing marked")
            try await alice.store.markChanged("bob", offered: other, replacing: pinned.identityKey)
            #expect(try await alice.contacts().first { $0.uid == "bob" }?.trust == .changed)
        }
    }

    @Test func aMessageInFlightToAReinstalledDeviceComesBackAsUndeliveredAndCanBeResent() async throws {
        try await withTestRelay { relay in
            // Sealed to bob's old keys, and still waiting on the relay when bob reinstalls.
            let (alice, newBob, id) = try await messageInFlightToAReinstall(relay, text: "in flight")

            // Bob's new device cannot open it: it keeps why, acknowledges it, and tells alice.
            #expect(try await newBob.receive().isEmpty)
            #expect(try await newBob.rejected().map(\.reason.code) == ["envelope_cannot_decrypt"])
            #expect(try await relay.pending("bob") == 0, "acknowledged: it does not block the mailbox")

            // Alice's client marks it undelivered (the notice is signed by bob's new, untrusted key:
            // it only marks what alice sent to bob, and the resend waits for her trust).
            #expect(try await alice.receive().isEmpty, "the notice is not a chat message to show")
            let undelivered = try #require(try await alice.outgoing().first { $0.id == id })
            #expect(undelivered.state == .undelivered)
            guard case .held(_, "bob") = try await alice.resend(id) else { Issue.record("not held"); return }

            try await alice.trust("bob", safetyNumber: try await newBob.safetyNumber(with: "alice"))
            guard case .sent(let again) = try await alice.resend(id) else { Issue.record("not resent"); return }
            #expect(again == id, "the same message, the same id")
            let received = try await newBob.receive()
            #expect(received.map(\.message.payload.text) == ["in flight"])
            #expect(received.map(\.id) == [id])
            #expect(try await newBob.rejected().isEmpty, "the copy that did not open is forgotten once one did")
            await #expect(throws: ClientError.notResendable(id: id)) { try await alice.resend(id) }
        }
    }

    @Test func aRotatedMailboxKeyLosesNothingInFlightAndSendersFollowIt() async throws {
        try await withTestRelay { relay in
            let alice = try relay.client("alice"), bob = try relay.client("bob")
            try await alice.signIn()
            try await bob.signIn()
            let oldKey = try await alice.contact("bob").mailboxKey
            guard case .sent(let before) = try await alice.send(text: "sealed to the old key", to: "bob") else { Issue.record("not sent"); return }

            try await bob.rotateMailboxKey()

            // Alice still has the old key pinned: the relay answers stale_keys, her client takes the
            // new mailbox key (same identity, no user action) and seals again under the same id.
            guard case .sent(let after) = try await alice.send(text: "sealed to the new key", to: "bob") else { Issue.record("not sent"); return }
            let contact = try await alice.contact("bob")
            #expect(contact.mailboxKey != oldKey)
            #expect(contact.trust == .pinned, "a new mailbox key under the same identity needs no trust")

            // Bob opens both: the first with the key the rotation kept.
            let received = try await bob.receive()
            #expect(received.map(\.id) == [before, after])
            #expect(received.map(\.message.payload.text) == ["sealed to the old key", "sealed to the new key"])
            #expect(try await bob.rejected().isEmpty)
            #expect(try await alice.outgoing().map(\.state) == [.sent, .sent])
        }
    }

    @Test func aPreviousKeyOpensOnlyForTheLongestMessageLifetimeAndIsThenErased() async throws {
        try await withTestRelay { relay in
            let alice = try relay.client("alice"), bob = try relay.client("bob")
            try await alice.signIn()
            try await bob.signIn()
            // Contacts (a notice goes only to someone bob exchanged a readable message with).
            try await alice.send(text: "hello", to: "bob")
            #expect(try await bob.receive().count == 1)
            guard case .sent(let id) = try await alice.send(text: "sealed long ago", to: "bob") else { Issue.record("not sent"); return }
            // Bob's rotation happened longer ago than any message may live: the old key is not used...
            let longAgo = Date().timeIntervalSince1970 - ClientStore.previousKeyLifetime - 60
            #expect(try await bob.store.rotateMailboxKey(now: longAgo).previousMailboxes.count == 1, "kept, as seen then")
            #expect(try await bob.store.identity()?.previousMailboxes.isEmpty == true, "and past its lifetime now")
            try await bob.signIn()  // publishes the new key
            // ...so the message does not open, and its author is told.
            #expect(try await bob.receive().isEmpty)
            let left = try await bob.store.pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM previous_mailbox_keys") }
            #expect(left == 0, "the expired secret key is erased (before the receive), not only ignored")
            #expect(try await bob.rejected().map(\.reason.code) == ["envelope_cannot_decrypt"])
            _ = try await alice.receive()
            #expect(try await alice.outgoing().first { $0.id == id }?.state == .undelivered)
            guard case .sent = try await alice.resend(id) else { Issue.record("not resent"); return }
            #expect(try await bob.receive().map(\.id) == [id], "resent to the current key without any trust: the identity is the same")
        }
    }

    @Test func theNoticeWaitsForTheAckAndAResendTakesBackACopyStillOnTheRelay() async throws {
        try await withTestRelay { relay in
            let (alice, newBob, id) = try await messageInFlightToAReinstall(relay, text: "before the reinstall")

            // The new device rejects the message and queues a notice — but its ack is lost.
            let notice = try #require(try await newBob.acceptFirstWithoutAck().notice)
            #expect(try await newBob.flush(now: Date().addingTimeInterval(86_400)) == 1, "unreleased: not sent before the ack")
            #expect(try await alice.receive().isEmpty)
            #expect(try await alice.outgoing().first { $0.id == id }?.state == .sent)

            // Delivered again: the same notice (not a second one) is released after this ack.
            #expect(try await newBob.receive().isEmpty)
            #expect(try await newBob.outgoing().map(\.id) == [notice.id])
            #expect(try await newBob.outgoing().first?.state == .sent)
            _ = try await alice.receive()
            #expect(try await alice.outgoing().first { $0.id == id }?.state == .undelivered)
            #expect(try await relay.pending("bob") == 0)

            // Trusted, the message goes again under its id (the old copy is gone: acknowledged).
            try await alice.trust("bob", safetyNumber: try await newBob.safetyNumber(with: "alice"))
            guard case .sent = try await alice.resend(id) else { Issue.record("not resent"); return }
            #expect(try await newBob.receive().map(\.message.payload.text) == ["before the reinstall"])
        }
    }

    @Test func aResendWhileTheUnreadableCopyStillWaitsIsNotAConflict() async throws {
        try await withTestRelay { relay in
            let (alice, newBob, id) = try await messageInFlightToAReinstall(relay, text: "still waiting")
            // The notice leaves before the ack (as if the ack had failed after it): the old copy waits.
            let notice = try #require(try await newBob.acceptFirstWithoutAck().notice)
            await newBob.notify(notice)
            #expect(try await relay.pending("bob") == 1, "not acknowledged")
            _ = try await alice.receive()
            try await alice.trust("bob", safetyNumber: try await newBob.safetyNumber(with: "alice"))
            guard case .sent = try await alice.resend(id) else { Issue.record("the resend must take the old copy back, not be refused"); return }
            #expect(try await newBob.receive().map(\.message.payload.text) == ["still waiting"])
            #expect(try await alice.outgoing().first { $0.id == id }?.state == .sent)
        }
    }

    @Test func aSenderOfUnopenableEnvelopesGetsABoundedNumberOfNotices() async throws {
        try await withTestRelay { relay in
            let bob = try relay.client("bob"), mallory = try relay.client("mallory")
            try await bob.signIn()
            try await mallory.signIn()
            try await bob.send(text: "hello", to: "mallory")  // a contact: a stranger would get no notice at all
            // Mallory's keys change, so bob's notices cannot go out: they wait, held.
            try await relay.client("mallory", profile: "mallory-2").signIn()
            let session = try await relay.signIn("mallory").session
            for n in 1...12 { #expect(try await relay.send(session, to: "bob", id: messageID(n)).status == 201) }
            #expect(try await bob.receive().isEmpty)
            #expect(try await bob.rejected().count == 12)
            let notices = try await bob.outgoing().filter { $0.recipient == "mallory" && $0.message?.type == .receipt }
            #expect(notices.count == ClientStore.maxWaitingNotices, "at most this many wait for one author")
            #expect(notices.allSatisfy { $0.state == .held })
            #expect(try await relay.pending("bob") == 0, "every message acknowledged all the same")
        }
    }

    @Test func aRotationThatCouldNotBePublishedIsPublishedAtTheNextReceive() async throws {
        try await withTestRelay { relay in
            let alice = try relay.client("alice"), bob = try relay.client("bob")
            try await alice.signIn()
            try await bob.signIn()
            let offline = try relay.client("bob", url: URL(string: "http://127.0.0.1:1")!)
            await #expect(throws: ClientError.self) { try await offline.rotateMailboxKey() }
            // The relay still serves the old key; a message sealed to it still opens (kept key)...
            guard case .sent = try await alice.send(text: "to the old key", to: "bob") else { Issue.record("not sent"); return }
            #expect(try await bob.receive().map(\.message.payload.text) == ["to the old key"])
            // ...and that receive published the new one.
            let current = try #require(try await bob.store.identity()).mailbox.publicKey
            #expect(try await alice.refreshKeys(of: "bob").mailboxKey == current)
        }
    }

    @Test func aChangeTheRelayTakesBackIsWithdrawn() async throws {
        try await withTestRelay { relay in
            let alice = try relay.client("alice"), bob = try relay.client("bob")
            try await alice.signIn()
            try await bob.signIn()
            _ = try await alice.contact("bob")
            try await relay.client("bob", profile: "bob-2").signIn()
            await #expect(throws: ClientError.keyChanged(uid: "bob")) { try await alice.refreshKeys(of: "bob") }
            try await bob.signIn()  // the first device publishes its keys again
            #expect(try await alice.refreshKeys(of: "bob").trust == .pinned)
            guard case .sent = try await alice.send(text: "back", to: "bob") else { Issue.record("not sent"); return }
            #expect(try await bob.receive().map(\.message.payload.text) == ["back"])
        }
    }

    @Test func aQueuedMessageFlushedAfterARotationIsSealedAgain() async throws {
        // One pending message per mailbox: the second send waits in the outbox (429).
        try await withTestRelay(configure: { $0.maxPendingPerMailbox = 1 }) { relay in
            let alice = try relay.client("alice"), bob = try relay.client("bob")
            try await alice.signIn()
            try await bob.signIn()
            try await alice.send(text: "first", to: "bob")
            guard case .queued(let queued, let reason) = try await alice.send(text: "second", to: "bob") else { Issue.record("should wait"); return }
            #expect(reason == .relay(.mailboxFull))

            try await bob.rotateMailboxKey()
            #expect(try await bob.receive().map(\.message.payload.text) == ["first"])

            // The outbox's envelope was sealed to the old key: the flush is told so and seals again.
            #expect(try await alice.flush(now: Date().addingTimeInterval(3600)) == 0)
            let received = try await bob.receive()
            #expect(received.map(\.id) == [queued])
            #expect(received.map(\.message.payload.text) == ["second"])
        }
    }

    @Test func aRelayRefusesAnEnvelopeSealedToKeysNoLongerPublished() async throws {
        try await withTestRelay { relay in
            let alice = try relay.client("alice"), bob = try relay.client("bob")
            try await alice.signIn()
            try await bob.signIn()
            let stale = try await alice.contact("bob")
            try await bob.rotateMailboxKey()
            let session = try await relay.signIn("alice").session
            let id = MessageID.generate()
            let envelope = try Envelope.seal(ChatMessage(type: .text, sender: Sender(id: "alice"), payload: Payload(text: "x"), timestamp: 1),
                                             id: id, from: "alice", identity: IdentityKeyPair(), to: "bob", mailboxKey: stale.mailboxKey)
            #expect(try await relay.status(ofSending: envelope, session, to: "bob", id: id, keyID: stale.keyID) == 409)
            #expect(try await relay.pending("bob") == 0, "nothing stored")
            let current = try await alice.refreshKeys(of: "bob")
            #expect(try await relay.status(ofSending: envelope, session, to: "bob", id: id, keyID: current.keyID) == 201)
        }
    }
}

extension KeyChangeTests {
    /// Alice sends bob a message, then bob reinstalls (a new profile, new keys, the same uid)
    /// before receiving it: alice, bob's new device, and the message's id.
    func messageInFlightToAReinstall(_ relay: TestRelay, text: String) async throws -> (MailslotClient, MailslotClient, String) {
        let alice = try relay.client("alice"), bob = try relay.client("bob")
        try await alice.signIn()
        try await bob.signIn()
        guard case .sent(let id) = try await alice.send(text: text, to: "bob") else { throw TestRelayError("not sent") }
        let newBob = try relay.client("bob", profile: "bob-2")
        try await newBob.signIn()
        return (alice, newBob, id)
    }
}

extension TestRelay {
    /// The status a raw create of `envelope` naming `keyID` is answered with.
    func status(ofSending envelope: [UInt8], _ session: String, to recipient: String, id: String, keyID: String) async throws -> Int {
        let answer = try await call("PUT", "/v1/users/\(recipient)/messages/\(id)", session: session,
                                    json: SendRequest(envelope: envelope, keyID: keyID))
        if answer.status == 409 { #expect(answer.problem == .staleKeys) }
        return answer.status
    }
}
