/// A frame a client sends on the subscription socket (`GET /v1/users/{uid}/subscribe`), as one
/// JSON text frame. spec/protocol.md §8.3 lists every frame with an example.
public enum ClientFrame: Sendable, Equatable {
    /// `{"type":"ack","id":…}`: the owner has stored message `id`; the relay erases it.
    case ack(String)
    /// `{"type":"send","ref":…,"to":…,"id":…,"envelope":…,"ttl_seconds"?:…,"key_id"?:…,"wake"?:…}`: the same
    /// as `PUT /v1/users/{to}/messages/{id}`; answered with a `sent` or `error` frame with the same `ref`.
    case send(SendFrame)
    /// `{"type":"send_many","ref":…,"entries":[…],"ttl_seconds"?:…,"wake"?:…}`: the same as
    /// `POST /v1/messages`; answered with a `sent_many` frame (one result per entry) or an `error`
    /// frame with the same `ref`. It is bounded by the frame size like every frame (spec/protocol.md
    /// §8.3); a larger send to many goes by `POST /v1/messages`.
    case sendMany(SendManyFrame)
    /// A type this version does not know: the relay answers it with an `error` frame.
    case unknown(type: String)

    /// A send of `envelope` to `to` under message id `id`, sealed to the keys `keyID` names.
    /// `wake: false` stores and delivers it as any other but wakes none of the recipient's devices
    /// (typing, receipts; spec/push.md §3).
    public static func send(ref: String, to: String, id: String, envelope: [UInt8], ttlSeconds: Int64? = nil,
                            keyID: String? = nil, wake: Bool? = nil) -> ClientFrame {
        .send(SendFrame(ref: ref, to: to, id: id, envelope: Base64URL.encode(envelope), ttlSeconds: ttlSeconds, keyID: keyID, wake: wake))
    }
}

/// The members of a `send_many` frame: those of ``BatchCreateRequest`` and a `ref`.
public struct SendManyFrame: Sendable, Equatable {
    /// The client's reference, echoed in the answer (1 to 64 bytes), as a `send`'s.
    public var ref: String?
    /// The entries (as ``BatchCreateRequest/entries``).
    public var entries: [BatchEntry]
    /// The lifetime of every entry, in seconds.
    public var ttlSeconds: Int64?
    /// Whether the messages may wake their recipients' devices; nil: true.
    public var wake: Bool?

    /// A send to many with all its members.
    public init(ref: String?, entries: [BatchEntry], ttlSeconds: Int64? = nil, wake: Bool? = nil) {
        self.ref = ref
        self.entries = entries
        self.ttlSeconds = ttlSeconds
        self.wake = wake
    }

    /// The request this frame carries, as `POST /v1/messages` would have it.
    public var request: BatchCreateRequest {
        BatchCreateRequest(entries: entries, ttlSeconds: ttlSeconds, wake: wake)
    }
}

/// The members of a `send` frame.
public struct SendFrame: Sendable, Equatable {
    /// The client's reference, echoed in the answer (1 to 64 bytes). A send without a usable one
    /// is answered on its own, without a ref.
    public var ref: String?
    /// The recipient.
    public var to: String
    /// The message id.
    public var id: String
    /// The sealed envelope, unpadded base64url.
    public var envelope: String
    /// The lifetime, in seconds.
    public var ttlSeconds: Int64?
    /// The key id the envelope was sealed to (as in ``SendRequest/keyID``).
    public var keyID: String?
    /// Whether the message may wake the recipient's devices (as in ``SendRequest/wake``); nil: true.
    public var wake: Bool?

    /// A send with all its members.
    public init(ref: String?, to: String, id: String, envelope: String, ttlSeconds: Int64? = nil, keyID: String? = nil,
                wake: Bool? = nil) {
        self.ref = ref
        self.to = to
        self.id = id
        self.envelope = envelope
        self.ttlSeconds = ttlSeconds
        self.keyID = keyID
        self.wake = wake
    }
}

extension ClientFrame: Codable {
    enum CodingKeys: String, CodingKey {
        case type, id, ref, to, envelope
        case ttlSeconds = "ttl_seconds"
        case keyID = "key_id"
        case wake, entries
    }

    /// Decodes a frame. Every known member is read with its type whatever the frame's type (as the
    /// relay always has: a malformed member refuses the frame); unknown members are ignored; a
    /// member a type requires must be there (`id` for an ack; `to`, `id`, `envelope` for a send;
    /// `entries` for a send to many).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let type = try container.decode(String.self, forKey: .type)
        let id = try container.decodeIfPresent(String.self, forKey: .id)
        let ref = try container.decodeIfPresent(String.self, forKey: .ref)
        let to = try container.decodeIfPresent(String.self, forKey: .to)
        let envelope = try container.decodeIfPresent(String.self, forKey: .envelope)
        let ttlSeconds = try container.decodeIfPresent(Int64.self, forKey: .ttlSeconds)
        let keyID = try container.decodeIfPresent(String.self, forKey: .keyID)
        let wake = try container.decodeIfPresent(Bool.self, forKey: .wake)
        let entries = try container.decodeIfPresent([BatchEntry].self, forKey: .entries)
        guard let frame = Self(type: type, id: id, ref: ref, to: to, envelope: envelope, ttlSeconds: ttlSeconds, keyID: keyID,
                               wake: wake, entries: entries) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "a \(type) frame lacks a member it needs"))
        }
        self = frame
    }

    /// The frame of `type` with these members, or nil when one it requires is missing.
    init?(type: String, id: String?, ref: String?, to: String?, envelope: String?, ttlSeconds: Int64?, keyID: String?, wake: Bool?,
          entries: [BatchEntry]?) {
        switch type {
        case "ack":
            guard let id else { return nil }
            self = .ack(id)
        case "send":
            guard let to, let id, let envelope else { return nil }
            self = .send(SendFrame(ref: ref, to: to, id: id, envelope: envelope, ttlSeconds: ttlSeconds, keyID: keyID, wake: wake))
        case "send_many":
            guard let entries else { return nil }
            self = .sendMany(SendManyFrame(ref: ref, entries: entries, ttlSeconds: ttlSeconds, wake: wake))
        default:
            self = .unknown(type: type)
        }
    }

    /// Encodes the frame's members.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        switch self {
        case .ack(let id):
            try container.encode("ack", forKey: .type)
            try container.encode(id, forKey: .id)
        case .send(let send):
            try container.encode("send", forKey: .type)
            try container.encodeIfPresent(send.ref, forKey: .ref)
            try container.encode(send.to, forKey: .to)
            try container.encode(send.id, forKey: .id)
            try container.encode(send.envelope, forKey: .envelope)
            try container.encodeIfPresent(send.ttlSeconds, forKey: .ttlSeconds)
            try container.encodeIfPresent(send.keyID, forKey: .keyID)
            try container.encodeIfPresent(send.wake, forKey: .wake)
        case .sendMany(let send):
            try container.encode("send_many", forKey: .type)
            try container.encodeIfPresent(send.ref, forKey: .ref)
            try container.encode(send.entries, forKey: .entries)
            try container.encodeIfPresent(send.ttlSeconds, forKey: .ttlSeconds)
            try container.encodeIfPresent(send.wake, forKey: .wake)
        case .unknown(let type):
            try container.encode(type, forKey: .type)
        }
    }

    /// The frame a flat object of string (or null) members decodes to — what JSONDecoder would
    /// give — or nil when only JSONDecoder can say (no type, a ttl_seconds or wake to interpret, a
    /// member missing: JSONDecoder refuses those).
    init?(flatMembers members: [(name: String, value: String?)]) {
        var type, id, ref, to, envelope, keyID: String?
        for (name, value) in members {
            switch name {
            case CodingKeys.type.rawValue: type = value
            case CodingKeys.id.rawValue: id = value
            case CodingKeys.ref.rawValue: ref = value
            case CodingKeys.to.rawValue: to = value
            case CodingKeys.envelope.rawValue: envelope = value
            case CodingKeys.keyID.rawValue: keyID = value
            case CodingKeys.ttlSeconds.rawValue, CodingKeys.wake.rawValue, CodingKeys.entries.rawValue: return nil
            default: continue  // unknown members are ignored, as by JSONDecoder
            }
        }
        guard let type else { return nil }
        self.init(type: type, id: id, ref: ref, to: to, envelope: envelope, ttlSeconds: nil, keyID: keyID, wake: nil, entries: nil)
    }
}

/// A frame the relay sends on the subscription socket. spec/protocol.md §8.4.
public enum RelayFrame: Sendable, Equatable {
    /// `{"type":"ready","pending":N,"prekeys":M}`: the first frame; N messages are waiting, and
    /// the relay holds M of the owner's one-time prekeys (nil from a relay older than prekeys).
    case ready(pending: Int, prekeys: Int? = nil)
    /// `{"type":"message","message":{…,"envelope":…}}`: a delivery; ack it by id.
    case message(MessageRecord)
    /// `{"type":"acked","id":…}`: the message is erased.
    case acked(id: String)
    /// `{"type":"sent","ref":…,"created":true|false,"message":{…}}`: a `send` was stored (or
    /// was an identical retry, `created` false).
    case sent(ref: String, created: Bool, message: MessageRecord)
    /// `{"type":"sent_many","ref":…,"results":[…]}`: a `send_many` was decided, one result per
    /// entry in entry order (as `POST /v1/messages` answers).
    case sentMany(ref: String, results: [BatchResult])
    /// `{"type":"error","ref"?:…,"id"?:…,"problem":{…}}`: a frame was refused (the `ref` of a
    /// send, the `id` of an ack); the socket stays open.
    case error(Problem, ref: String? = nil, id: String? = nil)
    /// `{"type":"prekeys","prekeys":M}`: a claim left the relay holding M of the owner's one-time
    /// prekeys, fewer than ``PrekeyCount/lowWater``; sent once per crossing of the mark.
    case prekeys(Int)
    /// A type this version does not know (a newer relay's): clients skip it.
    case unknown(type: String)

    /// The frame's type, as on the wire.
    public var type: String {
        switch self {
        case .ready: "ready"
        case .message: "message"
        case .acked: "acked"
        case .sent: "sent"
        case .sentMany: "sent_many"
        case .error: "error"
        case .prekeys: "prekeys"
        case .unknown(let type): type
        }
    }

    /// The number of waiting messages of a `ready` frame.
    public var pending: Int? {
        if case .ready(let pending, _) = self { pending } else { nil }
    }

    /// The owner's stored one-time prekeys, of a `ready` frame from a relay that says, or of a
    /// `prekeys` frame.
    public var prekeys: Int? {
        switch self {
        case .ready(_, let prekeys): prekeys
        case .prekeys(let count): count
        default: nil
        }
    }

    /// Whether a `sent` frame's send stored a new message (false: an identical retry).
    public var created: Bool? {
        if case .sent(_, let created, _) = self { created } else { nil }
    }

    /// The message of a `message` or `sent` frame.
    public var message: MessageRecord? {
        switch self {
        case .message(let record), .sent(_, _, let record): record
        default: nil
        }
    }

    /// The results of a `sent_many` frame, in entry order.
    public var results: [BatchResult]? {
        if case .sentMany(_, let results) = self { results } else { nil }
    }

    /// The problem of an `error` frame.
    public var problem: Problem? {
        if case .error(let problem, _, _) = self { problem } else { nil }
    }

    /// The client's reference a `sent`, `sent_many` or `error` frame answers.
    public var ref: String? {
        switch self {
        case .sent(let ref, _, _), .sentMany(let ref, _): ref
        case .error(_, let ref, _): ref
        default: nil
        }
    }

    /// The message id of an `acked` frame, or of an `error` answering an ack.
    public var id: String? {
        switch self {
        case .acked(let id): id
        case .error(_, _, let id): id
        default: nil
        }
    }
}

extension RelayFrame: Codable {
    enum CodingKeys: String, CodingKey { case type, pending, prekeys, message, ref, id, created, problem, results }

    /// Decodes a frame; a type this version does not know decodes as ``unknown(type:)``.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        switch try container.decode(String.self, forKey: .type) {
        case "ready":
            // Numbers no relay sends are refused (``OutOfRange``), never computed with.
            self = .ready(pending: try container.decode(Int.self, forKey: .pending, in: 0...Int.max),
                          prekeys: try container.decodeIfPresent(Int.self, forKey: .prekeys, in: 0...RelayAnswers.maxPrekeyCount))
        case "message": self = .message(try container.decode(MessageRecord.self, forKey: .message))
        case "acked": self = .acked(id: try container.decode(String.self, forKey: .id, Grammar.messageID, Identifier.isValidMessageID))
        case "sent":
            self = .sent(ref: try container.decode(String.self, forKey: .ref), created: try container.decode(Bool.self, forKey: .created),
                         message: try container.decode(MessageRecord.self, forKey: .message))
        case "sent_many":
            self = .sentMany(ref: try container.decode(String.self, forKey: .ref),
                             results: try container.decode([BatchResult].self, forKey: .results))
        case "error":
            self = .error(try container.decode(Problem.self, forKey: .problem), ref: try container.decodeIfPresent(String.self, forKey: .ref),
                          id: try container.decodeIfPresent(String.self, forKey: .id, Grammar.messageID, Identifier.isValidMessageID))
        case "prekeys":
            self = .prekeys(try container.decode(Int.self, forKey: .prekeys, in: 0...RelayAnswers.maxPrekeyCount))
        case let type: self = .unknown(type: type)
        }
    }

    /// Encodes the frame's members (with sorted keys, what ``RelayFrame`` writers compare to).
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(type, forKey: .type)
        switch self {
        case .ready(let pending, let prekeys):
            try container.encode(pending, forKey: .pending)
            try container.encodeIfPresent(prekeys, forKey: .prekeys)
        case .message(let record): try container.encode(record, forKey: .message)
        case .acked(let id): try container.encode(id, forKey: .id)
        case .sent(let ref, let created, let record):
            try container.encode(ref, forKey: .ref)
            try container.encode(created, forKey: .created)
            try container.encode(record, forKey: .message)
        case .sentMany(let ref, let results):
            try container.encode(ref, forKey: .ref)
            try container.encode(results, forKey: .results)
        case .error(let problem, let ref, let id):
            try container.encode(problem, forKey: .problem)
            try container.encodeIfPresent(ref, forKey: .ref)
            try container.encodeIfPresent(id, forKey: .id)
        case .prekeys(let count): try container.encode(count, forKey: .prekeys)
        case .unknown: break
        }
    }
}

/// WebSocket close codes the relay uses besides the standard ones.
public enum CloseCode {
    /// A newer subscription of the same mailbox took over.
    public static let replaced: UInt16 = 4000
    /// The session expired or was revoked while the socket was open.
    public static let sessionEnded: UInt16 = 4001
    /// The client broke the protocol (unparseable frames, too many errors).
    public static let protocolViolation: UInt16 = 4002
}
