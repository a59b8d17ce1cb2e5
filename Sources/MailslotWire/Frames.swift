/// A frame a client sends on the subscription socket (`GET /v1/users/{uid}/subscribe`), as one
/// JSON text frame. spec/protocol.md §WebSocket lists every frame with an example.
///
/// - `{"type":"ack","id":…}`: the owner has stored message `id`; the relay erases it.
/// - `{"type":"send","ref":…,"to":…,"id":…,"envelope":…,"ttl_seconds"?:…,"key_id"?:…}`: the same as
///   `PUT /v1/users/{to}/messages/{id}`; the answer is a `sent` or `error` frame with the same `ref`.
public struct ClientFrame: Sendable, Equatable, Codable {
    /// `ack` or `send`.
    public let type: String
    /// The message id (both frames).
    public let id: String?
    /// The client's reference for a `send`, echoed in the answer (1 to 64 bytes).
    public let ref: String?
    /// The recipient of a `send`.
    public let to: String?
    /// The sealed envelope of a `send`, unpadded base64url.
    public let envelope: String?
    /// The lifetime of a `send`, in seconds.
    public let ttlSeconds: Int64?
    /// The key id the envelope of a `send` was sealed to (as in ``SendRequest/keyID``).
    public let keyID: String?

    /// A frame with the given members; ``ack(_:)`` and ``send(ref:to:id:envelope:ttlSeconds:keyID:)`` are clearer.
    public init(type: String, id: String?, ref: String?, to: String?, envelope: String?, ttlSeconds: Int64?, keyID: String? = nil) {
        self.type = type
        self.id = id
        self.ref = ref
        self.to = to
        self.envelope = envelope
        self.ttlSeconds = ttlSeconds
        self.keyID = keyID
    }

    /// An acknowledgement of message `id`.
    public static func ack(_ id: String) -> ClientFrame {
        ClientFrame(type: "ack", id: id, ref: nil, to: nil, envelope: nil, ttlSeconds: nil)
    }

    /// A send of `envelope` to `to` under message id `id`, sealed to the keys `keyID` names.
    public static func send(ref: String, to: String, id: String, envelope: [UInt8], ttlSeconds: Int64? = nil,
                            keyID: String? = nil) -> ClientFrame {
        ClientFrame(type: "send", id: id, ref: ref, to: to, envelope: Base64URL.encode(envelope), ttlSeconds: ttlSeconds, keyID: keyID)
    }

    /// Whether the members its type requires are present: `id` for an ack; `to`, `id` and
    /// `envelope` for a send (a missing or unusable `ref` is answered on its own, without a ref).
    /// Unknown types are answered separately.
    public var hasRequiredMembers: Bool {
        switch type {
        case "ack": id != nil
        case "send": to != nil && id != nil && envelope != nil
        default: true
        }
    }

    enum CodingKeys: String, CodingKey {
        case type, id, ref, to, envelope
        case ttlSeconds = "ttl_seconds"
        case keyID = "key_id"
    }
}

extension ClientFrame {
    /// The frame a flat object of string (or null) members decodes to — what JSONDecoder would
    /// give — or nil when only JSONDecoder can say (no type, or a ttl_seconds to interpret).
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
            case CodingKeys.ttlSeconds.rawValue: return nil
            default: continue  // unknown members are ignored, as by JSONDecoder
            }
        }
        guard let type else { return nil }
        self.init(type: type, id: id, ref: ref, to: to, envelope: envelope, ttlSeconds: nil, keyID: keyID)
    }
}

/// A frame the relay sends on the subscription socket.
///
/// - `{"type":"ready","pending":N}`: first frame; N messages are waiting.
/// - `{"type":"message","message":{…,"envelope":…}}`: a delivery; ack it by id.
/// - `{"type":"acked","id":…}`: the message is erased.
/// - `{"type":"sent","ref":…,"created":true|false,"message":{…}}`: a `send` was stored (or was an identical retry).
/// - `{"type":"error","ref"?:…,"id"?:…,"problem":{…}}`: a frame was refused; the socket stays open.
public struct RelayFrame: Sendable, Equatable, Codable {
    /// `ready`, `message`, `acked`, `sent` or `error`.
    public let type: String
    /// The number of waiting messages (`ready`).
    public let pending: Int?
    /// The message (`message`, `sent`).
    public let message: MessageRecord?
    /// The client's reference (`sent`, `error` for a `send`).
    public let ref: String?
    /// The message id (`acked`, `error` for an `ack`).
    public let id: String?
    /// True when a `send` stored a new message, false for an identical retry.
    public let created: Bool?
    /// What went wrong (`error`).
    public let problem: Problem?

    /// A frame with the given fields; the static constructors are clearer.
    public init(type: String, pending: Int? = nil, message: MessageRecord? = nil, ref: String? = nil, id: String? = nil,
                created: Bool? = nil, problem: Problem? = nil) {
        self.type = type
        self.pending = pending
        self.message = message
        self.ref = ref
        self.id = id
        self.created = created
        self.problem = problem
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
