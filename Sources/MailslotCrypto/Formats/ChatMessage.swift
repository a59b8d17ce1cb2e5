import Foundation

/// The chat message carried inside an envelope (its signed body), in the layout chat apps know:
/// `timestamp`, `type`, `sender {id, name, profile_image}`, `payload {text, attachments, files, …}`.
///
/// Fields and types this version does not know are kept and written back unchanged, so clients
/// of different versions can talk. spec/envelope.md §Body defines every field.
public struct ChatMessage: Sendable, Equatable, Codable {
    /// When the sender composed it, in milliseconds since the Unix epoch (sender's clock).
    public var timestamp: Int64
    /// What kind of message this is; see ``MessageType``.
    public var type: MessageType
    /// Who sent it. `sender.id` must equal the uid that signed the envelope.
    public var sender: Sender
    /// The content.
    public var payload: Payload
    /// The group this message is for, and the sender's state of it when it sent (spec/groups.md
    /// §4); nil for a 1:1 message. Any type may carry it.
    public var group: GroupReference?
    /// Top-level fields this version does not know, kept for round trips.
    public var unknownFields: [String: JSONValue] = [:]

    /// A message of `type` from `sender`, composed at `timestamp` (milliseconds).
    public init(type: MessageType, sender: Sender, payload: Payload, timestamp: Int64) {
        self.type = type
        self.sender = sender
        self.payload = payload
        self.timestamp = timestamp
    }

    /// A message of `type` from `sender` for `group` (spec/groups.md §4.1), composed at `timestamp`.
    public init(type: MessageType, sender: Sender, payload: Payload, timestamp: Int64, group: GroupReference?) {
        self.init(type: type, sender: sender, payload: payload, timestamp: timestamp)
        self.group = group
    }

    private static let known: Set<String> = ["timestamp", "type", "sender", "payload", "group"]

    /// The deepest nesting a body may have.
    public static let maxJSONDepth = 32

    /// Decodes a message, keeping unknown fields.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: AnyCodingKey.self)
        timestamp = try container.decode(Int64.self, forKey: AnyCodingKey("timestamp"))
        type = try container.decode(MessageType.self, forKey: AnyCodingKey("type"))
        sender = try container.decode(Sender.self, forKey: AnyCodingKey("sender"))
        payload = try container.decode(Payload.self, forKey: AnyCodingKey("payload"))
        group = try container.decodeIfPresent(GroupReference.self, forKey: AnyCodingKey("group"))
        unknownFields = try container.unknownFields(excluding: Self.known)
    }

    /// Encodes the message with its unknown fields.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: AnyCodingKey.self)
        try container.encode(timestamp, forKey: AnyCodingKey("timestamp"))
        try container.encode(type, forKey: AnyCodingKey("type"))
        try container.encode(sender, forKey: AnyCodingKey("sender"))
        try container.encode(payload, forKey: AnyCodingKey("payload"))
        try container.encodeIfPresent(group, forKey: AnyCodingKey("group"))
        try container.encodeUnknownFields(unknownFields)
    }

    /// The message as compact JSON with sorted keys: the bytes that get signed and sealed.
    /// Fails only for a number JSON cannot carry (NaN or infinite), anywhere in the message.
    public func encoded() throws(EnvelopeError) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        do { return Array(try encoder.encode(self)) } catch {
            throw .invalidBody("the message holds a number JSON cannot carry (NaN or infinite)")
        }
    }

    /// Decodes and checks a body: the fields each known type needs, and their ranges.
    public static func decode(_ body: [UInt8]) throws(EnvelopeError) -> ChatMessage {
        do { try StrictJSON.validate(body, maxDepth: maxJSONDepth) } catch {
            throw .invalidBody("the body is not strict JSON (RFC 8259, unique member names, depth ≤ \(maxJSONDepth))")
        }
        let message: ChatMessage
        do { message = try JSONDecoder().decode(ChatMessage.self, from: Data(body)) } catch let error as EnvelopeError {
            throw error  // a member's own check (a file reference) says what is wrong
        } catch let error as GroupError {
            throw .invalidBody("a group member of the body is malformed (\(error))")
        } catch {
            throw .invalidBody("the body is not a chat message in JSON")
        }
        try message.validate()
        return message
    }

    /// Throws ``EnvelopeError/invalidBody(_:)`` unless the message has what its type needs.
    public func validate() throws(EnvelopeError) {
        guard Identifier.isValidUID(sender.id) else { throw .invalidBody("sender.id is not a valid uid") }
        guard !type.rawValue.isEmpty, type.rawValue.utf8.count <= 64 else { throw .invalidBody("type must be 1 to 64 bytes") }
        // Whatever the type: each reference checked itself when it was made or decoded.
        if let files = payload.files, !(1...FileReference.maxPerMessage).contains(files.count) {
            throw .invalidBody("payload.files must hold 1 to \(FileReference.maxPerMessage) references")
        }
        switch type {
        case .text:
            guard let text = payload.text, !text.isEmpty else { throw .invalidBody("a text message needs payload.text") }
        case .picture:
            guard let attachments = payload.attachments, !attachments.isEmpty else {
                throw .invalidBody("a picture needs payload.attachments")
            }
            for attachment in attachments where !attachment.mediaType.hasPrefix("image/") {
                throw .invalidBody("a picture's attachments must have an image/* media_type")
            }
        case .file:
            guard payload.files != nil else { throw .invalidBody("a file message needs payload.files") }
        case .location:
            guard let location = payload.location, (-90...90).contains(location.latitude),
                  (-180...180).contains(location.longitude) else {
                throw .invalidBody("a location needs payload.location with latitude -90…90 and longitude -180…180")
            }
        case .receipt:
            guard let receipt = payload.receipt, !receipt.messageIDs.isEmpty,
                  receipt.messageIDs.allSatisfy(Identifier.isValidMessageID) else {
                throw .invalidBody("a receipt needs payload.receipt with valid message_ids")
            }
        case .typing:
            guard payload.typing != nil else { throw .invalidBody("a typing indicator needs payload.typing") }
        case .groupChange:
            guard let group else { throw .invalidBody("a group_change needs group") }
            guard let change = payload.groupChange else { throw .invalidBody("a group_change needs payload.group_change") }
            guard change.version == group.version else { throw .invalidBody("payload.group_change.version must equal group.version") }
        case .groupSync:
            guard group != nil else { throw .invalidBody("a group_sync needs group") }
            guard payload.groupSync != nil else { throw .invalidBody("a group_sync needs payload.group_sync") }
        case .groupHistory:
            guard group != nil else { throw .invalidBody("a group_history needs group") }
            guard let history = payload.groupHistory else { throw .invalidBody("a group_history needs payload.group_history") }
            guard (1...GroupLimits.maxHistoryChanges).contains(history.changes.count) else {
                throw .invalidBody("payload.group_history.changes must hold 1 to \(GroupLimits.maxHistoryChanges) changes")
            }
        default:
            break  // a type from a newer client: carried as it is
        }
    }
}

/// The kind of a chat message. Unknown kinds are valid and carried unchanged.
public struct MessageType: RawRepresentable, Sendable, Hashable, Codable, ExpressibleByStringLiteral {
    /// The kind as written on the wire.
    public let rawValue: String
    /// Wraps a kind as written on the wire.
    public init(rawValue: String) { self.rawValue = rawValue }
    /// Wraps a kind literal.
    public init(stringLiteral value: String) { rawValue = value }
    /// Decodes the kind from a JSON string.
    public init(from decoder: any Decoder) throws { rawValue = try decoder.singleValueContainer().decode(String.self) }
    /// Encodes the kind as a JSON string.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }

    /// Plain text in `payload.text`.
    public static let text: MessageType = "text"
    /// One or more images inline in `payload.attachments`, an optional caption in `payload.text`.
    public static let picture: MessageType = "picture"
    /// One or more files sent as blobs, referenced in `payload.files` (spec/attachments.md §3), an
    /// optional caption in `payload.text`.
    public static let file: MessageType = "file"
    /// A point in `payload.location`.
    public static let location: MessageType = "location"
    /// A delivery or read receipt for earlier messages, in `payload.receipt`.
    public static let receipt: MessageType = "receipt"
    /// A typing indicator in `payload.typing`; clients show it and do not store it.
    public static let typing: MessageType = "typing"
    /// A signed change to a group in `payload.group_change` (spec/groups.md §2), with `group`.
    public static let groupChange: MessageType = "group_change"
    /// A member asking for the changes of a group it lacks, in `payload.group_sync` (spec/groups.md §4.3).
    public static let groupSync: MessageType = "group_sync"
    /// An answer to a `group_sync`: signed changes in `payload.group_history` (spec/groups.md §4.3).
    public static let groupHistory: MessageType = "group_history"
}

/// Who sent a message, as the sender describes themselves. Only `id` is verified.
public struct Sender: Sendable, Equatable, Codable {
    /// The sender's uid; must equal the uid that signed the envelope.
    public var id: String
    /// A display name, as the sender chose it.
    public var name: String?
    /// A URL of the sender's picture, as the sender chose it.
    public var profileImage: String?

    /// A sender with a uid and optional display fields.
    public init(id: String, name: String? = nil, profileImage: String? = nil) {
        self.id = id
        self.name = name
        self.profileImage = profileImage
    }

    enum CodingKeys: String, CodingKey {
        case id, name
        case profileImage = "profile_image"
    }
}

/// The content of a chat message. Which fields are present depends on the type.
public struct Payload: Sendable, Equatable, Codable {
    /// Text, or a caption for a picture.
    public var text: String?
    /// Inline files (pictures).
    public var attachments: [Attachment]?
    /// Files sent as blobs: 1…32 references (spec/attachments.md §3).
    public var files: [FileReference]?
    /// A point on the map.
    public var location: Location?
    /// A receipt for earlier messages.
    public var receipt: Receipt?
    /// A typing indicator.
    public var typing: Typing?
    /// A signed group change (type `group_change`).
    public var groupChange: GroupChange?
    /// A request for a group's changes (type `group_sync`).
    public var groupSync: GroupSync?
    /// Changes answering a request (type `group_history`).
    public var groupHistory: GroupHistory?
    /// Payload fields this version does not know, kept for round trips.
    public var unknownFields: [String: JSONValue] = [:]

    /// A payload with the given fields.
    public init(text: String? = nil, attachments: [Attachment]? = nil, files: [FileReference]? = nil, location: Location? = nil,
                receipt: Receipt? = nil, typing: Typing? = nil) {
        self.text = text
        self.attachments = attachments
        self.files = files
        self.location = location
        self.receipt = receipt
        self.typing = typing
    }

    /// The payload of a `group_change` message.
    public init(groupChange: GroupChange) { self.groupChange = groupChange }

    /// The payload of a `group_sync` message.
    public init(groupSync: GroupSync) { self.groupSync = groupSync }

    /// The payload of a `group_history` message.
    public init(groupHistory: GroupHistory) { self.groupHistory = groupHistory }

    private static let known: Set<String> = ["text", "attachments", "files", "location", "receipt", "typing",
                                             "group_change", "group_sync", "group_history"]

    /// Decodes a payload, keeping unknown fields.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: AnyCodingKey.self)
        text = try container.decodeIfPresent(String.self, forKey: AnyCodingKey("text"))
        attachments = try container.decodeIfPresent([Attachment].self, forKey: AnyCodingKey("attachments"))
        files = try container.decodeIfPresent([FileReference].self, forKey: AnyCodingKey("files"))
        location = try container.decodeIfPresent(Location.self, forKey: AnyCodingKey("location"))
        receipt = try container.decodeIfPresent(Receipt.self, forKey: AnyCodingKey("receipt"))
        typing = try container.decodeIfPresent(Typing.self, forKey: AnyCodingKey("typing"))
        groupChange = try container.decodeIfPresent(GroupChange.self, forKey: AnyCodingKey("group_change"))
        groupSync = try container.decodeIfPresent(GroupSync.self, forKey: AnyCodingKey("group_sync"))
        groupHistory = try container.decodeIfPresent(GroupHistory.self, forKey: AnyCodingKey("group_history"))
        unknownFields = try container.unknownFields(excluding: Self.known)
    }

    /// Encodes the payload with its unknown fields.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: AnyCodingKey.self)
        try container.encodeIfPresent(text, forKey: AnyCodingKey("text"))
        try container.encodeIfPresent(attachments, forKey: AnyCodingKey("attachments"))
        try container.encodeIfPresent(files, forKey: AnyCodingKey("files"))
        try container.encodeIfPresent(location, forKey: AnyCodingKey("location"))
        try container.encodeIfPresent(receipt, forKey: AnyCodingKey("receipt"))
        try container.encodeIfPresent(typing, forKey: AnyCodingKey("typing"))
        try container.encodeIfPresent(groupChange, forKey: AnyCodingKey("group_change"))
        try container.encodeIfPresent(groupSync, forKey: AnyCodingKey("group_sync"))
        try container.encodeIfPresent(groupHistory, forKey: AnyCodingKey("group_history"))
        try container.encodeUnknownFields(unknownFields)
    }
}

/// A file carried inline in the message, e.g. a picture.
public struct Attachment: Sendable, Equatable, Codable {
    /// The media type, e.g. `image/jpeg`.
    public var mediaType: String
    /// The file's bytes (base64url on the wire).
    public var data: [UInt8]
    /// A file name, if the sender gave one.
    public var name: String?

    /// An attachment of `mediaType` with the given bytes.
    public init(mediaType: String, data: [UInt8], name: String? = nil) {
        self.mediaType = mediaType
        self.data = data
        self.name = name
    }

    enum CodingKeys: String, CodingKey {
        case mediaType = "media_type", data, name
    }

    /// Decodes an attachment whose data is unpadded base64url.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        mediaType = try container.decode(String.self, forKey: .mediaType)
        name = try container.decodeIfPresent(String.self, forKey: .name)
        guard let bytes = Base64URL.decode(try container.decode(String.self, forKey: .data)) else {
            throw DecodingError.dataCorruptedError(forKey: .data, in: container, debugDescription: "not base64url")
        }
        data = bytes
    }

    /// Encodes the attachment with its data as unpadded base64url.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(mediaType, forKey: .mediaType)
        try container.encode(Base64URL.encode(data), forKey: .data)
        try container.encodeIfPresent(name, forKey: .name)
    }
}

/// A point on the map, in WGS 84 degrees.
public struct Location: Sendable, Equatable, Codable {
    /// -90…90.
    public var latitude: Double
    /// -180…180.
    public var longitude: Double

    /// A location at `latitude`, `longitude` (degrees).
    public init(latitude: Double, longitude: Double) {
        self.latitude = latitude
        self.longitude = longitude
    }
}

/// A delivery or read receipt: sent as a message of its own to the other side's mailbox, so the
/// relay never learns who read what.
public struct Receipt: Sendable, Equatable, Codable {
    /// What the receipt acknowledges. Kinds from newer clients are kept, not refused.
    public struct Kind: RawRepresentable, Sendable, Hashable, Codable {
        /// The kind as written on the wire.
        public let rawValue: String
        /// Wraps a kind as written on the wire.
        public init(rawValue: String) { self.rawValue = rawValue }
        /// Decodes the kind from a JSON string.
        public init(from decoder: any Decoder) throws { rawValue = try decoder.singleValueContainer().decode(String.self) }
        /// Encodes the kind as a JSON string.
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            try container.encode(rawValue)
        }
        /// The messages reached the recipient's device.
        public static let delivered = Kind(rawValue: "delivered")
        /// The recipient has seen them.
        public static let read = Kind(rawValue: "read")
        /// The recipient's device could not open them (sealed to keys it does not hold, e.g.
        /// after a reinstall): the sender shows them as undelivered and may send them again.
        public static let unreadable = Kind(rawValue: "unreadable")
    }
    /// Delivered or read.
    public var kind: Kind
    /// The ids of the messages acknowledged.
    public var messageIDs: [String]

    /// A receipt of `kind` for `messageIDs`.
    public init(kind: Kind, messageIDs: [String]) {
        self.kind = kind
        self.messageIDs = messageIDs
    }

    enum CodingKeys: String, CodingKey {
        case kind
        case messageIDs = "message_ids"
    }
}

/// A typing indicator.
public struct Typing: Sendable, Equatable, Codable {
    /// True while the sender is typing, false when they stopped.
    public var active: Bool

    /// An indicator that the sender is (or stopped) typing.
    public init(active: Bool) { self.active = active }
}

/// The `group` member of a group message (spec/groups.md §4.1): which group, and the sender's
/// state of it when it sent — its version and state hash, so a receiver learns when it is behind.
public struct GroupReference: Sendable, Equatable, Codable {
    /// The group.
    public var id: GroupID
    /// The sender's state's version: 1 … 2^53 − 1.
    public var version: UInt64
    /// The hash of the sender's state (32 bytes; 43 characters of base64url on the wire).
    public var stateHash: [UInt8]

    /// The reference to `state`, as its members send it.
    public init(_ state: GroupState) {
        id = state.id
        version = state.version
        stateHash = state.hash
    }

    /// A reference with these fields (checked when a message is decoded, not here).
    public init(id: GroupID, version: UInt64, stateHash: [UInt8]) {
        self.id = id
        self.version = version
        self.stateHash = stateHash
    }

    private enum Keys: String, CodingKey { case id, version, stateHash = "state_hash" }

    /// Decodes the member, refusing a version out of range or a hash that is not 32 bytes.
    /// Unknown members inside it are ignored.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Keys.self)
        id = try container.decode(GroupID.self, forKey: .id)
        version = try container.decode(UInt64.self, forKey: .version)
        guard (1...GroupLimits.maxVersion).contains(version) else { throw GroupError.malformed("group.version must be 1 … 2^53 − 1") }
        let text = try container.decode(String.self, forKey: .stateHash)
        guard let bytes = Base64URL.decode(text), bytes.count == 32 else {
            throw GroupError.malformed("group.state_hash must be strict base64url of 32 bytes")
        }
        stateHash = bytes
    }

    /// Encodes the member.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Keys.self)
        try container.encode(id, forKey: .id)
        try container.encode(Base64URL.encode(stateHash), forKey: .stateHash)
        try container.encode(version, forKey: .version)
    }
}

/// A request for the changes of a group (type `group_sync`, spec/groups.md §4.3): "send me the
/// changes of version ≥ `from` you know; 0: I do not know this group".
public struct GroupSync: Sendable, Equatable, Codable {
    /// The lowest version wanted; 0 when the asker does not know the group.
    public var from: UInt64

    /// A request from version `from`.
    public init(from: UInt64) { self.from = from }

    private enum Keys: String, CodingKey { case from }

    /// Decodes the request, refusing a version over 2^53 − 1.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Keys.self)
        from = try container.decode(UInt64.self, forKey: .from)
        guard from <= GroupLimits.maxVersion else { throw GroupError.malformed("group_sync.from must be 0 … 2^53 − 1") }
    }

    /// Encodes the request.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Keys.self)
        try container.encode(from, forKey: .from)
    }
}

/// An answer to a `group_sync` (type `group_history`, spec/groups.md §4.3): 1 … 64 signed
/// changes, ascending by version, and, for an asker that did not know the group, the state
/// before the first of them.
public struct GroupHistory: Sendable, Equatable, Codable {
    /// The changes, each still signed by its author (the answerer vouches for none).
    public var changes: [GroupChange]
    /// The state the asker starts from when it did not know the group.
    public var base: GroupState?

    /// An answer with these changes and optional base.
    public init(changes: [GroupChange], base: GroupState? = nil) {
        self.changes = changes
        self.base = base
    }
}
