import Foundation
import MailslotWire

/// The operator's wake-up settings (docs/design/wakeups.md §6, spec/protocol.md §11): the limits
/// every relay applies, and each provider's settings as the operator wrote them — key files as
/// paths, never their contents (a secret in a flag or variable would show in `ps` and
/// `/proc/*/environ`). A provider is on exactly when its settings are complete; loading and
/// checking its key files is the provider's, at start.
public struct PushSettings: Sendable, Equatable {
    /// At most one wake-up per registration per this many seconds (5 … 3 600).
    public var wakeInterval = 30
    /// The most registrations one uid may hold (1 … 100).
    public var maxRegistrations = 10
    /// Outbound calls in flight on this relay (1 … 256).
    public var concurrency = 16
    /// Seconds one outbound call may take in all (2 … 60); connecting, at most 5 of them.
    public var timeout = 10
    /// Lifts the address and name checks on Web Push endpoints (tests, a private distributor):
    /// never the scheme, port or redirect rules.
    public var allowPrivateAddresses = false
    /// PEM certificates trusted in addition to the system's for provider connections.
    public var caFile: String?
    /// Web Push: the VAPID key and subject.
    public var webPush = WebPush()
    /// APNs: the token key and its identifiers.
    public var apns = APNs()
    /// FCM: the service account.
    public var fcm = FCM()
    /// The operator's webhook.
    public var webhook = Webhook()

    /// The defaults: every provider off.
    public init() {}

    /// Web Push settings: both or neither.
    public struct WebPush: Sendable, Equatable {
        /// The VAPID P-256 private key, a PEM file (PKCS#8 or SEC1) no one but its owner may read.
        public var keyFile: String?
        /// The contact the VAPID tokens name: a `mailto:` or `https:` URI.
        public var subject: String?
        /// Nothing set.
        public init() {}
    }

    /// APNs settings: the key file and its three names, all or none.
    public struct APNs: Sendable, Equatable {
        /// The team's `.p8` token signing key.
        public var keyFile: String?
        /// The key's 10-character id (`kid`).
        public var keyID: String?
        /// The 10-character team id (`iss`).
        public var teamID: String?
        /// The app's bundle id (`apns-topic`).
        public var topic: String?
        /// Apple's production endpoint, or a test server.
        public var url = "https://api.push.apple.com"
        /// Apple's development endpoint, or a test server.
        public var sandboxURL = "https://api.sandbox.push.apple.com"
        /// Nothing set.
        public init() {}
    }

    /// FCM settings.
    public struct FCM: Sendable, Equatable {
        /// The service account JSON Google gives.
        public var serviceAccountFile: String?
        /// The FCM endpoint, or a test server.
        public var url = "https://fcm.googleapis.com"
        /// The OAuth token endpoint; nil: the service account's `token_uri`.
        public var tokenURL: String?
        /// Nothing set.
        public init() {}
    }

    /// Webhook settings: both or neither.
    public struct Webhook: Sendable, Equatable {
        /// Where wake-ups are POSTed.
        public var url: String?
        /// One `whsec_…` secret per line; each signs.
        public var secretFile: String?
        /// Nothing set.
        public init() {}
    }

    /// Bounds of the numeric settings.
    public static let wakeIntervalRange = 5...3600
    public static let maxRegistrationsRange = 1...PushRegistrationList.maximumCount
    public static let concurrencyRange = 1...256
    public static let timeoutRange = 2...60

    /// The providers whose settings are complete, in name order.
    public var enabledProviders: [PushProviderKind] {
        var enabled: [PushProviderKind] = []
        if apns.keyFile != nil, apns.keyID != nil, apns.teamID != nil, apns.topic != nil { enabled.append(.apns) }
        if fcm.serviceAccountFile != nil { enabled.append(.fcm) }
        if webhook.url != nil, webhook.secretFile != nil { enabled.append(.webhook) }
        if webPush.keyFile != nil, webPush.subject != nil { enabled.append(.webpush) }
        return enabled
    }

    /// Whether wake-ups go through `provider`.
    public func isEnabled(_ provider: PushProviderKind) -> Bool { enabledProviders.contains(provider) }

    /// The connect timeout: at most 5 s, and never more than the whole call's.
    public var connectTimeout: Int { min(5, timeout) }

    /// Every setting that is out of range or half given, and every key file that is not there,
    /// as a sentence for the operator naming the flag and its variable. (Whether a file holds a
    /// usable key is checked when its provider starts.)
    public var problems: [String] {
        var problems: [String] = []
        func require(_ condition: Bool, _ problem: @autoclosure () -> String) { if !condition { problems.append(problem()) } }
        func named(_ flag: String) -> String { "--\(flag) (MAILSLOT_\(flag.uppercased().replacingOccurrences(of: "-", with: "_")))" }
        require(Self.wakeIntervalRange.contains(wakeInterval), "\(named("push-wake-interval")) must be from 5 to 3600 s, not \(wakeInterval).")
        require(Self.maxRegistrationsRange.contains(maxRegistrations),
                "\(named("max-push-registrations")) must be from 1 to \(PushRegistrationList.maximumCount), not \(maxRegistrations).")
        require(Self.concurrencyRange.contains(concurrency), "\(named("push-concurrency")) must be from 1 to 256, not \(concurrency).")
        require(Self.timeoutRange.contains(timeout), "\(named("push-timeout")) must be from 2 to 60 s, not \(timeout).")
        require((webPush.keyFile == nil) == (webPush.subject == nil),
                "Web Push needs both \(named("vapid-key")) and \(named("vapid-subject")), or neither.")
        if let subject = webPush.subject {
            require(Self.isVAPIDSubject(subject), "\(named("vapid-subject")) must be a mailto: or https: URI, not '\(subject)'.")
        }
        let apnsSettings = [("apns-key", apns.keyFile), ("apns-key-id", apns.keyID), ("apns-team-id", apns.teamID), ("apns-topic", apns.topic)]
        let apnsSet = apnsSettings.filter { $0.1 != nil }.count
        require(apnsSet == 0 || apnsSet == 4, "APNs needs all of \(apnsSettings.map { named($0.0) }.joined(separator: ", ")), or none.")
        for (flag, id) in [("apns-key-id", apns.keyID), ("apns-team-id", apns.teamID)] {
            if let id {
                require(id.utf8.count == 10 && id.utf8.allSatisfy { (48...57).contains($0) || (65...90).contains($0) },
                        "\(named(flag)) must be Apple's 10 characters (A-Z, 0-9), not '\(id)'.")
            }
        }
        require((webhook.url == nil) == (webhook.secretFile == nil),
                "the webhook needs both \(named("webhook-url")) and \(named("webhook-secret-file")), or neither.")
        var urls = [("apns-url", apns.url), ("apns-sandbox-url", apns.sandboxURL), ("fcm-url", fcm.url)]
        if let token = fcm.tokenURL { urls.append(("fcm-token-url", token)) }
        if let url = webhook.url { urls.append(("webhook-url", url)) }
        for (flag, url) in urls {
            if let problem = Self.providerURLProblem(url) { problems.append("\(named(flag)) \(problem).") }
        }
        for (flag, path) in [("push-ca-file", caFile), ("vapid-key", webPush.keyFile), ("apns-key", apns.keyFile),
                             ("fcm-service-account", fcm.serviceAccountFile), ("webhook-secret-file", webhook.secretFile)] {
            guard let path else { continue }
            var isDirectory: ObjCBool = false
            require(FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) && !isDirectory.boolValue,
                    "\(named(flag)) names no file: '\(path)'.")
        }
        return problems
    }

    /// Whether `text` is a VAPID contact (RFC 8292 §2.1): a `mailto:` or `https:` URI.
    static func isVAPIDSubject(_ text: String) -> Bool {
        let lower = text.lowercased()
        let rest: Substring
        if lower.hasPrefix("mailto:") { rest = text.dropFirst(7) } else if lower.hasPrefix("https://") { rest = text.dropFirst(8) } else {
            return false
        }
        return !rest.isEmpty && text.utf8.count <= 256 && text.utf8.allSatisfy { (0x21...0x7E).contains($0) }
    }

    /// Why an operator's provider URL cannot be used, or nil: it must be an absolute `https` URL,
    /// or `http` to a loopback host (a test server on this machine); no userinfo, query or fragment.
    static func providerURLProblem(_ text: String) -> String? {
        guard let url = URLComponents(string: text), let scheme = url.scheme?.lowercased(), let host = url.host, !host.isEmpty else {
            return "must be an absolute URL, not '\(text)'"
        }
        guard url.user == nil, url.password == nil, url.query == nil, url.fragment == nil else {
            return "must not carry userinfo, a query or a fragment"
        }
        switch scheme {
        case "https": return nil
        case "http": return AddressPolicy.isLoopbackName(host) ? nil : "may use http:// only to a loopback host; use https://"
        default: return "must be an https:// URL"
        }
    }
}
