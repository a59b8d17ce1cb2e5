import Foundation
import MailslotWire

/// Where the relay wakes this device when a message waits and the app is not connected: what the
/// platform gave the app (a Web Push subscription, an APNs device token, an FCM registration
/// token), or a token for the operator's own webhook. A wake-up carries nothing but the account's
/// tag (``MailslotClient/MailslotClient/pushTag``); spec/push.md says what each service learns.
///
/// Named apart from the relay's own target type: an app that also links the relay (a test, an
/// embedded relay) sees no two types of one name.
public enum DevicePushTarget: Sendable, Equatable {
    /// A Web Push subscription (a browser's `PushSubscription`, a UnifiedPush distributor's
    /// endpoint): its `endpoint` URL, its P-256 public key `p256dh` (the 65-byte uncompressed
    /// point) and its 16-byte `auth` secret. Subscribe with the relay's VAPID key
    /// (``PushConfiguration/vapidPublicKey``).
    case webPush(endpoint: URL, p256dh: [UInt8], auth: [UInt8])
    /// An APNs device token (the bytes `didRegisterForRemoteNotificationsWithDeviceToken` gives);
    /// `sandbox` for a development build's token; `mode` how iOS is woken.
    case apns(deviceToken: [UInt8], sandbox: Bool = false, mode: APNsPushMode = .alert)
    /// An FCM registration token.
    case fcm(token: String)
    /// The operator's webhook, with whatever token its backend needs to find this device.
    case webhook(token: String?)

    /// The push service this target goes through.
    public var provider: PushProviderKind {
        switch self {
        case .webPush: .webpush
        case .apns: .apns
        case .fcm: .fcm
        case .webhook: .webhook
        }
    }

    /// The registration body for this target with `tag` (none: the body as stored, to be tagged
    /// when sent; spec/push.md §2.1): keys in unpadded base64url, an APNs token in lowercase hex. The relay checks the values; the client only
    /// refuses what it can tell is wrong without asking (``ClientError/invalidPushTarget(reason:)``).
    func request(tag: String?) throws -> PushRegistrationRequest {
        switch self {
        case .webPush(let endpoint, let p256dh, let auth):
            guard endpoint.scheme?.lowercased() == "https" || endpoint.scheme?.lowercased() == "http", endpoint.host != nil else {
                throw ClientError.invalidPushTarget(reason: "a Web Push endpoint is an absolute https:// URL")
            }
            guard p256dh.count == 65, p256dh.first == 0x04 else {
                throw ClientError.invalidPushTarget(reason: "p256dh is the 65-byte uncompressed P-256 point of the subscription")
            }
            guard auth.count == 16 else { throw ClientError.invalidPushTarget(reason: "auth is the subscription's 16-byte secret") }
            return .webPush(endpoint: endpoint.absoluteString, p256dh: Base64URL.encode(p256dh), auth: Base64URL.encode(auth), tag: tag)
        case .apns(let deviceToken, let sandbox, let mode):
            let hex = deviceToken.map { String(format: "%02x", $0) }.joined()
            guard PushGrammar.isValidAPNsToken(hex) else {
                throw ClientError.invalidPushTarget(reason: "an APNs device token is 32 to 100 bytes")
            }
            return .apns(token: hex, sandbox: sandbox, mode: mode, tag: tag)
        case .fcm(let token):
            guard PushGrammar.isValidFCMToken(token) else {
                throw ClientError.invalidPushTarget(reason: "an FCM token is 1 to 1 024 of A-Z a-z 0-9 _ : . -")
            }
            return .fcm(token: token, tag: tag)
        case .webhook(let token):
            if let token, !PushGrammar.isValidWebhookToken(token) {
                throw ClientError.invalidPushTarget(reason: "a webhook token is 1 to 1 024 printable ASCII characters")
            }
            return .webhook(token: token, tag: tag)
        }
    }
}

extension PushRegistrationRequest {
    /// The same registration with `tag`: a stored body (kept without one) as it is sent.
    func tagged(_ tag: String) -> PushRegistrationRequest {
        switch provider {
        case .webpush: .webPush(endpoint: endpoint ?? "", p256dh: p256dh ?? "", auth: auth ?? "", tag: tag)
        case .apns: .apns(token: token ?? "", sandbox: sandbox, mode: mode, tag: tag)
        case .fcm: .fcm(token: token ?? "", tag: tag)
        case .webhook: .webhook(token: token, tag: tag)
        }
    }
}
