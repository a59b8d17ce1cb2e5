import Foundation
import Testing
@testable import MailslotRelay

/// The hub's in-memory hand-over: what a subscription may deliver without reading the store.
@Suite struct MailboxHubTests {
    private func message(_ seq: Int64, to recipient: String = "bob", bytes: Int = 512) -> StoredMessage {
        StoredMessage(seq: seq, recipient: recipient, id: "01KF\(String(repeating: "0", count: 22 - String(seq).count))\(seq)",
                      author: "alice", createdAt: 0, expiresAt: .max, envelope: String(repeating: "A", count: (bytes * 4 + 2) / 3), size: bytes)
    }

    @Test func pushedMessagesAreHandedOverInOrderAndOnlyToTheirMailbox() {
        let hub = MailboxHub()
        let (bob, _) = hub.subscribe("bob")
        let (carol, _) = hub.subscribe("carol")
        bob.startStoreRead()
        for seq: Int64 in 1...5 { hub.push(message(seq)) }
        hub.push(message(6, to: "carol"))
        #expect(bob.takeFresh(limit: 3)?.map(\.seq) == [1, 2, 3])
        #expect(bob.takeFresh(limit: 10)?.map(\.seq) == [4, 5])
        #expect(bob.takeFresh(limit: 10)?.isEmpty == true)
        #expect(carol.takeFresh(limit: 10)?.map(\.seq) == [6])
    }

    @Test func anErasedMessageIsRetracted() {
        let hub = MailboxHub()
        let (bob, _) = hub.subscribe("bob")
        for seq: Int64 in 1...3 { hub.push(message(seq)) }
        hub.retract("bob", id: message(2).id)
        #expect(bob.takeFresh(limit: 10)?.map(\.seq) == [1, 3])
    }

    @Test func pastItsLimitsOrWithAFullWindowTheSubscriptionMustReadTheStore() {
        let hub = MailboxHub()
        let (bob, _) = hub.subscribe("bob")
        for seq in 1...Int64(MailboxHub.Subscription.freshLimit.messages + 1) { hub.push(message(seq, bytes: 1)) }
        #expect(bob.takeFresh(limit: 10) == nil, "over the message limit: only the store has them all")
        bob.startStoreRead()
        hub.push(message(1000))
        #expect(bob.takeFresh(limit: 10)?.map(\.seq) == [1000], "kept again after a store read")

        let bytes = MailboxHub.Subscription.freshLimit.bytes / 2 + 1
        hub.push(message(1001, bytes: bytes))
        hub.push(message(1002, bytes: bytes))
        #expect(bob.takeFresh(limit: 10) == nil, "over the byte limit")

        bob.startStoreRead()
        bob.forgetFresh()
        hub.push(message(2000))
        #expect(bob.takeFresh(limit: 10) == nil, "a full window keeps nothing in memory")
    }

    @Test func aNewerSubscriptionReplacesTheOlderAndGetsThePushes() async {
        let hub = MailboxHub()
        let (older, _) = hub.subscribe("bob")
        let (newer, replaced) = hub.subscribe("bob")
        #expect(replaced === older)
        hub.push(message(1))
        #expect(newer.takeFresh(limit: 10)?.map(\.seq) == [1])
        #expect(older.takeFresh(limit: 10)?.isEmpty == true)
        #expect(older.isEnded && !newer.isEnded)
        hub.unsubscribe("bob", older)
        #expect(hub.count == 1, "unsubscribing the replaced one leaves the newer in place")
    }
}
