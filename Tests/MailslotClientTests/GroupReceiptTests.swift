import Foundation
@testable import MailslotClient
import MailslotTestSupport
import MailslotWire
import Testing

/// What goes to fewer than all members of a group (issue 30 item 2; spec/groups.md §4.4): a read
/// receipt to the author only, typing only to small groups; and unsending a group message
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
