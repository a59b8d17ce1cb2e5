import Foundation
import Logging
import MailslotWire
import NIOCore
import NIOWebSocket
import Synchronization

/// What every subscription socket shares: the services, the limits and the frame handling. One
/// owner's socket is a ``Subscriber`` driven by a ``SubscriptionHandler``: it delivers the
/// backlog oldest first and then each new message, keeps at most `window` deliveries
/// unacknowledged, erases a message when its ack arrives, and accepts sends. Every frame goes
/// through ``MailboxService`` and so through the rules. A class: every ``Subscriber`` holds a
/// reference, not a copy of the services and the configuration they carry. (Named for what it
/// serves, all the subscriptions; "session" is the sign-in's word, ``SessionService``.)
final class Subscriptions: Sendable {
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
    /// Seconds between pings; a socket that has not answered one by the next is closed.
    let pingInterval: Double
    /// Every subscription's tasks, and whether the relay is stopping.
    let tasks: SubscriberTasks
    /// Where "now" is read (``RelayConfiguration/clock``).
    var clock: RelayClock { mailboxes.configuration.clock }

    init(mailboxes: MailboxService, sessions: SessionService, hub: MailboxHub, window: Int, maxFrameBytes: Int, maxFragments: Int,
         maxReadBytes: Int, maxJSONDepth: Int, sessionCheckInterval: Double, logger: Logger, metrics: RelayMetrics,
         tasks: SubscriberTasks, pingInterval: Double = 30) {
        self.mailboxes = mailboxes
        self.sessions = sessions
        self.hub = hub
        self.window = window
        self.maxFrameBytes = maxFrameBytes
        self.maxFragments = maxFragments
        self.maxReadBytes = maxReadBytes
        self.maxJSONDepth = maxJSONDepth
        self.sessionCheckInterval = sessionCheckInterval
        self.logger = logger
        self.metrics = metrics
        self.pingInterval = pingInterval
        self.tasks = tasks
    }

    enum CloseReason: Sendable, Equatable {
        case clientLeft, replaced, sessionEnded, shuttingDown, pingTimeout, serverError
        case protocolViolation(String)
        /// The subscription was refused (4400, 4401, 4403: the HTTP status the request would have had).
        case refused(UInt16, String)
        /// The client broke the WebSocket protocol (a frame too large, a bad fragment), and why.
        case frameError(WebSocketErrorCode, String?)
        /// The client sent a close frame: it is answered with its code.
        case clientClosed(WebSocketErrorCode)
    }

    /// At most this many frames of one socket are being worked on at once…
    static let maxQueuedAnswers = 32
    /// …holding at most this many bytes of frames (a larger frame goes alone).
    static let maxQueuedFrameBytes = 256 * 1024
    /// Frames read but not yet started beyond which the socket stops reading (TCP pushes back).
    static let maxWaitingFrames = 8

    /// Starts one well-formed frame's work now and returns its answer.
    /// `acknowledged` is told of each ack's id once its erasure was answered (the message leaves the window).
    func start(_ frame: ClientFrame, owner: String, principal: SessionService.Principal,
               acknowledged: @escaping @Sendable (String) -> Void) -> AnswerQueue.Answer {
        switch frame {
        case .ack(let id):
            let erase = mailboxes.delete(principal, owner: owner, id: id, now: clock.now())
            return {
                defer { acknowledged(id) }
                do {
                    try await erase.value
                    return FrameText.acked(id)
                } catch let problem as Problem where problem.code == .notFound {
                    return FrameText.acked(id)  // already erased (a repeated ack): acknowledged all the same
                } catch {
                    // Not erased (a full disk, a failing store): the client is told, and may ack again.
                    return Self.text(.error(self.problem(error), id: id))
                }
            }
        case .send(let send):
            guard let ref = send.ref, !ref.isEmpty, ref.utf8.count <= 64 else {
                // Not echoed: a reference the client cannot have meant is no reference.
                let error = Self.text(.error(Problem(.badRequest, "a send needs a ref of 1 to 64 bytes")))
                return { error }
            }
            let stored = mailboxes.send(principal, to: send.to, id: send.id, envelope: send.envelope,
                                             ttlSeconds: send.ttlSeconds, keyID: send.keyID, wake: send.wake ?? true, now: clock.now())
            return {
                do {
                    let (record, created) = try await stored.value
                    return FrameText.sent(record, ref: ref, created: created) ?? Self.text(.sent(ref: ref, created: created, message: record))
                } catch {
                    return Self.text(.error(self.problem(error), ref: ref))
                }
            }
        case .sendMany(let send):
            guard let ref = send.ref, !ref.isEmpty, ref.utf8.count <= 64 else {
                let error = Self.text(.error(Problem(.badRequest, "a send_many needs a ref of 1 to 64 bytes")))
                return { error }
            }
            // The same entry point as POST /v1/messages: one result per entry, or the refusal of
            // the whole frame (its TTL, its entries) as an error with the ref.
            let stored = mailboxes.sendMany(principal, send.request, now: clock.now())
            return {
                do {
                    return Self.text(.sentMany(ref: ref, results: try await stored.value))
                } catch {
                    return Self.text(.error(self.problem(error), ref: ref))
                }
            }
        case .unknown:
            let error = Self.text(.error(Problem(.badRequest, "unknown frame type")))
            return { error }
        }
    }

    /// What the client is told of a failed ack or send; an unexpected failure is logged (by its
    /// type only, as the HTTP routes do) before it is answered `internal`.
    private func problem(_ error: any Error) -> Problem {
        let problem = Problem.answering(error)
        if problem.code == .internalError { logger.error("frame failed", metadata: ["error.type": "\(type(of: error))"]) }
        return problem
    }

    func decode(_ text: String) -> ClientFrame? {
        try? WireDecoding.clientFrame(text, maxDepth: maxJSONDepth)
    }

    static func text(_ frame: RelayFrame) -> String {
        String(decoding: JSONBody.encode(frame), as: UTF8.self)
    }
}
