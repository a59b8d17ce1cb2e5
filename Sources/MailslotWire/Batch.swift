import Foundation

// One send to many (spec/protocol.md §4.25, §8.3): `POST /v1/messages` and the WebSocket
// `send_many` frame carry entries of the single create (`PUT /v1/users/{to}/messages/{id}`) under
// one author, one TTL and one `wake`; the relay answers one result per entry, in entry order, each
// what the single create would have answered. Nothing is shared between the entries but those
// three and the commit: the envelopes are sealed per recipient.

/// One entry of a send to many: the message `id` for mailbox `to`, its envelope and, optionally,
/// the key id of `to`'s bundle it was sealed to — the members of the single create.
public struct BatchEntry: Sendable, Equatable, Codable {
    /// The recipient's uid.
    public let to: String
    /// The message id in `to`'s mailbox (the same id may go to several recipients).
    public let id: String
    /// The sealed envelope, unpadded base64url.
    public let envelope: String
    /// The key id (``KeyBundle/keyID``) of `to`'s bundle the envelope was sealed to; when present
    /// and no longer `to`'s, this entry is answered `stale_keys`.
    public let keyID: String?

    /// An entry carrying `envelope` (raw bytes, encoded here).
    public init(to: String, id: String, envelope: [UInt8], keyID: String? = nil) {
        self.init(to: to, id: id, envelopeText: Base64URL.encode(envelope), keyID: keyID)
    }

    /// An entry whose envelope is already unpadded base64url text (as it travels).
    public init(to: String, id: String, envelopeText: String, keyID: String? = nil) {
        self.to = to
        self.id = id
        self.envelope = envelopeText
        self.keyID = keyID
    }

    enum CodingKeys: String, CodingKey {
        case to, id, envelope
        case keyID = "key_id"
    }
}

/// `POST /v1/messages`: the entries of a send to many, with what they share.
public struct BatchCreateRequest: Sendable, Equatable, Codable {
    /// 1 … the relay's `--max-batch-entries` (1,000 by default) entries, no (`to`, `id`) pair twice.
    public let entries: [BatchEntry]
    /// How long the relay keeps every entry if unacknowledged (as ``SendRequest/ttlSeconds``).
    public let ttlSeconds: Int64?
    /// Whether the messages may wake their recipients' devices (as ``SendRequest/wake``); nil
    /// means true. An entry that is an identical retry queues no wake-up, whatever this says.
    public let wake: Bool?

    /// A request with all its members.
    public init(entries: [BatchEntry], ttlSeconds: Int64? = nil, wake: Bool? = nil) {
        self.entries = entries
        self.ttlSeconds = ttlSeconds
        self.wake = wake
    }

    enum CodingKeys: String, CodingKey {
        case entries, wake
        case ttlSeconds = "ttl_seconds"
    }
}

/// What one entry of a send to many came to: exactly what `PUT /v1/users/{to}/messages/{id}`
/// would have answered it.
public struct BatchResult: Sendable, Equatable {
    /// The entry's outcome.
    public enum Outcome: Sendable, Equatable {
        /// Stored (`created` true) or found stored already with the same author and envelope
        /// (an identical retry, `created` false); `message` is the sender's view (no envelope).
        case stored(created: Bool, message: MessageRecord)
        /// Refused, with the problem the single create would have answered.
        case refused(Problem)
    }

    /// The entry's recipient.
    public let to: String
    /// The entry's message id.
    public let id: String
    /// What became of it.
    public let outcome: Outcome

    /// A result with all its members.
    public init(to: String, id: String, outcome: Outcome) {
        self.to = to
        self.id = id
        self.outcome = outcome
    }

    /// The problem of a refused entry; nil when it is stored.
    public var problem: Problem? {
        if case .refused(let problem) = outcome { problem } else { nil }
    }

    /// The stored message of an entry that is stored; nil when refused.
    public var message: MessageRecord? {
        if case .stored(_, let message) = outcome { message } else { nil }
    }

    /// Whether the entry stored a new message (false: an identical retry); nil when refused.
    public var created: Bool? {
        if case .stored(let created, _) = outcome { created } else { nil }
    }
}

extension BatchResult: Codable {
    enum CodingKeys: String, CodingKey { case to, id, created, message, problem }

    /// Decodes a result: `to` and `id` as the entry had them (an entry refused for an invalid
    /// uid or id is answered under it; ``BatchResponse/results(_:answer:)`` compares them with the
    /// request), and either `created` with `message` or `problem` — never both, never neither.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        to = try container.decode(String.self, forKey: .to)
        id = try container.decode(String.self, forKey: .id)
        let problem = try container.decodeIfPresent(Problem.self, forKey: .problem)
        let message = try container.decodeIfPresent(MessageRecord.self, forKey: .message)
        let created = try container.decodeIfPresent(Bool.self, forKey: .created)
        switch (problem, message, created) {
        case (let problem?, nil, nil): outcome = .refused(problem)
        case (nil, let message?, let created?): outcome = .stored(created: created, message: message)
        default:
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath,
                                                    debugDescription: "a result has either created and message, or problem"))
        }
    }

    /// Encodes the result's members.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(to, forKey: .to)
        try container.encode(id, forKey: .id)
        switch outcome {
        case .stored(let created, let message):
            try container.encode(created, forKey: .created)
            try container.encode(message, forKey: .message)
        case .refused(let problem):
            try container.encode(problem, forKey: .problem)
        }
    }
}

/// The `200` answer of `POST /v1/messages`: one result per entry, in entry order.
public struct BatchResponse: Sendable, Equatable, Codable {
    /// The results, in the order of the request's entries.
    public let results: [BatchResult]

    /// An answer with these results.
    public init(results: [BatchResult]) {
        self.results = results
    }

    /// Whether `results` answer `entries`: as many, in the same order, each naming its entry's
    /// `to` and `id`. A relay answering other pairs is not to be believed for any of them.
    public static func results(_ results: [BatchResult], answer entries: [BatchEntry]) -> Bool {
        results.count == entries.count && zip(results, entries).allSatisfy { $0.to == $1.to && $0.id == $1.id }
    }
}
