import Foundation
import HTTPTypes
import HummingbirdWSClient
import Logging
import MailslotWire

extension MailslotClient {
    /// Why ``messages(onState:)`` ended.
    public enum StreamEnd: Error, Equatable, Sendable {
        /// A newer subscription of this mailbox took over (another device or worker).
        case replaced
        /// The relay refused the subscription (the close code says why: 4400, 4403).
        case refused(UInt16)
    }

    /// The mailbox as a live stream, delivered at least once: stored messages the app has not
    /// handled yet first (after a restart too), then each new message as it arrives.
    ///
    /// **A message is handled when the loop asks for the next one** (``MessageStream`` tells the
    /// whole rule): one whose handling did not finish — a crash, a `break` — comes again.
    ///
    /// Each message is opened, verified and stored locally, then acknowledged so the relay erases
    /// it: the store keeps it until the app handled it. A crash between the store and the ack
    /// brings the message again from the relay, and the store drops the duplicate. Messages that
    /// fail to open or verify are stored as rejected (``rejected()``) and acknowledged, so they
    /// never block the mailbox, and are not yielded (the author of one sealed to keys this device
    /// does not have is told: see `Accepting.swift`). Reconnects with exponential backoff and
    /// jitter; catches up from the backlog after a gap. At most ``maxUnhandled`` stored messages
    /// wait for the app: beyond that the client stops reading from the relay until it catches up.
    ///
    /// ```swift
    /// for try await message in client.messages() {
    ///     print(message.sender, message.message.payload.text ?? "")
    /// }
    /// ```
    ///
    /// - Parameter onState: Told where the connection stands (connecting, connected, waiting), for a UI or a log.
    /// - Returns: A sequence that connects when iterated, and disconnects when the iteration ends.
    public nonisolated func messages(onState: @escaping @Sendable (ConnectionState) -> Void = { _ in }) -> MessageStream {
        MessageStream(client: self, onState: onState)
    }

    /// The most stored messages that wait for the app to handle them before the live stream stops
    /// reading from the relay (back-pressure: the relay holds the rest, within its delivery window).
    public static let maxUnhandled = 256

    /// Where the live subscription stands, for a UI or a log.
    public enum ConnectionState: Sendable, Equatable {
        /// Connecting (or reconnecting) to the relay.
        case connecting
        /// Subscribed: the backlog and new messages flow.
        case connected
        /// The connection dropped for `reason`; the next try comes after this many seconds.
        case waiting(seconds: Double, reason: DisconnectReason)
    }

    /// Why the live subscription dropped (``ConnectionState/waiting(seconds:reason:)``).
    public enum DisconnectReason: Sendable, Equatable, CustomStringConvertible {
        /// The relay closed the connection (a restart, a session that ended, a takeover elsewhere).
        case closedByRelay
        /// The relay cannot serve for now: it closed with this private code (45xx, e.g. 4503: its
        /// database is out of reach, spec/protocol.md §8).
        case relayUnavailable(closeCode: UInt16)
        /// The relay could not be reached.
        case unreachable
        /// The relay refused a request the connection needs (signing in, a refresh): its problem code.
        case relay(ProblemCode)
        /// Anything else; `detail` is for a log or a person, not to be matched on.
        case failed(detail: String)

        /// The failure that dropped the connection, as a reason.
        init(_ error: any Error) {
            switch error {
            case ClientError.unreachable: self = .unreachable
            case ClientError.relay(let problem): self = .relay(problem.code)
            default: self = .failed(detail: MailslotClient.describe(error))
            }
        }

        /// For a person or a log.
        public var description: String {
            switch self {
            case .closedByRelay: "closed by the relay"
            case .relayUnavailable(let code): "the relay is unavailable (\(code))"
            case .unreachable: "unreachable"
            case .relay(let code): code.rawValue
            case .failed(let detail): detail
            }
        }
    }

    /// The `ack` frame for message `id`.
    static func ackText(_ id: String) throws -> String {
        String(decoding: try JSONEncoder().encode(ClientFrame.ack(id)), as: UTF8.self)
    }

    /// Failures in a row after the relay closed the subscription with the private code `code`.
    /// A relay that cannot serve for now (45xx: 4503, its database is out of reach) counts as a
    /// failure, so the wait before the next try grows rather than the client knocking again at
    /// once for the whole outage; any other close starts afresh.
    static func failures(afterClose code: UInt16, previous: Int) -> Int {
        (4500...4599).contains(code) ? previous + 1 : 0
    }

    /// Subscribes, stores and acknowledges, reconnecting, until the task is cancelled or the relay
    /// ends the subscription for good; tells `signal` of each message stored.
    func receiveLoop(_ signal: StreamSignal, onState: @escaping @Sendable (ConnectionState) -> Void) async {
        var failures = 0
        while !Task.isCancelled {
            var reason = DisconnectReason.closedByRelay
            do {
                onState(.connecting)
                await keepKeysCurrent()
                let me = try await identity()
                let session = try await session()
                var headers = HTTPFields()
                headers[.authorization] = "Bearer \(session)"
                let close = try await WebSocketClient.connect(
                    url: api.subscribeURL(me.uid),
                    configuration: .init(maxFrameSize: Defaults.maxRelayFrameBytes, additionalHeaders: headers,
                                         autoPing: .enabled(timePeriod: .seconds(30))),
                    logger: logger
                ) { inbound, outbound, _ in
                    onState(.connected)
                    // Acks the relay could not carry out, sent again later; the pending ones end with the connection.
                    var acks = AckRetries()
                    var resends: [String: Task<Void, Never>] = [:]
                    defer { for resend in resends.values { resend.cancel() } }
                    for try await frame in inbound.messages(maxSize: Defaults.maxRelayFrameBytes) {
                        guard case .text(let text) = frame else { continue }
                        // The one decoder of what a relay sends: a frame with a number out of
                        // range (a prekey count of −2⁶³) is skipped, never computed with.
                        let relayFrame: RelayFrame
                        do { relayFrame = try RelayAnswers.frame(text) } catch {
                            self.logger.info("a frame from the relay refused", metadata: ["error": "\(error)"])
                            continue
                        }
                        // The relay says how many one-time prekeys it holds — in `ready`, and in a
                        // `prekeys` frame whenever claims take them below the low-water mark
                        // (spec/protocol.md §8.4) — and they are topped up, so a listening client
                        // keeps its supply however fast others claim.
                        if let prekeys = relayFrame.prekeys { await self.replenishPrekeys(remaining: prekeys) }
                        switch relayFrame {
                        case .acked(let id):
                            acks.confirmed(id)
                            resends[id] = nil
                            continue
                        case .error(let problem, _, let id?):
                            resends[id] = nil
                            if let wait = acks.retry(after: problem, id: id) {
                                let ack = try Self.ackText(id)
                                resends[id] = Task {
                                    guard (try? await Task.sleep(for: wait)) != nil else { return }
                                    try? await outbound.write(.text(ack))
                                }
                            }
                            continue
                        case .message(let record):
                            let accepted = try await self.accept(record, as: me)
                            if let message = accepted.message {
                                // Stored (the stream reads it from the store), or shown once and never stored.
                                if message.message.type == .typing { signal.ephemeral(message) } else { signal.stored() }
                            }
                            if !accepted.others.isEmpty { signal.stored() }  // held group messages released
                            // Acknowledged only now, after the store: the relay erases it. Not
                            // after the app handled it: the store keeps it until then.
                            try await outbound.write(.text(try Self.ackText(record.id)))
                            acks.sent(record.id)
                            await self.eraseOldCopies()
                            if let notice = accepted.notice { await self.notify(notice) }
                            // Back-pressure: while the app has this many to handle, read no more.
                            while try await self.store.unhandledCount() >= self.unhandledLimit, !Task.isCancelled {
                                await signal.waitForRoom()
                            }
                        default:
                            continue
                        }
                    }
                }
                switch close?.closeCode {
                case .unknown(CloseCode.replaced):
                    signal.finish(.failure(StreamEnd.replaced))
                    return
                case .unknown(let code) where code == 4400 || code == 4403:
                    signal.finish(.failure(StreamEnd.refused(code)))
                    return
                case .unknown(CloseCode.sessionEnded), .unknown(4401):
                    failures = 0
                    try await store.clearSession()  // sign in or refresh on the next round
                case .unknown(let code):
                    failures = Self.failures(afterClose: code, previous: failures)
                    if failures > 0 { reason = .relayUnavailable(closeCode: code) }
                default:
                    failures = 0
                }
            } catch is CancellationError {
                break
            } catch {
                failures += 1
                reason = DisconnectReason(error)
                logger.info("subscription dropped; reconnecting", metadata: ["error": "\(Self.describe(error))", "attempt": "\(failures)"])
            }
            // Backoff with jitter: 0.25 s doubling to 30 s, each wait randomised by ±50 %.
            let base = min(30, 0.25 * pow(2, Double(min(failures, 8))))
            let wait = failures == 0 ? 0.05 : base * (0.5 + Double(randomUniform(1000)) / 1000)
            if !Task.isCancelled { onState(.waiting(seconds: wait, reason: reason)) }
            try? await Task.sleep(for: .milliseconds(Int64(wait * 1000)))
        }
        signal.finish(.success(()))
    }
}
