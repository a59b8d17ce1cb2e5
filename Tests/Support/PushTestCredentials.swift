import Foundation
import MailslotRelay

/// Provider settings for tests that register push targets: Web Push with a committed test-only
/// VAPID key, and the webhook at a loopback port where nothing listens — enough for the relay to
/// accept registrations; a test that sends wake-ups points the providers at stand-ins instead
/// (tools/push). The key is public in this repository: it signs nothing but tests.
public enum PushTestCredentials {
    /// A P-256 key in PKCS#8 PEM, as `openssl ecparam -genkey | openssl pkcs8 -topk8` writes it.
    public static let vapidKeyPEM = """
        -----BEGIN PRIVATE KEY-----
        MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgMTT8H2XokwrUAGSO
        IlCYL1laSFtdXQJeF64BU5qOYQehRANCAAQ3IU6AI9GC6te807U1KTPkjlM7Te7u
        pNUyA75bKKMOtOGtP1Wnes3SpS/F1xraPCkFRtPJ6Ho+pPG1+WCjYqOt
        -----END PRIVATE KEY-----

        """

    /// A Standard Webhooks secret (`whsec_` and base64 of 32 bytes), fixed for tests.
    public static let webhookSecret = "whsec_" + Data(repeating: 0x5A, count: 32).base64EncodedString() + "\n"

    /// Turns Web Push and the webhook on in `configuration`, their key files written (mode 0600)
    /// into the relay's data directory.
    public static func enableWebPushAndWebhook(_ configuration: inout RelayConfiguration) throws {
        let folder = configuration.dataDirectory
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let vapid = (folder as NSString).appendingPathComponent("vapid.pem")
        let secret = (folder as NSString).appendingPathComponent("webhook.secret")
        for (path, text) in [(vapid, vapidKeyPEM), (secret, webhookSecret)] {
            _ = FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600])
        }
        configuration.push.webPush.keyFile = vapid
        configuration.push.webPush.subject = "mailto:tests@mailslot.invalid"
        configuration.push.webhook.url = "http://127.0.0.1:1/wake"
        configuration.push.webhook.secretFile = secret
    }
}
