import Foundation
import NIOCore
import Testing
@testable import MailslotRelay

/// ``SubscriberStateMachine`` driven event by event, without sockets, store or clock: each event
/// in each phase, and the odd orders a socket meets (an ack for an id never delivered, a commit
/// while the backlog loads, a takeover mid-load, a close while a write is owed).
@Suite struct SubscriberStateMachineTests {
    typealias Machine = SubscriberStateMachine<String, Int>

    static let now: Int64 = 1_000_000
    static let principal = SessionService.Principal(uid: "bob", family: Data([1]), expiresAt: now + 3_600_000)

    private func message(_ seq: Int64, bytes: Int = 3, expiresAt: Int64 = .max) -> StoredMessage {
        StoredMessage(seq: seq, recipient: "bob", id: "m\(seq)", author: "alice", createdAt: 0, expiresAt: expiresAt,
                      envelope: String(repeating: "A", count: (bytes * 4 + 2) / 3), size: bytes)
    }

    /// A machine past `ready`, its delivery task started (the first backlog load not yet asked for).
    private func open(window: Int = 4, freshMessages: Int = 256, freshBytes: Int = 256 * 1024) -> Machine {
        var machine = Machine(limits: .init(window: window, freshMessages: freshMessages, freshBytes: freshBytes))
        #expect(machine.starting() == true)
        guard case .sendReady = machine.subscribed(Self.principal, lease: "lease") else {
            Issue.record("a starting socket sends ready")
            return machine
        }
        #expect(machine.readySent(now: Self.now) == .init(prekeys: nil, startReader: false, startDelivery: true))
        return machine
    }

    /// `open()`, caught up with an empty mailbox: the delivery task has stopped.
    private func caughtUp(window: Int = 4, freshMessages: Int = 256, freshBytes: Int = 256 * 1024) -> Machine {
        var machine = open(window: window, freshMessages: freshMessages, freshBytes: freshBytes)
        #expect(machine.nextDelivery(now: Self.now) == .loadBacklog(after: 0, limit: window))
        #expect(machine.backlogLoaded([], more: false, now: Self.now) == .send([], newlyUnacknowledged: 0))
        #expect(machine.nextDelivery(now: Self.now) == .stop)
        return machine
    }

    private func seqs(_ action: Machine.DeliveryAction) -> [Int64]? {
        guard case .send(let messages, _) = action else { return nil }
        return messages.map(\.seq)
    }

    // MARK: Opening

    @Test func startingCountsOnceAndASocketClosedBeforeSubscribingLeavesTheHubAgain() {
        var machine = Machine(limits: .init(window: 4))
        #expect(machine.starting() == true)
        #expect(machine.starting() == false, "counted once")
        guard case .close(nil, nil, counted: true, unacknowledged: 0) = machine.close() else {
            Issue.record("closing a starting socket releases nothing but its count")
            return
        }
        guard case .unsubscribe("lease") = machine.subscribed(Self.principal, lease: "lease") else {
            Issue.record("the hub registered it after the close: leave again")
            return
        }
        #expect(machine.readySent(now: Self.now) == nil)
        var never = Machine(limits: .init(window: 4))
        _ = never.close()
        #expect(never.starting() == false, "closed before it started: not counted")
    }

    @Test func framesAndLowPrekeysBeforeReadyWaitForIt() {
        var machine = Machine(limits: .init(window: 4))
        _ = machine.starting()
        #expect(machine.frameReceived(ByteBuffer(string: "{}"), text: true) == false, "no reader before ready")
        #expect(machine.prekeysLow(24) == nil, "owed until ready is out")
        #expect(machine.messageCommitted(message(1)) == false, "no delivery before ready")
        _ = machine.subscribed(Self.principal, lease: "lease")
        #expect(machine.readySent(now: Self.now) == .init(prekeys: 24, startReader: true, startDelivery: true))
        #expect(machine.prekeysLow(23) == 23, "open: sent at once")
        _ = machine.close()
        #expect(machine.prekeysLow(22) == nil, "closed: dropped")
    }

    // MARK: Backlog and the hand-over of commits

    @Test func theBacklogIsReadUntilAShortReadThenCommitsComeFromMemory() {
        var machine = open(window: 10)
        #expect(machine.nextDelivery(now: Self.now) == .loadBacklog(after: 0, limit: 10))
        #expect(seqs(machine.backlogLoaded([message(1), message(2)], more: true, now: Self.now)) == [1, 2])
        #expect(machine.unacknowledged == 2)
        #expect(machine.nextDelivery(now: Self.now) == .loadBacklog(after: 2, limit: 8), "more waited: read on from the cursor")
        #expect(seqs(machine.backlogLoaded([message(3)], more: false, now: Self.now)) == [3])
        #expect(machine.nextDelivery(now: Self.now) == .stop, "caught up, nothing fresh")
        #expect(machine.messageCommitted(message(4)) == true, "the task stopped: a commit starts it")
        #expect(machine.messageCommitted(message(5)) == false, "one runs already")
        #expect(seqs(machine.nextDelivery(now: Self.now)) == [4, 5], "from memory, no store read")
        #expect(machine.nextDelivery(now: Self.now) == .stop)
    }

    @Test func aCommitDuringTheBacklogLoadIsDeliveredOnceAfterIt() {
        var machine = open(window: 10)
        #expect(machine.nextDelivery(now: Self.now) == .loadBacklog(after: 0, limit: 10))
        // Committed while the read runs: the read may or may not have seen them.
        #expect(machine.messageCommitted(message(1)) == false, "the delivery task is busy loading")
        #expect(machine.messageCommitted(message(2)) == false)
        #expect(seqs(machine.backlogLoaded([message(1)], more: false, now: Self.now)) == [1])
        #expect(seqs(machine.nextDelivery(now: Self.now)) == [2], "what the read already brought is not sent twice")
        #expect(machine.nextDelivery(now: Self.now) == .stop)
        #expect(machine.unacknowledged == 2)
    }

    @Test func anUnsentMessageIsNotDeliveredFromMemoryNorAnExpiredOne() {
        var machine = caughtUp()
        _ = machine.messageCommitted(message(1))
        _ = machine.messageCommitted(message(2, expiresAt: Self.now))
        _ = machine.messageCommitted(message(3))
        machine.messageErased("m1")
        machine.messageErased("m99")
        #expect(seqs(machine.nextDelivery(now: Self.now)) == [3])
    }

    @Test func beyondWhatMemoryHoldsOrWhenAnotherRelayWroteTheStoreIsReadAgain() {
        var machine = caughtUp(freshMessages: 2, freshBytes: 10)
        for seq: Int64 in 1...3 { _ = machine.messageCommitted(message(seq)) }
        #expect(machine.nextDelivery(now: Self.now) == .loadBacklog(after: 0, limit: 4), "over the message bound")
        #expect(seqs(machine.backlogLoaded([message(1), message(2), message(3)], more: false, now: Self.now)) == [1, 2, 3])
        #expect(machine.nextDelivery(now: Self.now) == .stop)
        _ = machine.messageCommitted(message(4, bytes: 6))
        _ = machine.messageCommitted(message(5, bytes: 6))
        #expect(machine.nextDelivery(now: Self.now) == .loadBacklog(after: 3, limit: 1), "over the byte bound")
        _ = machine.backlogLoaded([message(4)], more: true, now: Self.now)
        #expect(machine.nextDelivery(now: Self.now) == .stop, "the window is full")

        var other = caughtUp()
        #expect(other.recheck() == true, "another relay wrote: start the task")
        #expect(other.nextDelivery(now: Self.now) == .loadBacklog(after: 0, limit: 4))
    }

    @Test func aFullWindowKeepsNothingInMemoryAndAnAckReopensIt() {
        var machine = caughtUp(window: 2)
        _ = machine.messageCommitted(message(1))
        _ = machine.messageCommitted(message(2))
        #expect(seqs(machine.nextDelivery(now: Self.now)) == [1, 2])
        #expect(machine.messageCommitted(message(3)) == false, "the task still runs")
        #expect(machine.nextDelivery(now: Self.now) == .stop, "the window is full")
        #expect(machine.messageCommitted(message(4)) == true, "woken, but…")
        #expect(machine.nextDelivery(now: Self.now) == .stop, "…the window is still full, and what came waits on disk")
        #expect(machine.ackCommitted("m1") == .acknowledged(startDelivery: true))
        #expect(machine.nextDelivery(now: Self.now) == .loadBacklog(after: 2, limit: 1), "read back from the store, not from memory")
    }

    @Test func aTemporaryStoreFailureIsRetriedAndAnyOtherCloses() {
        var machine = open()
        #expect(machine.nextDelivery(now: Self.now) == .loadBacklog(after: 0, limit: 4))
        #expect(machine.backlogFailed(temporary: true, socketActive: true) == .retryLater)
        #expect(machine.retryDelivery() == true, "the retry (or any wake-up) starts the task")
        #expect(machine.nextDelivery(now: Self.now) == .loadBacklog(after: 0, limit: 4))
        #expect(machine.backlogFailed(temporary: false, socketActive: true) == .close(.serverError))
        var gone = open()
        _ = gone.nextDelivery(now: Self.now)
        #expect(gone.backlogFailed(temporary: true, socketActive: false) == .close(.clientLeft))
    }

    @Test func anExpiredSessionClosesAtTheNextDelivery() {
        var machine = open()
        #expect(machine.nextDelivery(now: Self.principal.expiresAt) == .close(.sessionEnded))
    }

    // MARK: Acknowledgements

    @Test func anAckForAnIdNeverDeliveredOrAckedTwiceChangesNothing() {
        var machine = caughtUp(window: 1)
        #expect(machine.ackCommitted("m1") == .unknown, "never delivered here")
        _ = machine.messageCommitted(message(1))
        #expect(seqs(machine.nextDelivery(now: Self.now)) == [1])
        #expect(machine.nextDelivery(now: Self.now) == .stop)
        #expect(machine.ackCommitted("m1") == .acknowledged(startDelivery: true))
        #expect(machine.ackCommitted("m1") == .unknown, "acked twice")
        #expect(machine.unacknowledged == 0)
    }

    @Test func anAckWhileTheTaskRunsDoesNotStartAnother() {
        var machine = open()
        _ = machine.nextDelivery(now: Self.now)
        _ = machine.backlogLoaded([message(1)], more: false, now: Self.now)
        #expect(machine.ackCommitted("m1") == .acknowledged(startDelivery: false))
    }

    // MARK: Takeover and closing

    @Test func aTakeoverDuringTheBacklogLoadDeliversNothingMore() {
        var machine = open()
        #expect(machine.nextDelivery(now: Self.now) == .loadBacklog(after: 0, limit: 4))
        guard case .close(lease: "lease", timer: nil, counted: true, unacknowledged: 0) = machine.close() else {
            Issue.record("the takeover releases the hub entry")
            return
        }
        #expect(machine.backlogLoaded([message(1)], more: false, now: Self.now) == .stop, "loaded after the close: not sent")
        #expect(machine.unacknowledged == 0, "nothing counted in flight")
        #expect(machine.messageCommitted(message(2)) == false)
        #expect(machine.recheck() == false)
        guard case .alreadyClosed = machine.close() else {
            Issue.record("closed once")
            return
        }
    }

    @Test func aCloseWhileWritesAreOwedUncountsTheWindowOnceAndLaterAcksChangeNothing() {
        var machine = caughtUp()
        _ = machine.messageCommitted(message(1))
        _ = machine.messageCommitted(message(2))
        #expect(seqs(machine.nextDelivery(now: Self.now)) == [1, 2], "the shell is writing these")
        #expect(machine.tickScheduled(7) == true)
        guard case .close(lease: "lease", timer: 7, counted: true, unacknowledged: 2) = machine.close() else {
            Issue.record("the close hands back the lease, the timer, and the two in flight")
            return
        }
        #expect(machine.nextDelivery(now: Self.now) == .stop)
        #expect(machine.ackCommitted("m1") == .unknown, "the close already uncounted it")
        #expect(machine.tickScheduled(8) == false, "a tick scheduled after the close is cancelled")
        #expect(machine.tick(now: Self.now, pingInterval: 30) == .none)
    }

    // MARK: Reading

    @Test func framesAreReadInOrderAndTheChannelIsHeldWhileTooManyWait() {
        var machine = open()
        #expect(machine.frameReceived(ByteBuffer(string: "1"), text: true) == true, "starts the reader")
        #expect(machine.frameReceived(ByteBuffer(string: "2"), text: false) == false, "the reader runs")
        for n in 3...Subscriptions.maxWaitingFrames { _ = machine.frameReceived(ByteBuffer(string: "\(n)"), text: true) }
        #expect(machine.holdRead() == true, "full: hold the channel's reads")
        guard case .handle(let first, text: true, principal: Self.principal, resumeReading: false) = machine.nextFrame(now: Self.now) else {
            Issue.record("the first frame")
            return
        }
        #expect(String(buffer: first) == "1")
        guard case .handle(_, text: false, principal: _, resumeReading: false) = machine.nextFrame(now: Self.now) else {
            Issue.record("the second frame, binary")
            return
        }
        var resumed = false
        while case .handle(_, _, _, let resume) = machine.nextFrame(now: Self.now) { resumed = resumed || resume }
        #expect(resumed, "the channel reads again once half have been started")
        #expect(machine.holdRead() == false)
        #expect(machine.frameReceived(ByteBuffer(string: "next"), text: true) == true, "the reader stopped: the next frame starts one")
    }

    @Test func tooManyMalformedFramesCloseAfterTheirAnswers() {
        var machine = open()
        for _ in 1..<10 { #expect(machine.malformedFrame() == nil) }
        #expect(machine.answersWritten() == nil)
        #expect(machine.malformedFrame() == .protocolViolation("too many malformed frames"))
        #expect(machine.answersWritten() == .protocolViolation("too many malformed frames"))
    }

    @Test func aFrameOfAnExpiredSessionClosesAndAClosedSocketReadsNothing() {
        var machine = open()
        _ = machine.frameReceived(ByteBuffer(string: "{}"), text: true)
        guard case .close(.sessionEnded) = machine.nextFrame(now: Self.principal.expiresAt) else {
            Issue.record("expired")
            return
        }
        _ = machine.close()
        #expect(machine.frameReceived(ByteBuffer(string: "{}"), text: true) == false)
        guard case .stop = machine.nextFrame(now: Self.now) else {
            Issue.record("closed: the reader stops")
            return
        }
    }

    // MARK: Pings

    @Test func aPingGoesOutWhenDueAndAnUnansweredOneCloses() {
        var machine = open()
        #expect(machine.tickDelay(now: Self.now, checkInterval: 60, pingInterval: 30) == 30_000)
        #expect(machine.tickDelay(now: Self.principal.expiresAt - 5_000, checkInterval: 60, pingInterval: 30) == 5_000,
                "the session's end comes first")
        #expect(machine.tick(now: Self.now + 10_000, pingInterval: 30) == .check(Self.principal, ping: false))
        #expect(machine.tick(now: Self.now + 30_000, pingInterval: 30) == .check(Self.principal, ping: true))
        machine.pong()
        #expect(machine.tick(now: Self.now + 60_000, pingInterval: 30) == .check(Self.principal, ping: true))
        #expect(machine.tick(now: Self.now + 90_000, pingInterval: 30) == .pingTimeout, "no pong since the last ping")
    }
}
