import Crypto
import Foundation
import Logging
import MailslotWire

// The providers the operator configured, made at start: every key file read and checked before
// the relay listens (a relay that cannot send what it accepts registrations for must not start),
// nothing of their contents logged. docs/design/wakeups.md §6.

/// The enabled providers and the HTTP client they share.
struct PushProviders: Sendable {
    let http: OutboundHTTP
    let providers: [PushProviderKind: any PushProvider]

    /// Reads and checks the key files `settings` name and makes one provider per enabled one;
    /// nil when no provider is enabled.
    /// - Throws: ``PushKeyFileError`` naming the setting (never the file's contents).
    static func make(settings: PushSettings, clock: RelayClock, logger: Logger) throws -> PushProviders? {
        let enabled = settings.enabledProviders
        guard !enabled.isEmpty else { return nil }
        let http: OutboundHTTP
        do {
            http = try OutboundHTTP(connectTimeout: .seconds(settings.connectTimeout), callTimeout: .seconds(settings.timeout),
                                    caFile: settings.caFile, policy: AddressPolicy(allowPrivateAddresses: settings.allowPrivateAddresses),
                                    logger: logger)
        } catch {
            throw PushKeyFileError(description: "push-ca-file: cannot read PEM certificates from \(settings.caFile ?? "")")
        }
        var providers: [PushProviderKind: any PushProvider] = [:]
        if enabled.contains(.webpush), let path = settings.webPush.keyFile, let subject = settings.webPush.subject {
            let key = try VAPID.key(pem: try PushKeyFiles.read(path, setting: "vapid-key"))
            providers[.webpush] = WebPushProvider(http: http, vapid: try VAPID(key: key, subject: subject), clock: clock)
        }
        if enabled.contains(.apns), let path = settings.apns.keyFile, let keyID = settings.apns.keyID,
           let teamID = settings.apns.teamID, let topic = settings.apns.topic {
            let key = try APNsToken.key(pem: try PushKeyFiles.read(path, setting: "apns-key"))
            providers[.apns] = APNsProvider(http: http, token: APNsToken(key: key, keyID: keyID, teamID: teamID), topic: topic,
                                            url: Self.trimmed(settings.apns.url), sandboxURL: Self.trimmed(settings.apns.sandboxURL), clock: clock)
        }
        if enabled.contains(.fcm), let path = settings.fcm.serviceAccountFile {
            let account = try GoogleServiceAccount(json: try PushKeyFiles.read(path, setting: "fcm-service-account"))
            if settings.fcm.tokenURL == nil, let problem = PushSettings.providerURLProblem(account.tokenURI) {
                throw PushKeyFileError(description: "fcm-service-account: token_uri \(problem)")
            }
            providers[.fcm] = FCMProvider(http: http, account: account,
                                          accessToken: GoogleAccessToken(account: account, tokenURL: settings.fcm.tokenURL, http: http, clock: clock),
                                          url: Self.trimmed(settings.fcm.url))
        }
        if enabled.contains(.webhook), let url = settings.webhook.url, let path = settings.webhook.secretFile {
            let secrets = try WebhookSignature.secrets(file: try PushKeyFiles.read(path, setting: "webhook-secret-file"))
            providers[.webhook] = WebhookProvider(http: http, url: url, signature: WebhookSignature(secrets: secrets), clock: clock)
        }
        if settings.allowPrivateAddresses {
            logger.warning("--push-allow-private-addresses is on: Web Push endpoints may reach loopback and private addresses")
        }
        logger.info("wake-ups through \(enabled.map(\.rawValue).joined(separator: ", "))")
        return PushProviders(http: http, providers: providers)
    }

    /// A base URL without its trailing slash, so that paths join with one.
    private static func trimmed(_ url: String) -> String {
        url.hasSuffix("/") ? String(url.dropLast()) : url
    }
}
