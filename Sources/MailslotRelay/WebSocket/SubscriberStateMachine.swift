import NIOCore

/// What one subscription socket decides, without doing any of it: the window of unacknowledged
/// deliveries, the catch-up from the store and the hand-over of fresh commits, acknowledgements,
/// the reader's queue of frames, pings, and closing. Each event (a frame arrived, a message was
/// committed, the backlog was loaded, an ack committed, a newer subscription took over, the
/// socket closed…) is a `mutating` call that returns what to do; ``Subscriber`` is the shell that
/// does it (reads the store through ``MailboxService``, writes frames, runs tasks and timers).
/// No I/O, no locks, no clock: the shell passes the time in, and holds the machine in one lock.
///
/// The shape follows postgres-nio's `ListenStateMachine` (docs/architecture.md "Subscriptions"):
/// a value, driven event by event, so that every order of events — an ack for an id never
/// delivered, a commit while the backlog loads, a takeover mid-load, a close while a write is
/// owed — can be tested directly (`SubscriberStateMachineTests`).
///
/// `Lease` is the hub's registration (``MailboxHub/Subscription``) and `Timer` the scheduled
/// tick (`Scheduled<Void>`): the machine keeps them so that closing hands each back exactly once.
struct SubscriberStateMachine<Lease: Sendable, Timer: Sendable>: Sendable {
    typealias Principal = SessionService.Principal
    typealias CloseReason = Subscriptions.CloseReason

    /// The bounds one socket works within.
    struct Limits: Sendable {
        /// Deliveries unacknowledged at once.
        var window: Int
        /// Frames read but not yet started beyond which the socket stops reading (TCP pushes back).
        var maxWaitingFrames = Subscriptions.maxWaitingFrames
        /// Messages, and envelope bytes, kept in memory between two turns of delivery (more, and
        /// the store is read instead): a caught-up subscription delivers commits without reading
        /// them back, and one that falls behind costs no memory.
        var freshMessages = 256
        var freshBytes = 256 * 1024
        /// Malformed frames after which the socket is closed.
        var maxMalformedFrames = 10
    }

    /// Where the socket is in its life.
    enum Phase: Sendable, Equatable {
        /// Upgraded: authenticating, subscribing, writing `ready`. Frames wait; nothing is delivered.
        case starting
        /// `ready` went out: frames are read and deliveries flow.
        case open
        /// Closed (for any reason): every later event is a no-op.
        case closed
    }

    /// Messages committed to the mailbox since the last store read, in commit order.
    private struct Fresh: Sendable {
        var messages: [StoredMessage] = []
        var bytes = 0
        /// Some message was not kept (the buffer overflowed, the window was full, another relay
        /// wrote): only the store has them all, and the next turn reads it.
        var incomplete = false
    }

    private let limits: Limits
    private(set) var phase = Phase.starting
    private var principal: Principal?
    private var lease: Lease?
    private var timer: Timer?
    /// Counted in `mailslot_websockets_open`.
    private var counted = false
    /// A low-water count that arrived before `ready` went out: sent right after it.
    private var prekeysOwed: Int?

    // Reading
    private var waiting = CircularBuffer<(data: ByteBuffer, text: Bool)>(initialCapacity: 1)
    private var readerRunning = false
    /// The channel asked to read while `waiting` was full; read once the reader catches up.
    private var readHeld = false
    private var malformed = 0
    /// Set when the socket is to close once the answers already queued are written.
    private var closeAfterAnswers: CloseReason?

    // Delivering
    private var delivering = false
    /// A backlog read is in flight (the delivery task awaits it).
    private var loading = false
    /// The `seq` of the last message delivered.
    private var cursor: Int64 = 0
    /// The last store read came back short: from then on, commits are delivered from `fresh`.
    private var caughtUp = false
    private var fresh = Fresh()
    /// Delivered and not yet acknowledged (the window).
    private var inFlight = Set<String>()

    // Pings
    private var lastPing: Int64 = 0
    private var awaitingPong = false

    init(limits: Limits) {
        self.limits = limits
    }

    /// Deliveries unacknowledged now.
    var unacknowledged: Int { inFlight.count }

    // MARK: Opening

    /// The socket was upgraded and the subscription begins: true when it is counted as open
    /// (false when it closed first).
    mutating func starting() -> Bool {
        guard phase == .starting, !counted else { return false }
        counted = true
        return true
    }

    /// What to do once the hub registered the subscription.
    enum SubscribedAction: Sendable {
        /// Count the mailbox and write `ready`; then ``readySent(now:)``.
        case sendReady
        /// The socket closed meanwhile: leave the hub again.
        case unsubscribe(Lease)
    }

    /// The principal was authenticated and the hub registered `lease`.
    mutating func subscribed(_ principal: Principal, lease: Lease) -> SubscribedAction {
        guard phase == .starting else { return .unsubscribe(lease) }
        self.principal = principal
        self.lease = lease
        return .sendReady
    }

    /// What to start once `ready` went out.
    struct OpenedAction: Sendable, Equatable {
        /// A `prekeys` frame owed since before `ready`.
        var prekeys: Int?
        /// Frames arrived meanwhile: start the reader.
        var startReader: Bool
        /// Start the delivery task (the backlog).
        var startDelivery: Bool
    }

    /// `ready` was written: the socket is open. Nil when it closed meanwhile (nothing to start).
    mutating func readySent(now: Int64) -> OpenedAction? {
        guard phase == .starting else { return nil }
        phase = .open
        lastPing = now
        defer { prekeysOwed = nil }
        let startReader = !waiting.isEmpty && !readerRunning
        if startReader { readerRunning = true }
        return OpenedAction(prekeys: prekeysOwed, startReader: startReader, startDelivery: wake())
    }

    /// A claim took the owner's one-time prekeys below the low-water mark: the count to send
    /// now, or nil (kept until `ready` is out, or dropped once closed).
    mutating func prekeysLow(_ count: Int) -> Int? {
        switch phase {
        case .open: return count
        case .starting:
            prekeysOwed = count
            return nil
        case .closed: return nil
        }
    }

    // MARK: Delivering

    /// Whether to start the delivery task: the socket is open and none runs.
    private mutating func wake() -> Bool {
        guard phase == .open, !delivering else { return false }
        delivering = true
        return true
    }

    /// The store committed `message` to this mailbox (in commit order): kept for delivery
    /// without a store read, within the bounds. True: start the delivery task.
    mutating func messageCommitted(_ message: StoredMessage) -> Bool {
        guard phase != .closed else { return false }
        if !fresh.incomplete {
            if fresh.messages.count < limits.freshMessages, fresh.bytes + message.size <= limits.freshBytes {
                fresh.messages.append(message)
                fresh.bytes += message.size
            } else {
                fresh = Fresh(incomplete: true)
            }
        }
        return wake()
    }

    /// Message `id` was erased (an unsend): it must not be delivered from memory.
    mutating func messageErased(_ id: String) {
        guard let index = fresh.messages.firstIndex(where: { $0.id == id }) else { return }
        fresh.bytes -= fresh.messages.remove(at: index).size
    }

    /// The mailbox changed in ways this relay did not see (another relay wrote, or signals were
    /// missed): the next turn reads the store. True: start the delivery task.
    mutating func recheck() -> Bool {
        guard phase != .closed else { return false }
        fresh = Fresh(incomplete: true)
        return wake()
    }

    /// Try delivering again (after a temporary store failure). True: start the delivery task.
    mutating func retryDelivery() -> Bool { wake() }

    /// The delivery task's next step.
    enum DeliveryAction: Sendable, Equatable {
        /// Write these message frames, in order; `newlyUnacknowledged` of them joined the window
        /// (the `mailslot_messages_unacked` gauge). Then ask ``nextDelivery(now:)`` again.
        case send([StoredMessage], newlyUnacknowledged: Int)
        /// Read the mailbox after `after`, at most `limit` messages; then ``backlogLoaded(_:more:now:)``
        /// or ``backlogFailed(temporary:socketActive:)``.
        case loadBacklog(after: Int64, limit: Int)
        /// Close the socket.
        case close(CloseReason)
        /// Nothing to deliver now: the delivery task ends (an event that brings work starts another).
        case stop
    }

    /// What the delivery task does next. It delivers from the store until a read comes back
    /// short, then from `fresh` — until `fresh` is incomplete, and it reads the store again.
    mutating func nextDelivery(now: Int64) -> DeliveryAction {
        guard phase == .open, let principal else { return stopDelivering() }
        if now >= principal.expiresAt { return .close(.sessionEnded) }
        let room = limits.window - inFlight.count
        guard room > 0 else {
            fresh = Fresh(incomplete: true)  // what lands meanwhile waits on disk, not here
            return stopDelivering()
        }
        guard caughtUp, !fresh.incomplete else {
            // Everything committed from now on is kept; what was committed before is in the read.
            fresh = Fresh()
            loading = true
            return .loadBacklog(after: cursor, limit: room)
        }
        guard !fresh.messages.isEmpty else { return stopDelivering() }
        let taken = fresh.messages.prefix(room)
        fresh.messages.removeFirst(taken.count)
        fresh.bytes -= taken.reduce(0) { $0 + $1.size }
        // A message the last store read brought may have been handed over as well.
        return deliver(taken.filter { $0.seq > cursor && $0.expiresAt > now })
    }

    /// The backlog read came back: `messages` after the cursor, and whether `more` wait.
    mutating func backlogLoaded(_ messages: [StoredMessage], more: Bool, now: Int64) -> DeliveryAction {
        guard loading else { return stopDelivering() }
        loading = false
        guard phase == .open else { return stopDelivering() }
        caughtUp = !more
        return deliver(messages.filter { $0.seq > cursor })
    }

    /// What to do after a failed backlog read.
    enum BacklogFailedAction: Sendable, Equatable {
        /// The database is out of reach or busy: try again in a second (and at every wake-up meanwhile).
        case retryLater
        case close(CloseReason)
    }

    /// The backlog read failed: temporarily (the database out of reach or busy) or not; the
    /// socket still active or not.
    mutating func backlogFailed(temporary: Bool, socketActive: Bool) -> BacklogFailedAction {
        loading = false
        caughtUp = false
        guard temporary, socketActive else { return .close(socketActive ? .serverError : .clientLeft) }
        _ = stopDelivering()
        return .retryLater
    }

    /// Puts `messages` in flight and moves the cursor past them. An empty batch (all filtered
    /// out) is `send([])`: the task asks again, and finds the next step.
    private mutating func deliver(_ messages: [StoredMessage]) -> DeliveryAction {
        guard let last = messages.last else { return .send([], newlyUnacknowledged: 0) }
        cursor = last.seq
        var added = 0
        for message in messages where inFlight.insert(message.id).inserted { added += 1 }
        return .send(messages, newlyUnacknowledged: added)
    }

    private mutating func stopDelivering() -> DeliveryAction {
        delivering = false
        return .stop
    }

    // MARK: Acknowledgements

    /// What an ack's commit changes.
    enum AckAction: Sendable, Equatable {
        /// The id was not in flight here (never delivered on this socket, acked twice, or the
        /// socket closed): nothing changes.
        case unknown
        /// Left the window (`mailslot_messages_unacked` falls by one); start the delivery task if told.
        case acknowledged(startDelivery: Bool)
    }

    /// The erasure an ack asked for was answered (committed, or found nothing to erase).
    mutating func ackCommitted(_ id: String) -> AckAction {
        guard phase != .closed, inFlight.remove(id) != nil else { return .unknown }
        return .acknowledged(startDelivery: wake())
    }

    // MARK: Reading

    /// A text or binary frame arrived. True: start the reader.
    mutating func frameReceived(_ data: ByteBuffer, text: Bool) -> Bool {
        guard phase != .closed else { return false }
        waiting.append((data, text))
        guard phase == .open, !readerRunning else { return false }
        readerRunning = true
        return true
    }

    /// Whether the channel should not read now: as many frames wait unstarted as allowed.
    mutating func holdRead() -> Bool {
        guard waiting.count >= limits.maxWaitingFrames else { return false }
        readHeld = true
        return true
    }

    /// The reader's next step.
    enum ReadAction: Sendable {
        /// Start this frame's work, as `principal`; first let the channel read again if told.
        case handle(ByteBuffer, text: Bool, principal: Principal, resumeReading: Bool)
        case close(CloseReason)
        /// No frame waits: the reader ends (the next frame starts another).
        case stop
    }

    /// What the reader does next.
    mutating func nextFrame(now: Int64) -> ReadAction {
        guard phase == .open, !waiting.isEmpty, let principal else {
            readerRunning = false
            waiting.removeAll()
            return .stop
        }
        if now >= principal.expiresAt { return .close(.sessionEnded) }
        let next = waiting.removeFirst()
        let resume = readHeld && waiting.count < limits.maxWaitingFrames / 2
        if resume { readHeld = false }
        return .handle(next.data, text: next.text, principal: principal, resumeReading: resume)
    }

    /// A frame was not a well-formed client frame (it gets an `error` answer). Past the limit,
    /// the reason to close with once the answers owed are written (the reader stops).
    mutating func malformedFrame() -> CloseReason? {
        malformed += 1
        guard malformed >= limits.maxMalformedFrames else { return nil }
        let reason = CloseReason.protocolViolation("too many malformed frames")
        closeAfterAnswers = reason
        return reason
    }

    /// The writer wrote every answer owed: the reason to close now, if one waits for that.
    func answersWritten() -> CloseReason? { closeAfterAnswers }

    // MARK: Pings and the session check

    /// Milliseconds until the next tick: the next ping, session check or the session's end.
    /// Nil unless open.
    func tickDelay(now: Int64, checkInterval: Double, pingInterval: Double) -> Int64? {
        guard phase == .open, let principal else { return nil }
        let remaining = Double(max(0, principal.expiresAt - now)) / 1000
        return Int64(min(remaining, checkInterval, pingInterval) * 1000)
    }

    /// The tick was scheduled: false when the socket closed meanwhile (cancel it).
    mutating func tickScheduled(_ timer: Timer) -> Bool {
        guard phase == .open else { return false }
        self.timer = timer
        return true
    }

    /// What a tick does.
    enum TickAction: Sendable, Equatable {
        /// Closed: nothing.
        case none
        /// Check the session again (then schedule the next tick); ping first if told.
        case check(Principal, ping: Bool)
        /// The last ping went unanswered: close.
        case pingTimeout
    }

    /// The tick fired.
    mutating func tick(now: Int64, pingInterval: Double) -> TickAction {
        guard phase == .open, let principal else { return .none }
        timer = nil
        guard Double(now - lastPing) >= pingInterval * 1000 else { return .check(principal, ping: false) }
        if awaitingPong { return .pingTimeout }
        awaitingPong = true
        lastPing = now
        return .check(principal, ping: true)
    }

    /// A pong arrived.
    mutating func pong() { awaitingPong = false }

    // MARK: Closing

    /// What closing releases.
    enum CloseAction: Sendable {
        /// It was closed before.
        case alreadyClosed
        /// Leave the hub (`lease`), cancel the tick, uncount the socket if `counted`, and take
        /// `unacknowledged` off the gauge; then write the close frame.
        case close(lease: Lease?, timer: Timer?, counted: Bool, unacknowledged: Int)
    }

    /// The socket closes, for any reason: a newer subscription took over, the client left or
    /// closed, the session ended, the relay stops. Once; later events change nothing.
    mutating func close() -> CloseAction {
        guard phase != .closed else { return .alreadyClosed }
        phase = .closed
        defer {
            lease = nil
            timer = nil
            waiting.removeAll()
            inFlight.removeAll()
            fresh = Fresh()
            delivering = false
        }
        return .close(lease: lease, timer: timer, counted: counted, unacknowledged: inFlight.count)
    }
}
