import Foundation
import MailslotWire
import NIOCore
import NIOWebSocket
import Synchronization

/// One owner's subscription socket. It runs tasks only while it has work: a delivery task while
/// there may be something to deliver, a reader while frames wait to be started, a writer while
/// answers are owed; each ends when its work is done. An idle subscription therefore holds no
/// task (a suspended task keeps every slab of async frames it ever needed, ~1 KB each): only this
/// object, its hub entry, one timer on its event loop and its channel.
///
/// The ``SubscriptionHandler`` feeds it frames and channel events on the event loop; the timer
/// pings the client and re-checks the session every `sessionCheckInterval` seconds.
final class Subscriber: Sendable {
    let session: SubscriptionSession
    let channel: any Channel
    let owner: String
    let authorization: String?
    private let inFlight: SubscriptionSession.InFlight
    private let answers = AnswerQueue(maxCount: SubscriptionSession.maxQueuedAnswers,
                                      maxBytes: SubscriptionSession.maxQueuedFrameBytes)
    private let state = Mutex(State())
    /// The delivery loop's position; only the one running delivery task touches it (a lock
    /// all the same: successive delivery tasks may run on different threads).
    private let cursor = Mutex((seq: Int64(0), caughtUp: false))
    /// Whether our close frame has gone out; on the event loop, where every frame is written
    /// after checking it, so that nothing follows the close (RFC 6455 §5.5.1).
    private let closeSent: NIOLoopBoundBox<Bool>

    private enum Phase { case starting, open, closed }

    private struct State {
        var phase = Phase.starting
        var principal: SessionService.Principal?
        var subscription: MailboxHub.Subscription?
        /// Counted in `mailslot_websockets_open`.
        var counted = false
        /// Frames read and not yet started: (data, is text).
        var waiting = CircularBuffer<(ByteBuffer, Bool)>(initialCapacity: 1)
        var readerRunning = false
        /// The channel asked to read while `waiting` was full; read once the reader catches up.
        var readHeld = false
        var delivering = false
        var deliverAgain = false
        var garbage = 0
        var tick: Scheduled<Void>?
        var lastPing: Int64 = 0
        var awaitingPong = false
        /// Set when the socket is to close once the answers already queued are written.
        var closeAfterAnswers: SubscriptionSession.CloseReason?
        /// A low-water count that arrived before `ready` went out: sent right after it.
        var prekeysOwed: Int?
    }

    /// A subscriber for `channel`; made on its event loop.
    init(session: SubscriptionSession, channel: any Channel, owner: String, authorization: String?) {
        self.session = session
        self.channel = channel
        closeSent = NIOLoopBoundBox(false, eventLoop: channel.eventLoop)
        self.owner = owner
        self.authorization = authorization
        inFlight = SubscriptionSession.InFlight(metrics: session.metrics)
    }

    // MARK: Opening

    /// The upgrade is done. Some WebSocket clients drop a frame that reaches them in the same
    /// read as the 101 response (NIO's client upgrade does unless told to forward those bytes;
    /// the bench's idle-subscriber run lost `ready` frames that way). A short pause before the
    /// first frame keeps it out of that read; every later frame is unaffected.
    func upgraded() {
        channel.eventLoop.scheduleTask(in: .milliseconds(25)) {
            self.session.tasks.spawn { await self.start() }
        }
    }

    private func start() async {
        guard state.withLock({ state in
            guard state.phase == .starting else { return false }
            state.counted = true
            return true
        }) else { return }
        session.metrics.webSocketsOpen.increment()
        guard !session.tasks.isStopping else { return finish(.shuttingDown) }
        let principal: SessionService.Principal
        let generation: Int64?
        do {
            principal = try await session.sessions.authenticate(authorization: authorization, now: session.clock.now())
            try session.mailboxes.authorizeSubscription(principal, owner: owner)
            // With other relays on the store, they end their older subscriptions to this mailbox.
            generation = try await session.mailboxes.store.cluster?.announceSubscription(to: owner)
        } catch {
            return refuse(error)
        }
        let (subscription, _) = session.hub.subscribe(owner, generation: generation, onWake: { self.wake() },
                                                      onEnd: { self.finish(.replaced) },
                                                      onPrekeysLow: { self.prekeysLow($0) })
        guard state.withLock({ state in
            guard state.phase == .starting else { return false }
            state.principal = principal
            state.subscription = subscription
            return true
        }) else {
            session.hub.unsubscribe(owner, subscription)
            return
        }
        do {
            let pending = try await session.mailboxes.store.pendingCount(recipient: owner, now: session.clock.now())
            // The owner learns here when its one-time prekeys run low (spec/protocol.md §8.4).
            let prekeys = try await session.mailboxes.store.prekeyCount(uid: owner)
            try await write(SubscriptionSession.text(.ready(pending: pending, prekeys: prekeys)), waiting: true)
        } catch {
            return refuse(error)
        }
        let (startReader, prekeysOwed) = state.withLock { state -> (Bool, Int?) in
            guard state.phase == .starting else { return (false, nil) }
            state.phase = .open
            state.lastPing = session.clock.now()
            defer { state.prekeysOwed = nil }
            guard !state.waiting.isEmpty, !state.readerRunning else { return (false, state.prekeysOwed) }
            state.readerRunning = true
            return (true, state.prekeysOwed)
        }
        if let prekeysOwed { send(SubscriptionSession.text(.prekeys(prekeysOwed))) }
        scheduleTick()
        wake()
        if startReader { session.tasks.spawn { await self.readLoop() } }
    }

    /// Ends a subscription that could not start: a refusal (401, 403) or an unreachable database
    /// (503) is told in an error frame first — the upgrade cannot answer with a status itself —
    /// then the socket closes with 4000 + the status; anything else closes it with 1011.
    private func refuse(_ error: any Error) {
        guard error is Problem || error is StoreFailure else { return finish(.serverError) }
        let problem = Problem.answering(error)
        send(SubscriptionSession.text(.error(problem)))
        finish(.refused(UInt16(4000 + problem.code.status), problem.code.rawValue))
    }

    // MARK: Telling the owner

    /// A claim took the owner's one-time prekeys below the low-water mark: a `prekeys` frame
    /// (spec/protocol.md §8.4). One per crossing of the mark, so no queue is needed: it is written
    /// as it comes, after `ready` (one that comes while `ready` is being written follows it).
    private func prekeysLow(_ count: Int) {
        let sendNow = state.withLock { state -> Bool in
            switch state.phase {
            case .open: return true
            case .starting:
                state.prekeysOwed = count
                return false
            case .closed: return false
            }
        }
        if sendNow { send(SubscriptionSession.text(.prekeys(count))) }
    }

    // MARK: Delivering

    /// There may be something to deliver (a new message, or room in the window after an ack).
    private func wake() {
        let start = state.withLock { state -> Bool in
            guard state.phase == .open else { return false }
            guard !state.delivering else {
                state.deliverAgain = true
                return false
            }
            state.delivering = true
            return true
        }
        if start { session.tasks.spawn { await self.deliverLoop() } }
    }

    private func deliverLoop() async {
        while true {
            let context = state.withLock { state -> (SessionService.Principal, MailboxHub.Subscription)? in
                state.deliverAgain = false
                guard state.phase == .open, let principal = state.principal, let subscription = state.subscription else {
                    state.delivering = false
                    return nil
                }
                return (principal, subscription)
            }
            guard case let (principal, subscription)? = context else { return }
            if let reason = await deliver(principal: principal, subscription: subscription) {
                finish(reason)
                return
            }
            let again = state.withLock { state -> Bool in
                if state.deliverAgain && state.phase == .open { return true }
                state.delivering = false
                return false
            }
            if !again { return }
        }
    }

    /// Sends the mailbox's messages after the cursor while the window has room.
    ///
    /// It reads the store until a read comes back short (nothing more was stored when it
    /// began); from then on it delivers what the hub hands it, in commit order, without reading
    /// the store — until the hub reports that it did not keep everything, and it reads again.
    private func deliver(principal: SessionService.Principal, subscription: MailboxHub.Subscription) async -> SubscriptionSession.CloseReason? {
        if session.clock.now() >= principal.expiresAt { return .sessionEnded }
        var (cursor, caughtUp) = self.cursor.withLock { $0 }
        defer { self.cursor.withLock { $0 = (cursor, caughtUp) } }
        do {
            while true {
                let room = session.window - inFlight.count
                guard room > 0 else {
                    subscription.forgetFresh()  // what lands meanwhile waits on disk, not here
                    return nil
                }
                let batch: [StoredMessage]
                if caughtUp, let fresh = subscription.takeFresh(limit: room) {
                    guard !fresh.isEmpty else { return nil }
                    let now = session.clock.now()
                    // A message read by the last store read may be handed over as well.
                    batch = fresh.filter { $0.seq > cursor && $0.expiresAt > now }
                } else {
                    subscription.startStoreRead()
                    let read = try await session.mailboxes.store.messages(recipient: owner, after: cursor, limit: room,
                                                                          maxBytes: session.maxReadBytes, now: session.clock.now())
                    batch = read.messages
                    caughtUp = !read.more
                }
                for message in batch {
                    guard isOpen else { return nil }
                    inFlight.add(message.id)
                    cursor = message.seq
                    let record = message.record(forOwner: true)
                    try await write(FrameText.message(record) ?? SubscriptionSession.text(.message(record)))
                    session.metrics.messagesDelivered.increment()
                }
            }
        } catch let failure as StoreFailure where failure.isTemporary && channel.isActive {
            // The database is out of reach (or busy) for now: the subscription stays open and tries
            // the store again in a second (and at every wake-up meanwhile), until it answers.
            caughtUp = false
            channel.eventLoop.scheduleTask(in: .seconds(1)) { self.wake() }
            return nil
        } catch {
            // The socket is gone, or the store failed (1011: the client reconnects, and what was not
            // acknowledged is delivered again).
            return channel.isActive ? .serverError : .clientLeft
        }
    }

    // MARK: Reading

    /// A text or binary frame arrived (on the event loop).
    func received(_ data: ByteBuffer, text: Bool) {
        let startReader = state.withLock { state -> Bool in
            guard state.phase != .closed else { return false }
            state.waiting.append((data, text))
            guard state.phase == .open, !state.readerRunning else { return false }
            state.readerRunning = true
            return true
        }
        if startReader { session.tasks.spawn { await self.readLoop() } }
    }

    /// Whether the channel should not read now: frames wait unstarted (on the event loop).
    func holdRead() -> Bool {
        state.withLock { state in
            guard state.waiting.count >= SubscriptionSession.maxWaitingFrames else { return false }
            state.readHeld = true
            return true
        }
    }

    /// Starts each waiting frame's work and queues its answer; ends when none waits. A bad frame
    /// gets an `error` frame; a client that keeps sending garbage is disconnected.
    private func readLoop() async {
        while true {
            let (next, resumeReading, principal, subscription) = state.withLock { state in
                guard state.phase == .open, !state.waiting.isEmpty, let principal = state.principal, let subscription = state.subscription else {
                    state.readerRunning = false
                    state.waiting.removeAll()
                    return ((ByteBuffer, Bool)?.none, false, SessionService.Principal?.none, MailboxHub.Subscription?.none)
                }
                let next = state.waiting.removeFirst()
                let resume = state.readHeld && state.waiting.count < SubscriptionSession.maxWaitingFrames / 2
                if resume { state.readHeld = false }
                return (next, resume, principal, subscription)
            }
            if resumeReading { channel.read() }
            guard case let (data, isText)? = next, let principal, let subscription else { return }
            if session.clock.now() >= principal.expiresAt { return finish(.sessionEnded) }
            let answer: AnswerQueue.Answer
            var bytes = 0
            var garbage = false
            // A frame that is not JSON, or lacks a member its type requires, is malformed.
            if isText, let frame = session.decode(String(buffer: data)) {
                bytes = data.readableBytes
                answer = session.start(frame, owner: owner, principal: principal, subscription: subscription, inFlight: inFlight)
            } else {
                garbage = true
                let error = SubscriptionSession.text(.error(Problem(.invalidJSON, "frames are JSON text: ack or send")))
                answer = { error }
            }
            guard let startWriter = await answers.append(answer, bytes: bytes) else { return }
            if startWriter { session.tasks.spawn { await self.writeLoop() } }
            if garbage, state.withLock({ state in state.garbage += 1; return state.garbage >= 10 }) {
                // The error frames owed so far go out first; the writer closes after the last.
                let reason = SubscriptionSession.CloseReason.protocolViolation("too many malformed frames")
                state.withLock { $0.closeAfterAnswers = reason }
                if !answers.closeWhileWriting() { finish(reason) }
                return
            }
        }
    }

    /// Writes the queued answers in frame order, each once its work is done; ends when none is queued.
    private func writeLoop() async {
        while let answer = answers.takeOrRetire() {
            do {
                try await write(try await answer())
            } catch {
                answers.close()
                return finish(.clientLeft)  // the socket is gone, or the store failed
            }
        }
        if let reason = state.withLock({ $0.closeAfterAnswers }) { finish(reason) }
    }

    // MARK: Timer: ping and session check

    private func scheduleTick() {
        guard let principal = state.withLock({ $0.phase == .open ? $0.principal : nil }) else { return }
        let remaining = max(0, principal.expiresAt - session.clock.now())
        let pause = min(Double(remaining) / 1000, session.sessionCheckInterval, session.pingInterval)
        let tick = channel.eventLoop.scheduleTask(in: .milliseconds(Int64(pause * 1000))) { self.tick() }
        let keep = state.withLock { state -> Bool in
            guard state.phase == .open else { return false }
            state.tick = tick
            return true
        }
        if !keep { tick.cancel() }
    }

    /// On the event loop: pings when a ping is due (closing a socket that did not answer the
    /// last one), then re-checks the session.
    private func tick() {
        let now = session.clock.now()
        enum Ping { case none, send, timeout }
        let ping = state.withLock { state -> Ping in
            guard state.phase == .open else { return .none }
            state.tick = nil
            guard Double(now - state.lastPing) >= session.pingInterval * 1000 else { return .none }
            if state.awaitingPong { return .timeout }
            state.awaitingPong = true
            state.lastPing = now
            return .send
        }
        switch ping {
        case .timeout: return finish(.pingTimeout)
        case .send:
            guard !closeSent.value else { return }
            var data = channel.allocator.buffer(capacity: 8)
            data.writeInteger(UInt64.random(in: .min ... .max))
            channel.writeAndFlush(WebSocketFrame(fin: true, opcode: .ping, data: data), promise: nil)
        case .none: break
        }
        guard let principal = state.withLock({ $0.phase == .open ? $0.principal : nil }) else { return }
        session.tasks.spawn {
            guard self.session.clock.now() < principal.expiresAt else { return self.finish(.sessionEnded) }
            do {
                _ = try await self.session.sessions.authenticate(authorization: self.authorization, now: self.session.clock.now())
            } catch let failure as StoreFailure where failure.isTemporary {
                // The database is out of reach or busy: the session may well be valid; check at the next tick.
            } catch {
                return self.finish(.sessionEnded)
            }
            self.scheduleTick()
        }
    }

    /// A pong arrived.
    func pong() {
        state.withLock { $0.awaitingPong = false }
    }

    // MARK: Writing and closing

    private var isOpen: Bool { state.withLock { $0.phase != .closed } }

    /// Writes a text frame. When the socket cannot take more (the peer does not read), waits
    /// until this frame is written: so a slow reader slows its deliveries and answers down.
    private func write(_ text: String, waiting: Bool = false) async throws {
        let promise = channel.eventLoop.makePromise(of: Void.self)
        send(text, promise: promise)
        if waiting || !channel.isWritable { try await promise.futureResult.get() }
    }

    /// Writes a text frame, unless our close frame went out before it (then `promise` fails).
    private func send(_ text: String, promise: EventLoopPromise<Void>? = nil) {
        let frame = WebSocketFrame(fin: true, opcode: .text, data: ByteBuffer(string: text))
        let channel = self.channel, closeSent = self.closeSent
        channel.eventLoop.execute {
            guard !closeSent.value else { promise?.fail(ChannelError.ioOnClosedChannel); return }
            channel.writeAndFlush(frame, promise: promise)
        }
    }

    /// Ends the subscription (once): leaves the hub, and closes the socket with the reason's code.
    func finish(_ reason: SubscriptionSession.CloseReason) {
        guard case let (subscription, tick, counted)? = state.withLock({ state -> (MailboxHub.Subscription?, Scheduled<Void>?, Bool)? in
            guard state.phase != .closed else { return nil }
            state.phase = .closed
            defer {
                state.subscription = nil
                state.tick = nil
                state.waiting.removeAll()
            }
            return (state.subscription, state.tick, state.counted)
        }) else {
            if case .clientClosed = reason { channel.close(promise: nil) }  // the client answered our close
            return
        }
        tick?.cancel()
        if let subscription { session.hub.unsubscribe(owner, subscription) }
        inFlight.clear()
        answers.close()
        if counted { session.metrics.webSocketsOpen.decrement() }
        switch reason {
        case .clientLeft: close(.normalClosure, nil)
        case .replaced: close(.unknown(CloseCode.replaced), "replaced by a newer subscription")
        case .sessionEnded: close(.unknown(CloseCode.sessionEnded), "the session expired or was revoked")
        case .protocolViolation(let why): close(.unknown(CloseCode.protocolViolation), why)
        case .shuttingDown: close(.goingAway, "the relay is stopping")
        case .pingTimeout: close(.goingAway, "Ping timeout")
        case .serverError: close(.unexpectedServerError, nil)
        case .refused(let code, let why): close(.unknown(code), why)
        case .frameError(let code, let why): close(code, why, answered: true)
        case .clientClosed(let code): close(code, nil, answered: true)
        }
    }

    /// Sends a close frame (after every frame already written, and before none), then closes the
    /// connection once the client answers it — at once when the close needs no answer, and after
    /// two seconds at the latest: a client that never answers, or never reads, must not hold the
    /// socket (or a stopping relay) open.
    private func close(_ code: WebSocketErrorCode, _ reason: String?, answered: Bool = false) {
        var buffer = channel.allocator.buffer(capacity: 2 + (reason?.utf8.count ?? 0))
        buffer.write(webSocketErrorCode: code)
        if let reason { buffer.writeString(reason) }
        let data = buffer, channel = self.channel, closeSent = self.closeSent
        channel.eventLoop.execute {
            guard channel.isActive, !closeSent.value else { return }
            closeSent.value = true
            let written = channel.writeAndFlush(WebSocketFrame(fin: true, opcode: .connectionClose, data: data))
            if answered { written.whenComplete { _ in channel.close(promise: nil) } }
            channel.eventLoop.scheduleTask(in: .seconds(2)) { channel.close(promise: nil) }
        }
    }
}

/// Drives a ``Subscriber`` from its channel, on the event loop: frames in, pings answered,
/// reads held while frames wait, the close handshake and the relay's shutdown.
final class SubscriptionHandler: ChannelDuplexHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    private let subscriber: Subscriber
    /// A read was held because the socket would not take our answers.
    private var readWaitsForWritability = false

    init(_ subscriber: Subscriber) {
        self.subscriber = subscriber
    }

    func handlerAdded(context: ChannelHandlerContext) {
        subscriber.upgraded()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        guard frame.reservedBits.isEmpty else { return subscriber.finish(.frameError(.protocolError, "reserved bits set")) }
        switch frame.opcode {
        case .text: subscriber.received(frame.unmaskedData, text: true)
        case .binary: subscriber.received(frame.unmaskedData, text: false)
        case .ping:
            guard frame.fin, frame.length <= 125 else { return subscriber.finish(.frameError(.protocolError, "invalid ping")) }
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, data: frame.unmaskedData)), promise: nil)
        case .pong: subscriber.pong()
        case .connectionClose:
            // Answered as Hummingbird's WebSocket layer did: 1000, or 1002 for a close frame
            // with a code no endpoint may send (private and library codes are fine).
            var data = frame.unmaskedData
            let size = data.readableBytes
            let code = data.readWebSocketErrorCode()
            let valid: Bool
            switch code {
            case .none: valid = size == 0
            case .unknown(let number): valid = (3000...4999).contains(number)
            case .some: valid = true
            }
            subscriber.finish(.clientClosed(valid ? .normalClosure : .protocolError))
        default: subscriber.finish(.frameError(.protocolError, "unknown opcode"))
        }
    }

    func read(context: ChannelHandlerContext) {
        // A client that sends (pings, acks) without reading our answers would have them pile up
        // here: nothing more is read until the socket takes what is queued.
        guard context.channel.isWritable else {
            readWaitsForWritability = true
            return
        }
        guard !subscriber.holdRead() else { return }
        context.read()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable, readWaitsForWritability {
            readWaitsForWritability = false
            if !subscriber.holdRead() { context.read() }
        }
        context.fireChannelWritabilityChanged()
    }

    func channelInactive(context: ChannelHandlerContext) {
        subscriber.finish(.clientLeft)
        context.fireChannelInactive()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        switch event {
        case is ChannelShouldQuiesceEvent: subscriber.finish(.shuttingDown)
        // The client half-closed (sent FIN): it will send nothing more, so the subscription ends.
        case ChannelEvent.inputClosed: subscriber.finish(.clientLeft)
        default: context.fireUserInboundEventTriggered(event)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        switch error {
        case is NIOWebSocketError:
            break  // WebSocketProtocolErrorHandler sent the close frame and closes the channel
        // Messages are bounded in bytes and in fragments, and a fragment before the last may not be
        // empty: a text frame followed by millions of empty continuations once took a gigabyte.
        case NIOWebSocketFrameAggregator.Error.accumulatedFrameSizeIsTooLarge:
            subscriber.finish(.frameError(.messageTooLarge, "message too large"))
        case NIOWebSocketFrameAggregator.Error.tooManyFragments:
            subscriber.finish(.frameError(.messageTooLarge, "message in too many fragments"))
        case NIOWebSocketFrameAggregator.Error.nonFinalFragmentSizeIsTooSmall:
            subscriber.finish(.frameError(.policyViolation, "empty fragment"))
        case is NIOWebSocketFrameAggregator.Error:
            subscriber.finish(.frameError(.protocolError, "fragments out of sequence"))
        default:
            context.close(promise: nil)
        }
    }
}
