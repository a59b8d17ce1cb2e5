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
