import Crypto
import Foundation
import MailslotCrypto

/// New push secrets for `mailslot-relay keygen --vapid FILE` and `--webhook-secret FILE`
/// (docs/design/wakeups.md §6): the relay reads back exactly what these write.
public enum PushKeygen {
    /// A new VAPID key: the P-256 private key as PKCS#8 PEM (`BEGIN PRIVATE KEY`, as py_vapid
    /// writes it), and the public key as unpadded base64url of the 65-byte point — the
    /// `applicationServerKey` browsers and UnifiedPush distributors subscribe with.
    public static func vapidKey() -> (pem: String, publicKey: String) {
        let key = P256.Signing.PrivateKey()
        return (key.pemRepresentation + "\n", Base64URL.encode(key.publicKey.x963Representation))
    }

    /// A new webhook secret line: `whsec_` and the standard base64 of 32 random bytes (Standard
    /// Webhooks 1.0), what the operator's backend verifies signatures with.
    public static func webhookSecret() -> String {
        "whsec_" + Data(randomBytes(32)).base64EncodedString() + "\n"
    }
}
