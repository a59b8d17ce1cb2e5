import Foundation
@testable import MailslotClient
import MailslotTestSupport
import MailslotWire
import Testing

/// Groups end to end through a real test relay (issue 30 items 1, 2, 4, 5; docs/design/groups.md
/// §9 "Client"): create, talk, add, remove — the removed member's copies stop, checked on the
/// relay's rows — concurrent admin changes converging, and a non-member refused.
@Suite struct GroupChatTests {
    /// The ids of the messages waiting in `uid`'s mailbox on the relay, asked as its owner.
    private func mailbox(_ uid: String, _ relay: TestRelay) async throws -> [String] {
        let page = try await relay.call("GET", "/v1/users/\(uid)/messages", session: try await relay.signIn(uid).session)
        return try page.decoded(MessagePage.self).messages.map(\.id)
    }

    @Test func membersTalkAndARemovedMemberGetsNoCopyAfterTheRemoval() async throws {
        try await withTestRelay { relay in
            let users = try await relay.signedInClients(["alice", "bob", "carol", "dave"])
            let alice = users[0], bob = users[1], carol = users[2], dave = users[3]

            let singleCreates = { relay.sum("mailslot_http_requests_total", labelsContaining: ["PUT", "route=\"/v1/users/{uid}/messages/{id}\""]) }
            let batches = { relay.sum("mailslot_http_requests_total", labelsContaining: ["POST", "route=\"/v1/messages\""]) }
            let trip = try await alice.createGroup(name: "Trip", members: ["bob", "carol"])
            // The genesis went to both members in one multi-recipient create, no single create.
            #expect(batches() == 1 && singleCreates() == 0)
            #expect(trip.members == ["alice", "bob", "carol"] && trip.admins == ["alice"] && trip.version == 1 && trip.isAdmin)
            // The genesis is a change: it comes as an event, "alice created Trip".
            for member in [bob, carol] {
                let got = try await member.receive()
                #expect(got.map(\.message.type) == [.groupChange])
                #expect(got.first?.events.map(\.kind) == [.created(name: "Trip", members: ["alice", "bob", "carol"])])
            }
            #expect(try await bob.group(trip.id).members == ["alice", "bob", "carol"])
            #expect(try await carol.group(trip.id).isAdmin == false)

            // All three talk; each sees the others' messages under the group's name, one id for all copies.
            let hello = try await bob.send(text: "hi all", toGroup: trip.id)
            #expect(hello.allSent && hello.copies.keys.sorted() == ["alice", "carol"])
            for member in [alice, carol] {
                let got = try await member.receive()
                #expect(got.map(\.id) == [hello.messageID])
                #expect(got.first?.message.payload.text == "hi all" && got.first?.sender == "bob")
                #expect(got.first?.group == GroupContext(id: trip.id, name: "Trip", version: 1))
            }
            #expect(try await alice.history().first { $0.id == hello.messageID }?.group?.name == "Trip")

            // alice adds dave: he gets the group with its state, and no history.
            let added = try await alice.addMembers(["dave"], to: trip.id)
            #expect(added.group.members == ["alice", "bob", "carol", "dave"] && added.send.allSent)
            #expect(try await dave.receive().flatMap(\.events).map(\.kind) == [.added(["dave"])])
            #expect(try await dave.group(trip.id).members == ["alice", "bob", "carol", "dave"])
            #expect(try await dave.history().filter { $0.events.isEmpty }.isEmpty, "no history before the change that added him")
            _ = try await bob.receive()
            _ = try await carol.receive()
            let fromDave = try await dave.send(text: "thanks", toGroup: trip.id)
            #expect(fromDave.copies.keys.sorted() == ["alice", "bob", "carol"])
            #expect(try await carol.receive().map(\.message.payload.text) == ["thanks"])

            // A message alice composes while the relay cannot be reached stays queued, to carol too.
            let offline = try relay.client("alice", url: URL(string: "http://127.0.0.1:9")!)
            let composedBefore = try await offline.send(text: "composed before", toGroup: trip.id)
            #expect(composedBefore.copies["carol"] == .queued(id: composedBefore.messageID, reason: .unreachable))

            // alice removes carol; then the queued message is flushed and alice and bob send more.
            let removed = try await alice.removeMembers(["carol"], from: trip.id)
            #expect(removed.group.members == ["alice", "bob", "dave"])
            #expect(try await alice.copies(of: composedBefore.messageID).copies["carol"] == nil, "dropped: carol is out")
            _ = try await bob.receive()
            _ = try await dave.receive()
            _ = try await alice.flush(now: Date().addingTimeInterval(3600))
            var byAlice = [composedBefore.messageID], byBob: [String] = []
            for index in 0..<3 {
                byAlice.append(try await alice.send(text: "alice \(index)", toGroup: trip.id).messageID)
                let sent = try await bob.send(text: "bob \(index)", toGroup: trip.id)
                #expect(sent.copies.keys.sorted() == ["alice", "dave"])
                byBob.append(sent.messageID)
            }
            // On the relay, before anyone receives: every copy of those messages is for a remaining
            // member, and carol's mailbox holds none of them.
            #expect(Set(try await mailbox("carol", relay)).isDisjoint(with: byAlice + byBob))
            #expect(Set(try await mailbox("dave", relay)).isSuperset(of: byAlice + byBob))
            #expect(Set(try await mailbox("bob", relay)).isSuperset(of: byAlice))
            #expect(Set(try await mailbox("alice", relay)).isSuperset(of: byBob))

            // carol learns she was removed: the group shows so, and she can send nothing to it.
            let removal = try await carol.receive()
            #expect(removal.flatMap(\.events).map(\.kind) == [.removedMe] && removal.first?.sender == "alice")
            #expect(try await carol.group(trip.id).status == .removed(by: "alice"))
            await #expect(throws: ClientError.notGroupMember(trip.id)) { try await carol.send(text: "still here?", toGroup: trip.id) }
            #expect(try await dave.receive().count == 7)
        }
    }

    @Test func aMessageFromANonMemberIsRefusedAndKeptAsRejected() async throws {
        try await withTestRelay { relay in
            let users = try await relay.signedInClients(["alice", "bob", "eve"])
            let alice = users[0], bob = users[1], eve = users[2]
            let group = try await alice.createGroup(name: "Club", members: ["bob"])
            _ = try await bob.receive()
            let state = try await bob.store.group(group.id.rawValue)
            // eve names the group and its current state, but is not in it.
            let forged = ChatMessage(type: .text, sender: Sender(id: "eve"), payload: Payload(text: "let me in"),
                                     timestamp: Int64(Date().timeIntervalSince1970 * 1000),
                                     group: GroupReference(id: group.id, version: 1, stateHash: try #require(state).stateHash))
            let me = try await eve.identity()
            let sent = try await eve.fanOut(forged, to: ["bob"], group: group.id, as: me)
            #expect(sent.allSent)
            #expect(try await bob.receive().isEmpty)
            #expect(try await bob.history().filter { $0.events.isEmpty }.isEmpty)
            let rejected = try await bob.rejected()
            #expect(rejected.map(\.id) == [sent.messageID])
            #expect(rejected.first?.reason == .group(code: "group_not_member"))
        }
    }

    @Test func twoAdminsChangingAtOnceEndWithTheSameGroupEverywhere() async throws {
        try await withTestRelay { relay in
            let users = try await relay.signedInClients(["alice", "bob", "carol", "dave"])
            let alice = users[0], bob = users[1], carol = users[2], dave = users[3]
            let group = try await alice.createGroup(name: "Ops", members: ["bob", "carol"])
            _ = try await bob.receive()
            _ = try await carol.receive()
            try await alice.promote(["bob"], in: group.id)
            _ = try await bob.receive()
            _ = try await carol.receive()
            #expect(try await bob.group(group.id).admins == ["alice", "bob"])

            // Both at version 3, neither having seen the other's: alice adds dave, bob removes carol.
            let byAlice = try await alice.addMembers(["dave"], to: group.id)
            let byBob = try await bob.removeMembers(["carol"], from: group.id)
            #expect(byAlice.group.version == 3 && byBob.group.version == 3)
            for client in [alice, bob, carol, dave] { _ = try await client.receive() }
            // dave joined from alice's change and never got bob's (bob did not know him). bob's next
            // message names a state hash dave never had at version 3: dave asks bob, and folds
            // the change bob answers with.
            let done = try await bob.send(text: "done", toGroup: group.id)
            #expect(done.copies.keys.sorted() == ["alice", "dave"])
            for _ in 0..<3 { for client in [alice, bob, carol, dave] { _ = try await client.receive() } }
            #expect(try await dave.history().filter { $0.events.isEmpty }.map(\.id) == [done.messageID])
            let expected = ["alice", "bob", "dave"]
            for client in [alice, bob, dave] {
                let seen = try await client.group(group.id), uid = await client.uid ?? ""
                #expect(seen.members == expected && seen.admins == ["alice", "bob"] && seen.version == 3, "as \(uid): \(seen.members)")
            }
            let hashes = try await [alice, bob, dave].asyncMap { try await $0.store.group(group.id.rawValue)?.stateHash }
            #expect(Set(hashes.map { $0 ?? [] }).count == 1)
            #expect(try await carol.group(group.id).status == .removed(by: "bob"))
        }
    }

    /// A relay configured under the default batch size (`--max-batch-entries 5`): the client's
    /// first send to many of 11 copies is refused whole (`invalid_entries`); it halves it, down
    /// to what the relay takes, every copy is stored, and the next send starts at the size that
    /// worked (no refusal again).
    @Test func aRelayTakingSmallerBatchesGetsEveryCopy() async throws {
        try await withTestRelay(configure: { $0.maxBatchEntries = 5 }) { relay in
            let others = (1...11).map { String(format: "m%02d", $0) }
            let users = try await relay.signedInClients(["alice"] + others)
            let alice = users[0]
            let batches = { (status: String) in
                relay.sum("mailslot_http_requests_total", labelsContaining: ["POST", "route=\"/v1/messages\"", "status=\"\(status)\""])
            }
            let group = try await alice.createGroup(name: "Twelve", members: others)
            #expect(batches("400") == 1, "the first batch of 11 is refused once, then never again")
            for member in users.dropFirst() {
                #expect(try await member.receive().map(\.message.type) == [.groupChange], "the genesis, shown as an event")
                #expect(try await member.group(group.id).members.count == 12)
            }
            let storedBefore = batches("200")
            let sent = try await alice.send(text: "all twelve", toGroup: group.id)
            #expect(sent.allSent && sent.copies.count == 11)
            #expect(batches("400") == 1 && batches("200") - storedBefore == 3, "11 copies in creates of at most 5: 5, 5, 1")
            for uid in others { #expect(try await mailbox(uid, relay) == [sent.messageID]) }
            for member in users.dropFirst() {
                #expect(try await member.receive().map(\.message.payload.text) == ["all twelve"])
            }
        }
    }

    /// A member's key change (issue 30 item 5): its copy is held until trusted, the others go;
    /// trusted, it goes under the same id. The reinstalled device does not know the group: it
    /// holds the message, asks, gets the history and then shows it.
    @Test func aMembersKeyChangeHoldsOnlyItsCopyUntilTrusted() async throws {
        try await withTestRelay { relay in
            let users = try await relay.signedInClients(["alice", "bob", "carol"])
            let alice = users[0], bob = users[1], carol = users[2]
            let group = try await alice.createGroup(name: "Band", members: ["bob", "carol"])
            _ = try await bob.receive()
            _ = try await carol.receive()
            _ = try await bob.send(text: "ready", toGroup: group.id)
            _ = try await alice.receive()

            let newBob = try relay.client("bob", profile: "bob-2")
            try await newBob.signIn()
            let sent = try await alice.send(text: "rehearsal at 6", toGroup: group.id)
            #expect(sent.copies["bob"] == .held(id: sent.messageID, recipient: "bob"))
            #expect(sent.copies["carol"] == .sent(id: sent.messageID))
            #expect(try await carol.receive().map(\.id) == [sent.messageID])
            #expect(try await relay.pending("bob") == 0, "nothing sealed to a key bob no longer has")

            try await alice.trust("bob", safetyNumber: try await newBob.safetyNumber(with: "alice"))
            #expect(try await alice.copies(of: sent.messageID).copies["bob"] == .sent(id: sent.messageID))
            // The new device does not know the group: held, and it asks alice, who answers.
            #expect(try await newBob.receive().isEmpty)
            _ = try await alice.receive()
            let shown = try await newBob.receive()
            #expect(shown.map(\.id) == [sent.messageID])
            #expect(shown.first?.group?.name == "Band")
            #expect(try await newBob.group(group.id).members == ["alice", "bob", "carol"])
        }
    }
}

extension Array {
    fileprivate func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var result: [T] = []
        for element in self { result.append(try await transform(element)) }
        return result
    }
}
