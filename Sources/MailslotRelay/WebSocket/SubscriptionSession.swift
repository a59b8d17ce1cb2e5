import Foundation
import HummingbirdWebSocket
import Logging
import MailslotWire
import ServiceLifecycle
import Synchronization

/// One owner's subscription socket: delivers the backlog oldest first and then each new message,
/// keeps at most `window` deliveries unacknowledged, erases a message when its ack arrives, and
/// accepts sends. Every frame goes through ``MailboxService`` and so through the rules.
struct SubscriptionSession {
    let mailboxes: MailboxService
    let sessions: SessionService
    let hub: MailboxHub
    let window: Int
    let maxFrameBytes: Int
    /// The most fragments one client message may arrive in.
    let maxFragments: Int
    /// Envelope bytes (as text) one read of the store may bring into memory for delivery.
    let maxReadBytes: Int
    let maxJSONDepth: Int
    /// How often an open socket re-checks that its session is still valid, in seconds.
    let sessionCheckInterval: Double
    let logger: Logger
    let metrics: RelayMetrics

    /// What has been delivered and not yet acknowledged on this socket (also the relay-wide
    /// `mailslot_messages_unacked` gauge). A lock, not an actor: it is touched for every message
    /// delivered and acked, and each touch is a few instructions.
    private final class InFlight: Sendable {
        let metrics: RelayMetrics
        private let ids = Mutex(Set<String>())
        init(metrics: RelayMetrics) { self.metrics = metrics }
        func add(_ id: String) {
            if ids.withLock({ $0.insert(id).inserted }) { metrics.messagesUnacked.increment() }
        }
        func remove(_ id: String) -> Bool {
            guard ids.withLock({ $0.remove(id) != nil }) else { return false }
            metrics.messagesUnacked.decrement()
            return true
        }
        /// The socket closed: what it had in flight waits for the next subscription.
        func clear() {
            let count = ids.withLock { ids in
                defer { ids.removeAll() }
                return ids.count
            }
            metrics.messagesUnacked.decrement(by: Double(count))
        }
        var count: Int { ids.withLock { $0.count } }
    }

    /// Runs the socket until the client leaves, the session ends, or a newer subscription takes over.
    func run(owner: String, authorization: String?, inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter) async throws {
        // Some WebSocket clients drop a frame that reaches them in the same read as the 101
        // response (NIO's client upgrade does unless told to forward those bytes; the bench's
        // idle-subscriber run lost `ready` frames that way). A short pause before the first
        // frame keeps it out of that read; every later frame is unaffected.
        try? await Task.sleep(for: .milliseconds(25))
        metrics.webSocketsOpen.increment()
        defer { metrics.webSocketsOpen.decrement() }
        let principal: SessionService.Principal
        do {
            principal = try await sessions.authenticate(authorization: authorization, now: Clock.now())
            try mailboxes.authorizeSubscription(principal, owner: owner)
        } catch let problem as Problem {
            // The upgrade cannot answer 401/403 itself, so the first frame says it, then the socket closes.
            try await send(RelayFrame(type: "error", problem: problem), outbound)
            // 4400, 4401, 4403: the HTTP status the request would have had, in the private-use range.
            try await outbound.close(.unknown(UInt16(4000 + problem.code.status)), reason: problem.code.rawValue)
            return
        }

        let (subscription, _) = hub.subscribe(owner)
        let inFlight = InFlight(metrics: metrics)
        let pending = try await mailboxes.store.pendingCount(recipient: owner, now: Clock.now())
        try await send(RelayFrame(type: "ready", pending: pending), outbound)
        subscription.wake()

        let outcome = await withTaskGroup(of: CloseReason.self) { group in
            group.addTask { await deliver(owner: owner, principal: principal, subscription: subscription, inFlight: inFlight, outbound) }
            group.addTask { await receive(owner: owner, principal: principal, subscription: subscription, inFlight: inFlight, inbound, outbound) }
            group.addTask { await watch(principal, authorization: authorization) }
            // A stopping relay ends its subscriptions itself: a client that never answers the
            // close handshake must not hold the shutdown open.
            group.addTask { (try? await gracefulShutdown()) == nil ? .clientLeft : .shuttingDown }
            let first = await group.next() ?? .clientLeft
            group.cancelAll()
            return first
        }
        hub.unsubscribe(owner, subscription)
        inFlight.clear()
        switch outcome {
        case .clientLeft: break
        case .replaced: try? await outbound.close(.unknown(CloseCode.replaced), reason: "replaced by a newer subscription")
        case .sessionEnded: try? await outbound.close(.unknown(CloseCode.sessionEnded), reason: "the session expired or was revoked")
        case .protocolViolation(let why): try? await outbound.close(.unknown(CloseCode.protocolViolation), reason: why)
        case .refusedMessage(let violation): try? await outbound.close(violation.closeCode, reason: violation.reason)
        case .shuttingDown: try? await outbound.close(.goingAway, reason: "the relay is stopping")
        }
    }

    enum CloseReason: Sendable {
        case clientLeft, replaced, sessionEnded, shuttingDown
        case protocolViolation(String)
        /// A client message over the size or fragment bounds (``MessageAssembler``).
        case refusedMessage(MessageAssembler.Violation)
    }

    /// Ends the subscription when its session expires or is revoked (sign-out, refresh reuse),
    /// checking every `sessionCheckInterval` seconds.
    private func watch(_ principal: SessionService.Principal, authorization: String?) async -> CloseReason {
        while !Task.isCancelled {
            let remaining = principal.expiresAt - Clock.now()
            guard remaining > 0 else { return .sessionEnded }
            let pause = min(Double(remaining) / 1000, sessionCheckInterval)
            do { try await Task.sleep(for: .milliseconds(Int64(pause * 1000))) } catch { return .clientLeft }
            guard (try? await sessions.authenticate(authorization: authorization, now: Clock.now())) != nil else { return .sessionEnded }
        }
        return .clientLeft
    }

    /// Sends the mailbox's messages after the cursor while the window has room; sleeps until woken
    /// by a new message or an ack. Ends when the subscription is replaced.
    ///
    /// It reads the store until a read comes back short (nothing more was stored when it
    /// began); from then on it delivers what the hub hands it, in commit order, without reading
    /// the store — until the hub reports that it did not keep everything, and it reads again.
    private func deliver(owner: String, principal: SessionService.Principal, subscription: MailboxHub.Subscription,
                         inFlight: InFlight, _ outbound: WebSocketOutboundWriter) async -> CloseReason {
        var cursor: Int64 = 0
        var caughtUp = false
        for await _ in subscription.wakeups {
            if Clock.now() >= principal.expiresAt { return .sessionEnded }
            do {
                while true {
                    let room = window - inFlight.count
                    guard room > 0 else {
                        subscription.forgetFresh()  // what lands meanwhile waits on disk, not here
                        break
                    }
                    let batch: [StoredMessage]
                    if caughtUp, let fresh = subscription.takeFresh(limit: room) {
                        guard !fresh.isEmpty else { break }
                        let now = Clock.now()
                        // A message read by the last store read may be handed over as well.
                        batch = fresh.filter { $0.seq > cursor && $0.expiresAt > now }
                    } else {
                        subscription.startStoreRead()
                        let read = try await mailboxes.store.messages(recipient: owner, after: cursor, limit: room, maxBytes: maxReadBytes,
                                                                      now: Clock.now())
                        batch = read.messages
                        caughtUp = !read.more
                    }
                    for message in batch {
                        inFlight.add(message.id)
                        cursor = message.seq
                        let record = message.record(forOwner: true)
                        if let text = FrameText.message(record) {
                            try await outbound.write(.text(text))
                        } else {
                            try await send(RelayFrame(type: "message", message: record), outbound)
                        }
                        metrics.messagesDelivered.increment()
                    }
                }
            } catch {
                return .clientLeft  // the socket is gone (or the store failed): end this subscription
            }
        }
        return Task.isCancelled ? .clientLeft : .replaced
    }

    /// Handles the client's frames: acks erase, sends create. A bad frame gets an `error` frame;
    /// a client that keeps sending garbage is disconnected. Frames are read while earlier ones
    /// are still committing (``AnswerQueue``); their answers are written in frame order.
    private func receive(owner: String, principal: SessionService.Principal, subscription: MailboxHub.Subscription,
                         inFlight: InFlight, _ inbound: WebSocketInboundStream, _ outbound: WebSocketOutboundWriter) async -> CloseReason {
        enum Finished { case reader(CloseReason), writer(failed: Bool) }
        let answers = AnswerQueue(maxCount: Self.maxQueuedAnswers, maxBytes: Self.maxQueuedFrameBytes)
        return await withTaskGroup(of: Finished.self) { group in
            group.addTask {
                defer { answers.close() }
                return .reader(await read(owner: owner, principal: principal, subscription: subscription, inFlight: inFlight,
                                          inbound, into: answers))
            }
            group.addTask {
                while let answer = await answers.next() {
                    do {
                        try await outbound.write(.text(try await answer()))
                    } catch {
                        answers.close()
                        return .writer(failed: true)  // the socket is gone, or the store failed
                    }
                }
                return .writer(failed: false)
            }
            var reason = CloseReason.clientLeft
            for await finished in group {
                switch finished {
                case .reader(let why): reason = why  // the writer still writes what is queued
                case .writer(failed: true): group.cancelAll()
                case .writer(failed: false): break
                }
            }
            return reason
        }
    }

    /// At most this many frames of one socket are being worked on at once…
    static let maxQueuedAnswers = 32
    /// …holding at most this many bytes of frames (a larger frame goes alone).
    static let maxQueuedFrameBytes = 256 * 1024

    /// Reads the client's frames, starts each one's work and queues its answer.
    private func read(owner: String, principal: SessionService.Principal, subscription: MailboxHub.Subscription,
                      inFlight: InFlight, _ inbound: WebSocketInboundStream, into answers: AnswerQueue) async -> CloseReason {
        var garbage = 0
        var assembler = MessageAssembler(maxBytes: maxFrameBytes, maxFragments: maxFragments)
        do {
            for try await frame in inbound {
                guard let message = try assembler.add(frame) else { continue }
                if Clock.now() >= principal.expiresAt { return .sessionEnded }
                let answer: AnswerQueue.Answer
                var bytes = 0
                // A frame that is not JSON, or lacks a member its type requires, is malformed.
                if case .text(let text) = message, let frame = decode(text), frame.hasRequiredMembers {
                    bytes = text.utf8.count
                    answer = start(frame, owner: owner, principal: principal, subscription: subscription, inFlight: inFlight)
                } else {
                    garbage += 1
                    let error = Self.text(RelayFrame(type: "error", problem: Problem(.invalidJSON, "frames are JSON text: ack or send")))
                    answer = { error }
                }
                guard await answers.append(answer, bytes: bytes) else { return .clientLeft }
                if garbage >= 10 { return .protocolViolation("too many malformed frames") }
            }
        } catch let violation as MessageAssembler.Violation {
            return .refusedMessage(violation)
        } catch {
            // The inbound stream failed: a frame over the decoder's limit, or a broken connection.
            return .clientLeft
        }
        return .clientLeft
    }

    /// Starts one well-formed frame's work now and returns its answer.
    private func start(_ frame: ClientFrame, owner: String, principal: SessionService.Principal,
                       subscription: MailboxHub.Subscription, inFlight: InFlight) -> AnswerQueue.Answer {
        switch frame.type {
        case "ack":
            let id = frame.id ?? ""
            let erase = mailboxes.startDelete(principal, owner: owner, id: id, now: Clock.now())
            return {
                defer { if inFlight.remove(id) { subscription.wake() } }
                do {
                    try await erase()
                    return FrameText.acked(id)
                } catch let problem as Problem where problem.code == .notFound {
                    return FrameText.acked(id)  // already erased (a repeated ack): acknowledged all the same
                } catch {
                    // Not erased (a full disk, a failing store): the client is told, and may ack again.
                    return Self.text(RelayFrame(type: "error", id: id, problem: Problem.answering(error)))
                }
            }
        case "send":
            guard let ref = frame.ref, !ref.isEmpty, ref.utf8.count <= 64 else {
                // Not echoed: a reference the client cannot have meant is no reference.
                let error = Self.text(RelayFrame(type: "error", problem: Problem(.badRequest, "a send needs a ref of 1 to 64 bytes")))
                return { error }
            }
            let stored = mailboxes.startSend(principal, to: frame.to ?? "", id: frame.id ?? "", envelope: frame.envelope ?? "",
                                             ttlSeconds: frame.ttlSeconds, now: Clock.now())
            return {
                do {
                    let (record, created) = try await stored()
                    return FrameText.sent(record, ref: ref, created: created)
                        ?? Self.text(RelayFrame(type: "sent", message: record, ref: ref, created: created))
                } catch {
                    return Self.text(RelayFrame(type: "error", ref: ref, problem: Problem.answering(error)))
                }
            }
        default:
            let error = Self.text(RelayFrame(type: "error", problem: Problem(.badRequest, "unknown frame type")))
            return { error }
        }
    }

    private func decode(_ text: String) -> ClientFrame? {
        try? WireDecoding.clientFrame(text, maxDepth: maxJSONDepth)
    }

    private func send(_ frame: RelayFrame, _ outbound: WebSocketOutboundWriter) async throws {
        try await outbound.write(.text(Self.text(frame)))
    }

    private static func text(_ frame: RelayFrame) -> String {
        String(decoding: JSONBody.encode(frame), as: UTF8.self)
    }
}
