import MailslotCrypto

// Wake-ups for offline apps: the push registrations a mailbox owner leaves with the relay, and
// what the relay answers about them. spec/push.md, spec/protocol.md §4.22–§4.24.

/// A push service the relay can wake a device through, as named on the wire (`provider`).
public enum PushProviderKind: String, Sendable, Equatable, Hashable, Codable, CaseIterable {
    /// Web Push (RFC 8030) with VAPID (RFC 8292) and an `aes128gcm` payload (RFC 8291): browsers and
    /// UnifiedPush distributors.
    case webpush
    /// Apple Push Notification service, HTTP/2 with token authentication.
    case apns
    /// Firebase Cloud Messaging, HTTP v1 API.
    case fcm
    /// The operator's own backend, through a signed POST.
    case webhook

    /// The number the relay's stores keep for the provider (spec/push.md: never reused).
    package var storeCode: Int {
        switch self {
        case .webpush: 1
        case .apns: 2
        case .fcm: 3
        case .webhook: 4
        }
    }

    /// The provider a store code names; nil for a code this version does not know.
    package init?(storeCode: Int) {
        guard let kind = Self.allCases.first(where: { $0.storeCode == storeCode }) else { return nil }
        self = kind
    }
}

/// How an APNs wake-up is delivered (`mode` of an `apns` registration).
public enum APNsPushMode: String, Sendable, Equatable, Hashable, Codable, CaseIterable {
    /// A `mutable-content` alert that runs the app's Notification Service Extension (the default:
    /// iOS throttles background pushes).
    case alert
    /// A `content-available` background push (priority 5), throttled by iOS.
    case background
}

/// The grammars of push registrations (spec/push.md §2), shared by the relay, which enforces
/// them, and clients, which make ids and tags.
public enum PushGrammar {
    /// The largest `PUT /v1/users/{uid}/push/{id}` body, in bytes.
    public static let maximumBodyBytes = 4096
    /// The longest tag.
    public static let maximumTagLength = 48
    /// The longest Web Push endpoint, in bytes.
    public static let maximumEndpointBytes = 1024
    /// The longest FCM or webhook token, in bytes.
    public static let maximumTokenBytes = 1024

    /// A registration id: 16 to 64 characters from `A-Z a-z 0-9 _ -` (writers use 22: 16 random
    /// bytes in unpadded base64url).
    public static func isValidRegistrationID(_ id: String) -> Bool { Identifier.isValidMessageID(id) }

    /// A tag: 0 to 48 characters from `A-Z a-z 0-9 _ -`.
    public static func isValidTag(_ tag: String) -> Bool {
        tag.utf8.count <= maximumTagLength && tag.utf8.allSatisfy(isBase64URLByte)
    }

    /// An APNs device token: 64 to 200 lowercase hexadecimal digits (Apple: do not assume 32 bytes).
    public static func isValidAPNsToken(_ token: String) -> Bool {
        (64...200).contains(token.utf8.count)
            && token.utf8.allSatisfy { (48...57).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0) }
    }

    /// An FCM registration token: 1 to 1 024 characters from `A-Z a-z 0-9 _ : . -`.
    public static func isValidFCMToken(_ token: String) -> Bool {
        (1...maximumTokenBytes).contains(token.utf8.count)
            && token.utf8.allSatisfy { isBase64URLByte($0) || $0 == UInt8(ascii: ":") || $0 == UInt8(ascii: ".") }
    }

    /// A webhook token: 1 to 1 024 printable ASCII characters (space to `~`), opaque to the relay.
    public static func isValidWebhookToken(_ token: String) -> Bool {
        (1...maximumTokenBytes).contains(token.utf8.count) && token.utf8.allSatisfy { (0x20...0x7E).contains($0) }
    }

    static func isBase64URLByte(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
    }
}

/// Why a `PUT /v1/users/{uid}/push/{id}` body does not have the shape of its provider. The
/// relay answers `400 invalid_push_registration` naming ``member``, except that for a known
/// provider it first answers `push_provider_disabled` when that provider is off (spec/push.md §2.2).
public struct PushRegistrationShapeError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The provider the body names, when it names a known one.
    public let provider: PushProviderKind?
    /// The member at fault (`provider` when it is missing or unknown).
    public let member: String
    /// What is wrong with it, for people.
    public let reason: String

    /// A refusal of `member`.
    public init(provider: PushProviderKind?, member: String, reason: String) {
        self.provider = provider
        self.member = member
        self.reason = reason
    }

    /// "`member`: `reason`".
    public var description: String { "\(member): \(reason)" }
}

/// The body of `PUT /v1/users/{uid}/push/{id}`: a provider and that provider's members (spec/push.md
/// §2.1). Decoding is strict: a member another provider uses, or one no provider uses, is refused
/// (``PushRegistrationShapeError``), as is a member of the wrong JSON type. Values are checked by
/// the relay after the provider (grammar, the Web Push key on the curve, the endpoint's address).
public struct PushRegistrationRequest: Sendable, Equatable, Codable {
    /// The push service.
    public let provider: PushProviderKind
    /// The client's opaque tag, the only thing a wake-up carries (default `""`).
    public let tag: String?
    /// Web Push: the subscription's endpoint URL.
    public let endpoint: String?
    /// Web Push: the subscription's P-256 public key, unpadded base64url of the 65-byte point.
    public let p256dh: String?
    /// Web Push: the subscription's authentication secret, unpadded base64url of 16 bytes.
    public let auth: String?
    /// APNs (lowercase hex), FCM, or webhook (optional, opaque) device token.
    public let token: String?
    /// APNs: whether the token is for Apple's development environment (default false).
    public let sandbox: Bool?
    /// APNs: how the wake-up is delivered (default ``APNsPushMode/alert``).
    public let mode: APNsPushMode?

    /// A Web Push subscription, as `PushSubscription.toJSON()` gives it (keys in unpadded base64url).
    public static func webPush(endpoint: String, p256dh: String, auth: String, tag: String? = nil) -> Self {
        Self(provider: .webpush, tag: tag, endpoint: endpoint, p256dh: p256dh, auth: auth, token: nil, sandbox: nil, mode: nil)
    }

    /// An APNs device token in lowercase hex.
    public static func apns(token: String, sandbox: Bool? = nil, mode: APNsPushMode? = nil, tag: String? = nil) -> Self {
        Self(provider: .apns, tag: tag, endpoint: nil, p256dh: nil, auth: nil, token: token, sandbox: sandbox, mode: mode)
    }

    /// An FCM registration token.
    public static func fcm(token: String, tag: String? = nil) -> Self {
        Self(provider: .fcm, tag: tag, endpoint: nil, p256dh: nil, auth: nil, token: token, sandbox: nil, mode: nil)
    }

    /// A registration for the operator's webhook, with the token its backend needs, if any.
    public static func webhook(token: String? = nil, tag: String? = nil) -> Self {
        Self(provider: .webhook, tag: tag, endpoint: nil, p256dh: nil, auth: nil, token: token, sandbox: nil, mode: nil)
    }

    private init(provider: PushProviderKind, tag: String?, endpoint: String?, p256dh: String?, auth: String?, token: String?,
                 sandbox: Bool?, mode: APNsPushMode?) {
        self.provider = provider
        self.tag = tag
        self.endpoint = endpoint
        self.p256dh = p256dh
        self.auth = auth
        self.token = token
        self.sandbox = sandbox
        self.mode = mode
    }

    enum CodingKeys: String, CodingKey, CaseIterable {
        case provider, tag, endpoint, p256dh, auth, token, sandbox, mode
    }

    /// The members each provider takes besides `provider` and `tag`, and which of them it requires.
    public static func members(of provider: PushProviderKind) -> (required: Set<String>, optional: Set<String>) {
        switch provider {
        case .webpush: (["endpoint", "p256dh", "auth"], ["tag"])
        case .apns: (["token"], ["sandbox", "mode", "tag"])
        case .fcm: (["token"], ["tag"])
        case .webhook: ([], ["token", "tag"])
        }
    }

    private struct AnyKey: CodingKey {
        let stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    /// Decodes a body strictly, throwing ``PushRegistrationShapeError`` for the first fault in
    /// this order: `provider` missing or unknown, a member the provider does not take (in name
    /// order), a required member missing, a member of the wrong type.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: AnyKey.self)
        let providerKey = AnyKey(stringValue: "provider")
        guard container.contains(providerKey) else {
            throw PushRegistrationShapeError(provider: nil, member: "provider", reason: "missing")
        }
        guard let name = try? container.decode(String.self, forKey: providerKey), let provider = PushProviderKind(rawValue: name) else {
            throw PushRegistrationShapeError(provider: nil, member: "provider",
                                             reason: "not one of " + PushProviderKind.allCases.map(\.rawValue).joined(separator: ", "))
        }
        let (required, optional) = Self.members(of: provider)
        let present = Set(container.allKeys.map(\.stringValue))
        if let stray = present.subtracting(required).subtracting(optional).subtracting(["provider"]).sorted().first {
            // An empty key is named as it is written (`""`), so that the detail still names it.
            throw PushRegistrationShapeError(provider: provider, member: stray.isEmpty ? "\"\"" : stray,
                                             reason: "not a member of a \(provider.rawValue) registration")
        }
        if let missing = required.subtracting(present).sorted().first {
            throw PushRegistrationShapeError(provider: provider, member: missing, reason: "missing")
        }
        func string(_ name: String) throws -> String? {
            let key = AnyKey(stringValue: name)
            guard container.contains(key) else { return nil }
            guard let value = try? container.decode(String.self, forKey: key) else {
                throw PushRegistrationShapeError(provider: provider, member: name, reason: "not a string")
            }
            return value
        }
        self.provider = provider
        tag = try string("tag")
        endpoint = try string("endpoint")
        p256dh = try string("p256dh")
        auth = try string("auth")
        token = try string("token")
        let sandboxKey = AnyKey(stringValue: "sandbox")
        if container.contains(sandboxKey) {
            guard let value = try? container.decode(Bool.self, forKey: sandboxKey) else {
                throw PushRegistrationShapeError(provider: provider, member: "sandbox", reason: "not true or false")
            }
            sandbox = value
        } else {
            sandbox = nil
        }
        if let text = try string("mode") {
            guard let value = APNsPushMode(rawValue: text) else {
                throw PushRegistrationShapeError(provider: provider, member: "mode", reason: "not \"alert\" or \"background\"")
            }
            mode = value
        } else {
            mode = nil
        }
    }

    /// Writes the members that are set.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(provider, forKey: .provider)
        try container.encodeIfPresent(tag, forKey: .tag)
        try container.encodeIfPresent(endpoint, forKey: .endpoint)
        try container.encodeIfPresent(p256dh, forKey: .p256dh)
        try container.encodeIfPresent(auth, forKey: .auth)
        try container.encodeIfPresent(token, forKey: .token)
        try container.encodeIfPresent(sandbox, forKey: .sandbox)
        try container.encodeIfPresent(mode, forKey: .mode)
    }
}

/// A registration as the relay answers it to its owner (spec/push.md §2.3): never the Web Push
/// keys back.
public struct PushRegistration: Sendable, Equatable, Codable, Identifiable {
    /// The client's id for it.
    public let id: String
    /// The push service.
    public let provider: PushProviderKind
    /// The client's tag (`""` when none was given).
    public let tag: String
    /// When it was first stored (RFC 3339).
    public let createdAt: String
    /// When it was last replaced (RFC 3339).
    public let updatedAt: String
    /// When the last wake-up for it was taken for sending (RFC 3339), whatever the push service
    /// then answered; nil until one was.
    public let wokenAt: String?
    /// Web Push: the endpoint.
    public let endpoint: String?
    /// APNs, FCM, webhook: the token (absent for a webhook registration without one).
    public let token: String?
    /// APNs: the environment.
    public let sandbox: Bool?
    /// APNs: the delivery mode.
    public let mode: APNsPushMode?

    /// A registration with all its fields.
    public init(id: String, provider: PushProviderKind, tag: String, createdAt: String, updatedAt: String, wokenAt: String?,
                endpoint: String? = nil, token: String? = nil, sandbox: Bool? = nil, mode: APNsPushMode? = nil) {
        self.id = id
        self.provider = provider
        self.tag = tag
        self.createdAt = createdAt
        self.updatedAt = updatedAt
        self.wokenAt = wokenAt
        self.endpoint = endpoint
        self.token = token
        self.sandbox = sandbox
        self.mode = mode
    }

    enum CodingKeys: String, CodingKey {
        case id, provider, tag, endpoint, token, sandbox, mode
        case createdAt = "created_at", updatedAt = "updated_at", wokenAt = "woken_at"
    }

    /// Decodes a registration, refusing (``OutOfRange``) what no relay sends: an id or tag
    /// outside its grammar, a time that is not RFC 3339, an endpoint or token longer than allowed.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(String.self, forKey: .id, "a registration id", PushGrammar.isValidRegistrationID)
        provider = try container.decode(PushProviderKind.self, forKey: .provider)
        tag = try container.decode(String.self, forKey: .tag, "a tag", PushGrammar.isValidTag)
        createdAt = try container.decode(String.self, forKey: .createdAt, Grammar.time, Grammar.isTime)
        updatedAt = try container.decode(String.self, forKey: .updatedAt, Grammar.time, Grammar.isTime)
        wokenAt = try container.decodeIfPresent(String.self, forKey: .wokenAt, Grammar.time, Grammar.isTime)
        endpoint = try container.decodeIfPresent(String.self, forKey: .endpoint, "an endpoint of at most 1 024 bytes") {
            $0.utf8.count <= PushGrammar.maximumEndpointBytes
        }
        token = try container.decodeIfPresent(String.self, forKey: .token, "a token of at most 1 024 bytes") {
            $0.utf8.count <= PushGrammar.maximumTokenBytes
        }
        sandbox = try container.decodeIfPresent(Bool.self, forKey: .sandbox)
        mode = try container.decodeIfPresent(APNsPushMode.self, forKey: .mode)
    }
}

/// `GET /v1/users/{uid}/push`: all the owner's registrations, ordered by id (at most the relay's
/// limit: no paging).
public struct PushRegistrationList: Sendable, Equatable, Codable {
    /// The registrations, ordered by id.
    public let registrations: [PushRegistration]

    /// A list of `registrations`.
    public init(registrations: [PushRegistration]) { self.registrations = registrations }

    enum CodingKeys: String, CodingKey { case registrations }

    /// The most registrations a list may hold (the relay's setting is at most 100).
    public static let maximumCount = 100

    /// Decodes a list, refusing (``OutOfRange``) more than ``maximumCount`` registrations.
    public init(from decoder: any Decoder) throws {
        registrations = try decoder.container(keyedBy: CodingKeys.self).decode([PushRegistration].self, forKey: .registrations)
        guard registrations.count <= Self.maximumCount else {
            throw OutOfRange("registrations", "\(registrations.count) registrations", "at most \(Self.maximumCount)")
        }
    }
}

/// `GET /v1/push`: what this relay does with wake-ups.
public struct PushServiceInfo: Sendable, Equatable, Codable {
    /// The most registrations one uid may hold.
    public let maxRegistrations: Int
    /// The providers this relay sends wake-ups through, in name order (empty: wake-ups are off).
    public let providers: [PushProviderKind]
    /// The VAPID public key, unpadded base64url of the 65-byte P-256 point (87 characters): what
    /// a browser passes as `applicationServerKey`. Present only when Web Push is on.
    public let vapidPublicKey: String?
    /// At most one wake-up per registration per this many seconds.
    public let wakeIntervalSeconds: Int

    /// An answer with all its fields.
    public init(maxRegistrations: Int, providers: [PushProviderKind], vapidPublicKey: String?, wakeIntervalSeconds: Int) {
        self.maxRegistrations = maxRegistrations
        self.providers = providers
        self.vapidPublicKey = vapidPublicKey
        self.wakeIntervalSeconds = wakeIntervalSeconds
    }

    enum CodingKeys: String, CodingKey {
        case providers
        case maxRegistrations = "max_registrations", vapidPublicKey = "vapid_public_key", wakeIntervalSeconds = "wake_interval_seconds"
    }

    /// Decodes the answer, refusing (``OutOfRange``) numbers outside the relay's setting ranges
    /// (registrations 1 … 100, interval 5 … 3 600 s) and a key that is not 65 bytes.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        maxRegistrations = try container.decode(Int.self, forKey: .maxRegistrations, in: 1...PushRegistrationList.maximumCount)
        providers = try container.decode([PushProviderKind].self, forKey: .providers)
        vapidPublicKey = try container.decodeIfPresent(String.self, forKey: .vapidPublicKey, "a P-256 point in base64url") {
            Base64URL.decode($0)?.count == 65
        }
        wakeIntervalSeconds = try container.decode(Int.self, forKey: .wakeIntervalSeconds, in: 5...3600)
    }
}
