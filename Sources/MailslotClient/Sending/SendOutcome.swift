import MailslotWire

extension MailslotClient {
    /// What happened to a message handed to ``send(_:type:to:name:)``, ``resend(_:)`` or a file
    /// send. Every outcome but a throw means the message is stored in the outbox: nothing is lost.
    public enum SendOutcome: Sendable, Equatable {
        /// The relay stored it.
        case sent(id: String)
        /// It is in the outbox (the relay could not be reached, or asked to wait: rate limit, full
        /// mailbox); ``MailslotClient/flush()`` retries it with the same id and the same envelope.
        case queued(id: String, reason: Reason)
        /// The relay refused it for good (blocked, conflict, invalid), or a file send cannot
        /// finish: it leaves the outbox (``outgoing()`` shows it as refused).
        case refused(id: String, reason: Reason)
        /// Stored in the outbox, not sealed: `recipient`'s identity key changed and is not trusted
        /// yet. It is sealed to the new keys and sent when the user trusts them
        /// (``trust(_:safetyNumber:)``), after comparing safety numbers (``safetyNumberCheck(with:)``).
        case held(id: String, recipient: String)

        /// The message id, whatever the outcome.
        public var id: String {
            switch self {
            case .sent(let id), .queued(let id, _), .refused(let id, _), .held(let id, _): id
            }
        }

        /// Why a message waits in the outbox, or was refused.
        public enum Reason: Sendable, Hashable, CustomStringConvertible {
            /// The relay answered with this problem code (spec/protocol.md §3): `rate_limited`,
            /// `mailbox_full`, `unavailable` to wait out; `blocked`, `conflict`, `stale_keys`
            /// (the recipient withdrew their keys), … for good.
            case relay(ProblemCode)
            /// The relay could not be reached.
            case unreachable
            /// Another call is sealing the message again to the recipient's new keys right now.
            case resealing
            /// A file send was interrupted (cancelled, stopped) before its upload finished;
            /// ``MailslotClient/flush()`` resumes it.
            case interrupted
            /// A file send whose upload runs already (in another call of this client).
            case uploadRunning
            /// The file changed or vanished while it was read for sending; `code` is the file
            /// error code (spec/attachments.md).
            case fileChanged(code: String)
            /// Held: the recipient's identity key changed and is not trusted yet.
            case keyChanged
            /// The recipient's device said it could not open it (``OutgoingMessage/State/undelivered``).
            case unreadable
            /// Anything else (an answer that is not the protocol, a local failure); `detail` is for
            /// a log or a person, not to be matched on.
            case failed(detail: String)

            /// What the outbox records for it (`last_error`), and reads back with ``init(recorded:)``.
            var recorded: String {
                switch self {
                case .relay(let code): code.rawValue
                case .unreachable: "unreachable"
                case .resealing: "resealing"
                case .interrupted: "interrupted"
                case .uploadRunning: "upload_running"
                case .fileChanged(let code): code
                case .keyChanged: ClientError.keyChangedCode
                case .unreadable: "unreadable"
                case .failed(let detail): detail
                }
            }

            /// The reason the outbox recorded: a problem code, or what ``recorded`` wrote (older
            /// versions wrote "unreachable: …" and "already running").
            init(recorded: String) {
                if let code = ProblemCode(rawValue: recorded) { self = .relay(code); return }
                switch recorded {
                case "resealing": self = .resealing
                case "interrupted": self = .interrupted
                case ClientError.keyChangedCode: self = .keyChanged
                case "unreadable": self = .unreadable
                case "upload_running", "already running": self = .uploadRunning
                case _ where recorded == "unreachable" || recorded.hasPrefix("unreachable:"): self = .unreachable
                case _ where recorded.hasPrefix("file_"): self = .fileChanged(code: recorded)
                default: self = .failed(detail: recorded)
                }
            }

            /// Why a delivery failed, as a reason: the relay's problem, unreachable, interrupted, or
            /// else described.
            init(_ error: any Error) {
                switch error {
                case ClientError.relay(let problem): self = .relay(problem.code)
                case ClientError.unreachable: self = .unreachable
                case ClientError.keyChanged: self = .keyChanged
                case is CancellationError: self = .interrupted
                default: self = .failed(detail: MailslotClient.describe(error))
                }
            }

            /// The problem code, or a short text, for a person or a log.
            public var description: String {
                switch self {
                case .failed(let detail): detail
                default: recorded
                }
            }
        }
    }
}
