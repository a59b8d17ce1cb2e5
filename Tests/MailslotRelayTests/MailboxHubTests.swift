import Foundation
import Testing
@testable import MailslotRelay

/// A ``MailboxListener`` that writes down what it hears, in order.
final class RecordingListener: MailboxListener {
    let heard = Shared<[String]>([])
    func committed(_ message: StoredMessage) { heard.update { $0.append("committed \(message.seq)") } }
    func erased(_ id: String) { heard.update { $0.append("erased \(id)") } }
    func recheck() { heard.update { $0.append("recheck") } }
    func ended() { heard.update { $0.append("ended") } }
    func prekeysLow(_ count: Int) { heard.update { $0.append("prekeys \(count)") } }
}

/// The hub's routing: each mailbox's commits and events reach its live subscription, and only it.
/// (What a subscription does with them is ``SubscriberStateMachine``'s: its tests.)
@Suite struct MailboxHubTests {
    private func message(_ seq: Int64, to recipient: String = "bob") -> StoredMessage {
        StoredMessage(seq: seq, recipient: recipient, id: "01KF\(String(repeating: "0", count: 22 - String(seq).count))\(seq)",
                      author: "alice", createdAt: 0, expiresAt: .max, envelope: "AAAA", size: 3)
    }

    @Test func commitsReachTheirMailboxsSubscriptionInOrderAndOnlyIt() {
        let hub = MailboxHub()
        let bob = RecordingListener(), carol = RecordingListener()
        _ = hub.subscribe("bob", listener: bob)
        _ = hub.subscribe("carol", listener: carol)
        for seq: Int64 in 1...3 { hub.committed(message(seq)) }
        hub.committed(message(4, to: "carol"))
        hub.committed(message(5, to: "dave"))
        hub.erased("bob", id: message(2).id)
        #expect(bob.heard.value == ["committed 1", "committed 2", "committed 3", "erased \(message(2).id)"])
        #expect(carol.heard.value == ["committed 4"])
    }

    /// The hub is its store's observer: local commits and other relays' arrive by that one route.
    @Test func whatTheStorePublishesReachesTheSubscription() {
        let hub = MailboxHub()
        let bob = RecordingListener()
        _ = hub.subscribe("bob", generation: 5, listener: bob)
        let observer: any CommitObserver = hub
        observer.committed(.created(message(1), wakeups: false))
        observer.committed(.erased(recipient: "bob", id: message(1).id))
        observer.committed(.elsewhere(.changed(mailboxes: ["bob"])))
        observer.committed(.elsewhere(.subscribed(mailbox: "bob", generation: 6)))
        #expect(bob.heard.value == ["committed 1", "erased \(message(1).id)", "recheck", "ended"])
    }

    @Test func aNewerSubscriptionReplacesTheOlderAndGetsTheCommits() {
        let hub = MailboxHub()
        let older = RecordingListener(), newer = RecordingListener()
        let (first, _) = hub.subscribe("bob", listener: older)
        let (second, replaced) = hub.subscribe("bob", listener: newer)
        #expect(replaced === first)
        hub.committed(message(1))
        #expect(older.heard.value == ["ended"], "ended once, and told nothing after")
        #expect(newer.heard.value == ["committed 1"])
        #expect(first.isEnded && !second.isEnded)
        hub.unsubscribe("bob", first)
        #expect(hub.count == 1, "unsubscribing the replaced one leaves the newer in place")
        #expect(older.heard.value == ["ended"])
        hub.unsubscribe("bob", second)
        hub.committed(message(2))
        #expect(newer.heard.value == ["committed 1", "ended"] && hub.count == 0)
    }
}
