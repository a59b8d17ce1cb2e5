import Foundation
@testable import MailslotClient
import MailslotTestSupport
import MailslotWire
import Testing

/// What goes to fewer than all members of a group (issue 30 item 2; spec/groups.md §4.5): a read
/// receipt to the author only, typing only to small groups and at most one `active: true` per 5 s
/// per group; and unsending a group message
/// erases every copy not yet received (docs/design/groups.md §7.1).
@Suite struct GroupReceiptTests {
    /// The ids of the messages waiting in `uid`'s mailbox on the relay, asked as its owner.
    private func mailbox(_ uid: String, _ relay: TestRelay) async throws -> [String] {
        let page = try await relay.call("GET", "/v1/users/\(uid)/messages", session: try await relay.signIn(uid).session)
        return try page.decoded(MessagePage.self).messages.map(\.id)
    }

    @Test func aReadReceiptGoesToTheAuthorOnly() async throws {
        try await withTestRelay { relay in
            let users = try await relay.signedInClients(["alice", "bob", "carol"])
            let alice = users[0], bob = users[1], carol = users[2]
            let group = try await alice.createGroup(name: "Crew", members: ["bob", "carol"])
            for member in [bob, carol] { _ = try await member.receive() }
            let fromAlice = try await alice.send(text: "dinner at 8", toGroup: group.id)
            let fromCarol = try await carol.send(text: "I'll bring wine", toGroup: group.id)
            _ = try await bob.receive()

            // bob has read both: alice gets a receipt naming hers, carol one naming hers; nobody else anything.
            let receipt = Payload(receipt: Receipt(kind: .read, messageIDs: [fromAlice.messageID, fromCarol.messageID]))
            let sent = try await bob.send(receipt, type: .receipt, toGroup: group.id)
            #expect(sent.copies.keys.sorted() == ["alice", "carol"])
            #expect(try await mailbox("alice", relay).contains(sent.messageID))
            let toAlice = try #require(try await alice.receive().first { $0.message.type == .receipt })
            #expect(toAlice.sender == "bob" && toAlice.group?.id == group.id)
            #expect(toAlice.message.payload.receipt?.messageIDs == [fromAlice.messageID], "only alice's own message")
            let toCarol = try #require(try await carol.receive().first { $0.message.type == .receipt })
            #expect(toCarol.message.payload.receipt?.messageIDs == [fromCarol.messageID])

            // One author: on the relay, the receipt is in alice's mailbox alone.
            let again = try await bob.send(Payload(receipt: Receipt(kind: .read, messageIDs: [fromAlice.messageID])), type: .receipt, toGroup: group.id)
            #expect(again.copies.keys.sorted() == ["alice"])
            #expect(try await mailbox("alice", relay).contains(again.messageID))
            #expect(try await !mailbox("carol", relay).contains(again.messageID))

            // A receipt for a message bob never received in this group is refused, nothing sent.
            await #expect(throws: ClientError.unknownGroupMessage(id: "01HZZZZZZZZZZZZZZZZZZZZZZZ")) {
                try await bob.send(Payload(receipt: Receipt(kind: .read, messageIDs: ["01HZZZZZZZZZZZZZZZZZZZZZZZ"])), type: .receipt, toGroup: group.id)
            }
        }
    }

    @Test func typingGoesOnlyToGroupsOfAtMost32() async throws {
        try await withTestRelay { relay in
            let users = try await relay.signedInClients(["alice", "bob"])
            let alice = users[0]
            let small = try await alice.createGroup(name: "Two", members: ["bob"])
            let typing = try await alice.send(Payload(typing: Typing(active: true)), type: .typing, toGroup: small.id)
            #expect(typing.copies.keys.sorted() == ["bob"])

            // 33 members (the others need keys to be added): refused before anything is sent.
            let others = (1...31).map { "member\($0)" }
            for uid in others { try await relay.client(uid).signIn() }
            let large = try await alice.createGroup(name: "Many", members: ["bob"] + others)
            #expect(large.members.count == 33)
            let before = try await alice.outgoing().count
            await #expect(throws: ClientError.groupTooLargeForTyping(members: 33)) {
                try await alice.send(Payload(typing: Typing(active: true)), type: .typing, toGroup: large.id)
            }
            #expect(try await alice.outgoing().count == before)
        }
    }

    /// spec/groups.md §4.5's typing rate, on the client's typing clock (moved by the test, no
    /// sleeps): an `active: true` within 5 s of the last one sent to the group is not sent, one 5 s
    /// after goes; `active: false` always goes; the rate is per group. Counted on the relay's rows
    /// and in what bob receives.
    @Test func typingToAGroupIsAtMostOneActivePer5Seconds() async throws {
        try await withTestRelay { relay in
            let users = try await relay.signedInClients(["alice", "bob"])
            let alice = users[0], bob = users[1]
            let group = try await alice.createGroup(name: "Two", members: ["bob"])
            let other = try await alice.createGroup(name: "Other", members: ["bob"])
            _ = try await bob.receive()
            let start = ContinuousClock.now
            func typing(_ active: Bool, at seconds: Double, to id: GroupID) async throws -> GroupSendOutcome {
                await alice.setTypingClock(start + .seconds(seconds))
                return try await alice.send(Payload(typing: Typing(active: active)), type: .typing, toGroup: id)
            }
            var sent: [String] = []
            let first = try await typing(true, at: 0, to: group.id)
            #expect(first.copies.keys.sorted() == ["bob"])
            sent.append(first.messageID)
            let soon = try await typing(true, at: 1, to: group.id)
            #expect(soon.copies.isEmpty && soon.messageID.isEmpty, "1 s after the last one: not sent")
            let stopped = try await typing(false, at: 1, to: group.id)
            #expect(stopped.copies.keys.sorted() == ["bob"], "active: false always goes")
            sent.append(stopped.messageID)
            let elsewhere = try await typing(true, at: 1, to: other.id)
            #expect(elsewhere.copies.keys.sorted() == ["bob"], "the rate is per group")
            sent.append(elsewhere.messageID)
            #expect(try await typing(true, at: 4.9, to: group.id).copies.isEmpty, "4.9 s after the last one sent")
            let again = try await typing(true, at: 5, to: group.id)
            #expect(again.copies.keys.sorted() == ["bob"], "5 s after the last one sent")
            sent.append(again.messageID)
            #expect(try await typing(true, at: 9, to: group.id).copies.isEmpty, "counted from the last one sent, not the first")
            #expect(try await typing(false, at: 9, to: group.id).copies.keys.sorted() == ["bob"])
            #expect(try await typing(false, at: 9, to: group.id).copies.keys.sorted() == ["bob"], "every active: false")

            // The relay holds exactly the indicators sent, and bob gets exactly those.
            #expect(Set(sent).count == 4)
            let onRelay = try await mailbox("bob", relay)
            #expect(onRelay.count == 6 && Set(onRelay).isSuperset(of: sent), "\(onRelay)")
            let got = try await bob.receive()
            #expect(got.allSatisfy { $0.message.type == .typing } && got.count == 6, "\(got.map(\.message.type))")
            #expect(got.map { $0.message.payload.typing?.active } == [true, false, true, true, false, false])
            #expect(got.map(\.group?.id) == [group.id, group.id, other.id, group.id, group.id, group.id])
        }
    }

    @Test func unsendingAGroupMessageErasesEveryCopyNotReceivedYet() async throws {
        try await withTestRelay { relay in
            let users = try await relay.signedInClients(["alice", "bob", "carol", "dave"])
            let alice = users[0], bob = users[1]
            let group = try await alice.createGroup(name: "Crew", members: ["bob", "carol", "dave"])
            for member in users.dropFirst() { _ = try await member.receive() }
            let sent = try await alice.send(text: "oops, wrong group", toGroup: group.id)
            #expect(sent.allSent)
            _ = try await bob.receive()  // bob has his copy already

            let erased = try await alice.unsend(sent.messageID, toGroup: group.id)
            #expect(erased == ["carol", "dave"])
            for uid in ["carol", "dave"] { #expect(try await !mailbox(uid, relay).contains(sent.messageID), "\(uid)'s copy erased") }
            #expect(try await users[2].receive().isEmpty)
            await #expect(throws: ClientError.notResendable(id: "nope")) { try await alice.unsend("nope", toGroup: group.id) }
        }
    }
}

extension MailslotClient {
    /// Stops the clock the typing rate reads at `instant` (until set again).
    fileprivate func setTypingClock(_ instant: ContinuousClock.Instant) { typingClock = { instant } }
}
