import Crypto
import Foundation
import MailslotWire

/// Where a registration's wake-ups go, checked (spec/push.md §2.1): a Web Push subscription, an
/// APNs or FCM device token, or the operator's webhook with the token its backend needs. The
/// store keeps it as ``canonicalJSON`` beside the provider; the providers read it back with
/// ``init(provider:storedJSON:)``.
enum PushTarget: Sendable, Equatable {
    /// A Web Push subscription: its endpoint, the user agent's P-256 public key (65 bytes,
    /// uncompressed, on the curve) and the 16-byte authentication secret.
    case webPush(endpoint: AddressPolicy.Endpoint, p256dh: [UInt8], auth: [UInt8])
    /// An APNs device token (lowercase hex), its environment, and how the wake-up is delivered.
    case apns(token: String, sandbox: Bool, mode: APNsPushMode)
    /// An FCM registration token.
    case fcm(token: String)
    /// The operator's webhook, with the token its backend uses to find the device, if any.
    case webhook(token: String?)

    /// A member of a registration body the relay refuses, and why: `400 invalid_push_registration`.
    struct InvalidMember: Error, Equatable, Sendable {
        let member: String
        let reason: String
    }

    /// Checks a registration body's values (its shape was checked in decoding): every member
    /// first (`endpoint`'s grammar, `p256dh`, `auth`, `token`, `tag`), then the endpoint's
    /// address rules (spec/protocol.md §9: members, then endpoint checks).
    /// - Throws: ``InvalidMember``, or ``AddressPolicy/Refusal/refused(_:)`` for an endpoint the
    ///   relay will not call (`push_endpoint_refused`).
    static func validated(_ request: PushRegistrationRequest, policy: AddressPolicy) throws -> (target: PushTarget, tag: String) {
        func checkTag() throws {
            guard PushGrammar.isValidTag(request.tag ?? "") else {
                throw InvalidMember(member: "tag", reason: "not 0 to 48 characters of A-Z a-z 0-9 _ -")
            }
        }
        let target: PushTarget
        var refusal: AddressPolicy.Refusal?
        switch request.provider {
        case .webpush:
            var endpoint: AddressPolicy.Endpoint?
            do { endpoint = try policy.endpoint(request.endpoint ?? "") } catch {
                switch error {
                case .invalid(let reason): throw InvalidMember(member: "endpoint", reason: reason)
                case .refused: refusal = error  // told after the other members are checked
                }
            }
            guard let key = Base64URL.decode(request.p256dh ?? ""), key.count == 65, key.first == 4,
                  (try? P256.KeyAgreement.PublicKey(x963Representation: key)) != nil else {
                throw InvalidMember(member: "p256dh", reason: "not unpadded base64url of an uncompressed P-256 point on the curve (65 bytes)")
            }
            guard let auth = Base64URL.decode(request.auth ?? ""), auth.count == 16 else {
                throw InvalidMember(member: "auth", reason: "not unpadded base64url of 16 bytes")
            }
            guard let endpoint else {
                try checkTag()
                throw refusal ?? AddressPolicy.Refusal.refused("a Web Push endpoint the relay will not call")
            }
            target = .webPush(endpoint: endpoint, p256dh: key, auth: auth)
        case .apns:
            let token = request.token ?? ""
            guard PushGrammar.isValidAPNsToken(token) else {
                throw InvalidMember(member: "token", reason: "not 64 to 200 lowercase hexadecimal digits")
            }
            target = .apns(token: token, sandbox: request.sandbox ?? false, mode: request.mode ?? .alert)
        case .fcm:
            let token = request.token ?? ""
            guard PushGrammar.isValidFCMToken(token) else {
                throw InvalidMember(member: "token", reason: "not 1 to 1024 characters of A-Z a-z 0-9 _ : . -")
            }
            target = .fcm(token: token)
        case .webhook:
            if let token = request.token, !PushGrammar.isValidWebhookToken(token) {
                throw InvalidMember(member: "token", reason: "not 1 to 1024 printable ASCII characters")
            }
            target = .webhook(token: request.token)
        }
        try checkTag()
        return (target, request.tag ?? "")
    }

    /// The provider the target belongs to.
    var provider: PushProviderKind {
        switch self {
        case .webPush: .webpush
        case .apns: .apns
        case .fcm: .fcm
        case .webhook: .webhook
        }
    }

    /// What pauses and concurrency count by: a Web Push endpoint's `host[:port]`; `apns`,
    /// `apns-sandbox`, `fcm`, `webhook` for the operator's providers (one destination each).
    var route: String {
        switch self {
        case .webPush(let endpoint, _, _): endpoint.route
        case .apns(_, let sandbox, _): sandbox ? "apns-sandbox" : "apns"
        case .fcm: "fcm"
        case .webhook: "webhook"
        }
    }

    /// The members as stored: JSON with sorted keys, keys in unpadded base64url, nothing else
    /// (the tag is a column of its own).
    var canonicalJSON: String {
        let stored: Stored
        switch self {
        case .webPush(let endpoint, let p256dh, let auth):
            stored = Stored(endpoint: endpoint.url, p256dh: Base64URL.encode(p256dh), auth: Base64URL.encode(auth))
        case .apns(let token, let sandbox, let mode): stored = Stored(token: token, sandbox: sandbox, mode: mode)
        case .fcm(let token): stored = Stored(token: token)
        case .webhook(let token): stored = Stored(token: token)
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: (try? encoder.encode(stored)) ?? Data("{}".utf8), as: UTF8.self)
    }

    /// A stored target read back. The endpoint is parsed again without the address checks: those
    /// run at every call, on the addresses the name resolves to then.
    /// - Throws: ``InvalidMember`` when the stored text is not a target of `provider` (a store
    ///   written by something else).
    init(provider: PushProviderKind, storedJSON: String) throws {
        guard let stored = try? JSONDecoder().decode(Stored.self, from: Data(storedJSON.utf8)) else {
            throw InvalidMember(member: "target", reason: "not a stored \(provider.rawValue) target")
        }
        let request: PushRegistrationRequest = switch provider {
        case .webpush: .webPush(endpoint: stored.endpoint ?? "", p256dh: stored.p256dh ?? "", auth: stored.auth ?? "")
        case .apns: .apns(token: stored.token ?? "", sandbox: stored.sandbox, mode: stored.mode)
        case .fcm: .fcm(token: stored.token ?? "")
        case .webhook: .webhook(token: stored.token)
        }
        do { self = try Self.validated(request, policy: AddressPolicy(allowPrivateAddresses: true)).target } catch let error as InvalidMember {
            throw error
        } catch {
            throw InvalidMember(member: "endpoint", reason: "not a stored Web Push endpoint")
        }
    }

    /// The registration as its owner sees it: the endpoint or token, never the Web Push keys.
    func registration(id: String, tag: String, createdAt: Int64, updatedAt: Int64, wokenAt: Int64) -> PushRegistration {
        let times = (Timestamp.format(milliseconds: createdAt), Timestamp.format(milliseconds: updatedAt),
                     wokenAt > 0 ? Timestamp.format(milliseconds: wokenAt) : nil)
        switch self {
        case .webPush(let endpoint, _, _):
            return PushRegistration(id: id, provider: .webpush, tag: tag, createdAt: times.0, updatedAt: times.1, wokenAt: times.2,
                                    endpoint: endpoint.url)
        case .apns(let token, let sandbox, let mode):
            return PushRegistration(id: id, provider: .apns, tag: tag, createdAt: times.0, updatedAt: times.1, wokenAt: times.2,
                                    token: token, sandbox: sandbox, mode: mode)
        case .fcm(let token):
            return PushRegistration(id: id, provider: .fcm, tag: tag, createdAt: times.0, updatedAt: times.1, wokenAt: times.2, token: token)
        case .webhook(let token):
            return PushRegistration(id: id, provider: .webhook, tag: tag, createdAt: times.0, updatedAt: times.1, wokenAt: times.2, token: token)
        }
    }

    /// The stored form's members.
    private struct Stored: Codable {
        var endpoint: String?
        var p256dh: String?
        var auth: String?
        var token: String?
        var sandbox: Bool?
        var mode: APNsPushMode?
    }
}
