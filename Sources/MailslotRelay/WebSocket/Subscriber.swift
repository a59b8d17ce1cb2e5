import Foundation
import MailslotWire
import NIOCore
import NIOWebSocket
import Synchronization

/// One owner's subscription socket: the I/O shell around a ``SubscriberStateMachine``, which
/// decides everything (the window, acks, catch-up, the reader's queue, pings, closing). Each
/// event goes into the machine under one lock, and the shell runs the action it returns: it
/// reads the store through ``MailboxService``, writes frames, and runs tasks and timers.
///
/// It runs tasks only while it has work: a delivery task while there may be something to
/// deliver, a reader while frames wait to be started, a writer while answers are owed; each ends
/// when its work is done. An idle subscription therefore holds no task (a suspended task keeps
/// every slab of async frames it ever needed, ~1 KB each): only this object, its hub entry, one
/// timer on its event loop and its channel.
///
/// The ``SubscriptionHandler`` feeds it frames and channel events on the event loop; the timer
/// pings the client and re-checks the session every `sessionCheckInterval` seconds. The hub
/// hands it the mailbox's commits (``MailboxListener``).
final class Subscriber: MailboxListener {
    typealias Machine = SubscriberStateMachine<MailboxHub.Subscription, Scheduled<Void>>

    let subscriptions: Subscriptions
    let channel: any Channel
    let owner: String
    let authorization: String?
    private let answers = AnswerQueue(maxCount: Subscriptions.maxQueuedAnswers,
                                      maxBytes: Subscriptions.maxQueuedFrameBytes)
    private let machine: Mutex<Machine>
    /// Whether our close frame has gone out; on the event loop, where every frame is written
    /// after checking it, so that nothing follows the close (RFC 6455 §5.5.1).
    private let closeSent: NIOLoopBoundBox<Bool>

    /// A subscriber for `channel`; made on its event loop.
    init(subscriptions: Subscriptions, channel: any Channel, owner: String, authorization: String?) {
        self.subscriptions = subscriptions
        self.channel = channel
        closeSent = NIOLoopBoundBox(false, eventLoop: channel.eventLoop)
        self.owner = owner
        self.authorization = authorization
        machine = Mutex(Machine(limits: .init(window: subscriptions.window)))
    }

    // MARK: Opening

    /// The upgrade is done: the subscription starts at once. (A client must read frames that
    /// arrive in the same read as the `101` response, RFC 6455 §4.1; spec/protocol.md says so.)
    func upgraded() {
        subscriptions.tasks.spawn { await self.start() }
    }

    private func start() async {
        guard machine.withLock({ $0.starting() }) else { return }
        subscriptions.metrics.webSocketsOpen.increment()
        guard !subscriptions.tasks.isStopping else { return finish(.shuttingDown) }
        let principal: SessionService.Principal
        let generation: Int64?
        do {
            principal = try await subscriptions.sessions.authenticate(authorization: authorization, now: subscriptions.clock.now())
            // With other relays on the store, they end their older subscriptions to this mailbox.
            generation = try await subscriptions.mailboxes.beginSubscription(principal, owner: owner)
        } catch {
            return refuse(error)
        }
        let (subscription, _) = subscriptions.hub.subscribe(owner, generation: generation, listener: self)
        switch machine.withLock({ $0.subscribed(principal, lease: subscription) }) {
        case .unsubscribe(let subscription): return subscriptions.hub.unsubscribe(owner, subscription)
        case .sendReady: break
        }
        do {
            // The owner learns here when its one-time prekeys run low (spec/protocol.md §8.4).
            let (pending, prekeys) = try await subscriptions.mailboxes.subscriptionCounts(owner: owner, now: subscriptions.clock.now())
            try await write(Subscriptions.text(.ready(pending: pending, prekeys: prekeys)), waiting: true)
        } catch {
            return refuse(error)
        }
        guard let opened = machine.withLock({ $0.readySent(now: subscriptions.clock.now()) }) else { return }
        if let prekeys = opened.prekeys { send(Subscriptions.text(.prekeys(prekeys))) }
        scheduleTick()
        if opened.startDelivery { subscriptions.tasks.spawn { await self.deliverLoop() } }
        if opened.startReader { subscriptions.tasks.spawn { await self.readLoop() } }
    }

    /// Ends a subscription that could not start: a refusal (401, 403) or an unreachable database
    /// (503) is told in an error frame first — the upgrade cannot answer with a status itself —
    /// then the socket closes with 4000 + the status; anything else closes it with 1011.
    private func refuse(_ error: any Error) {
        guard error is Problem || error is StoreFailure else { return finish(.serverError) }
        let problem = Problem.answering(error)
        send(Subscriptions.text(.error(problem)))
        finish(.refused(UInt16(4000 + problem.code.status), problem.code.rawValue))
    }

    // MARK: What the hub hands over (MailboxListener)

    func committed(_ message: StoredMessage) {
        if machine.withLock({ $0.messageCommitted(message) }) { startDelivery() }
    }

    func erased(_ id: String) {
        machine.withLock { $0.messageErased(id) }
    }

    func recheck() {
        if machine.withLock({ $0.recheck() }) { startDelivery() }
    }

    func ended() { finish(.replaced) }

    /// A claim took the owner's one-time prekeys below the low-water mark: a `prekeys` frame
    /// (spec/protocol.md §8.4). One per crossing of the mark, so no queue is needed: it is written
    /// as it comes, after `ready` (one that comes while `ready` is being written follows it).
    func prekeysLow(_ count: Int) {
        if let count = machine.withLock({ $0.prekeysLow(count) }) { send(Subscriptions.text(.prekeys(count))) }
    }

    // MARK: Delivering

    private func startDelivery() {
        subscriptions.tasks.spawn { await self.deliverLoop() }
    }

    /// Runs the machine's delivery steps until it says stop: backlog reads, and frames written.
    private func deliverLoop() async {
        var action = nextDelivery { $0.nextDelivery(now: subscriptions.clock.now()) }
        while true {
            switch action {
            case .stop: return
            case .close(let reason): return finish(reason)
            case .loadBacklog(let cursor, let limit):
                do {
                    let read = try await subscriptions.mailboxes.backlog(owner: owner, after: cursor, limit: limit,
                                                                   maxBytes: subscriptions.maxReadBytes, now: subscriptions.clock.now())
                    action = nextDelivery { $0.backlogLoaded(read.messages, more: read.more, now: subscriptions.clock.now()) }
                } catch {
                    // The database out of reach (or busy) for now: the subscription stays open and
                    // tries the store again in a second (and at every wake-up meanwhile), until it
                    // answers. Any other failure closes it (1011: the client reconnects, and what
                    // was not acknowledged is delivered again).
                    let temporary = (error as? StoreFailure)?.isTemporary ?? false
                    switch machine.withLock({ $0.backlogFailed(temporary: temporary, socketActive: channel.isActive) }) {
                    case .retryLater:
                        channel.eventLoop.scheduleTask(in: .seconds(1)) {
                            if self.machine.withLock({ $0.retryDelivery() }) { self.startDelivery() }
                        }
                        return
                    case .close(let reason): return finish(reason)
                    }
                }
                continue
            case .send(let messages, _):
                for message in messages {
                    guard isOpen else { return }
                    let record = message.record(forOwner: true)
                    do {
                        try await write(FrameText.message(record) ?? Subscriptions.text(.message(record)))
                    } catch {
                        return finish(channel.isActive ? .serverError : .clientLeft)  // the socket is gone
                    }
                    subscriptions.metrics.messagesDelivered.increment()
                }
            }
            action = nextDelivery { $0.nextDelivery(now: subscriptions.clock.now()) }
        }
    }

    /// Runs a delivery event; what it puts in flight is counted in `mailslot_messages_unacked`
    /// under the same lock, so that a close that uncounts the window never races the count.
    private func nextDelivery(_ event: (inout Machine) -> Machine.DeliveryAction) -> Machine.DeliveryAction {
        machine.withLock { machine in
            let action = event(&machine)
            if case .send(_, let added) = action, added > 0 { subscriptions.metrics.messagesUnacked.increment(by: Double(added)) }
            return action
        }
    }

    /// The erasure an ack asked for was answered: the message leaves the window.
    private func acknowledged(_ id: String) {
        switch machine.withLock({ $0.ackCommitted(id) }) {
        case .unknown: break
        case .acknowledged(let startDelivery):
            subscriptions.metrics.messagesUnacked.decrement()
            if startDelivery { self.startDelivery() }
        }
    }

    // MARK: Reading

    /// A text or binary frame arrived (on the event loop).
    func received(_ data: ByteBuffer, text: Bool) {
        if machine.withLock({ $0.frameReceived(data, text: text) }) { subscriptions.tasks.spawn { await self.readLoop() } }
    }

    /// Whether the channel should not read now: frames wait unstarted (on the event loop).
    func holdRead() -> Bool {
        machine.withLock { $0.holdRead() }
    }

    /// Starts each waiting frame's work and queues its answer; ends when none waits. A bad frame
    /// gets an `error` frame; a client that keeps sending garbage is disconnected.
    private func readLoop() async {
        while true {
            let data: ByteBuffer, isText: Bool, principal: SessionService.Principal
            switch machine.withLock({ $0.nextFrame(now: subscriptions.clock.now()) }) {
            case .stop: return
            case .close(let reason): return finish(reason)
            case .handle(let frame, let text, let who, let resumeReading):
                if resumeReading { channel.read() }
                (data, isText, principal) = (frame, text, who)
            }
            let answer: AnswerQueue.Answer
            var bytes = 0
            var malformed = false
            // A frame that is not JSON, or lacks a member its type requires, is malformed.
            if isText, let frame = subscriptions.decode(String(buffer: data)) {
                bytes = data.readableBytes
                answer = subscriptions.start(frame, owner: owner, principal: principal, acknowledged: { self.acknowledged($0) })
            } else {
                malformed = true
                let error = Subscriptions.text(.error(Problem(.invalidJSON, "frames are JSON text: ack or send")))
                answer = { error }
            }
            guard let startWriter = await answers.append(answer, bytes: bytes) else { return }
            if startWriter { subscriptions.tasks.spawn { await self.writeLoop() } }
            if malformed, let reason = machine.withLock({ $0.malformedFrame() }) {
                // The error frames owed so far go out first; the writer closes after the last.
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
        if let reason = machine.withLock({ $0.answersWritten() }) { finish(reason) }
    }

    // MARK: Timer: ping and session check

    private func scheduleTick() {
        guard let delay = machine.withLock({ $0.tickDelay(now: subscriptions.clock.now(), checkInterval: subscriptions.sessionCheckInterval,
                                                          pingInterval: subscriptions.pingInterval) }) else { return }
        let tick = channel.eventLoop.scheduleTask(in: .milliseconds(delay)) { self.tick() }
        if !machine.withLock({ $0.tickScheduled(tick) }) { tick.cancel() }
    }

    /// On the event loop: pings when a ping is due (closing a socket that did not answer the
    /// last one), then re-checks the subscriptions.
    private func tick() {
        let principal: SessionService.Principal
        switch machine.withLock({ $0.tick(now: subscriptions.clock.now(), pingInterval: subscriptions.pingInterval) }) {
        case .none: return
        case .pingTimeout: return finish(.pingTimeout)
        case .check(let who, let ping):
            principal = who
            if ping, !closeSent.value {
                var data = channel.allocator.buffer(capacity: 8)
                data.writeInteger(UInt64.random(in: .min ... .max))
                channel.writeAndFlush(WebSocketFrame(fin: true, opcode: .ping, data: data), promise: nil)
            }
        }
        subscriptions.tasks.spawn {
            guard self.subscriptions.clock.now() < principal.expiresAt else { return self.finish(.sessionEnded) }
            do {
                _ = try await self.subscriptions.sessions.authenticate(authorization: self.authorization, now: self.subscriptions.clock.now())
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
        machine.withLock { $0.pong() }
    }

    // MARK: Writing and closing

    private var isOpen: Bool { machine.withLock { $0.phase != .closed } }

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
    func finish(_ reason: Subscriptions.CloseReason) {
        guard case let .close(subscription, tick, counted, unacknowledged) = machine.withLock({ $0.close() }) else {
            if case .clientClosed = reason { channel.close(promise: nil) }  // the client answered our close
            return
        }
        tick?.cancel()
        if let subscription {
            subscriptions.hub.unsubscribe(owner, subscription)
            // Other relays' wake-up claims count the mailbox as connected until told (PostgreSQL).
            if let cluster = subscriptions.mailboxes.store.cluster {
                subscriptions.tasks.spawn { [owner, generation = subscription.generation] in
                    try? await cluster.subscriptionEnded(mailbox: owner, generation: generation)
                }
            }
        }
        // What was in flight waits for the next subscription.
        if unacknowledged > 0 { subscriptions.metrics.messagesUnacked.decrement(by: Double(unacknowledged)) }
        answers.close()
        if counted { subscriptions.metrics.webSocketsOpen.decrement() }
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
