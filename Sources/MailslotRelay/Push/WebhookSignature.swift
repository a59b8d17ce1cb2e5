import Foundation
import MailslotCrypto

// Standard Webhooks 1.0 signatures: `webhook-signature: v1,<base64(HMAC-SHA-256(key, id.ts.body))>`,
// one space-separated entry per secret so that an operator can rotate. HMAC through libsodium
// (MailslotCrypto's `hmacSHA256`). spec/push.md §5.4, docs/design/wakeups.md §4.4.

/// Signs the webhook's wake-ups.
struct WebhookSignature: Sendable {
    /// One signing secret: the bytes of a `whsec_<base64>` line.
    struct Secret: Sendable, Equatable {
        /// The HMAC key.
        let key: [UInt8]

        /// Secrets hold 24 to 64 random bytes.
        static let byteRange = 24...64

        /// Reads `whsec_<standard base64>`; refuses another prefix, bad base64 or a length outside ``byteRange``.
        init(text: String) throws(PushKeyFileError) {
            guard text.hasPrefix("whsec_"), let key = Data(base64Encoded: String(text.dropFirst(6))),
                  Self.byteRange.contains(key.count)
            else { throw PushKeyFileError(description: "webhook-secret-file: each line must be whsec_ and the base64 of 24 to 64 bytes") }
            self.key = Array(key)
        }

        /// A secret from its bytes (tests, keygen).
        init(key: [UInt8]) { self.key = key }

        /// The file form, `whsec_<base64>`.
        var text: String { "whsec_" + Data(key).base64EncodedString() }
    }

    /// The secrets every wake-up is signed with, in file order (at least one).
    let secrets: [Secret]

    /// Signs with `secrets`, which must not be empty.
    init(secrets: [Secret]) {
        precondition(!secrets.isEmpty, "a webhook needs a secret")
        self.secrets = secrets
    }

    /// The secrets of a secret file: one `whsec_…` per line; blank lines and `#` comments skipped.
    static func secrets(file text: String) throws(PushKeyFileError) -> [Secret] {
        var secrets: [Secret] = []
        for line in text.split(whereSeparator: \.isNewline) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            secrets.append(try Secret(text: trimmed))
        }
        guard !secrets.isEmpty else { throw PushKeyFileError(description: "webhook-secret-file: no secret in the file") }
        guard secrets.count <= 8 else { throw PushKeyFileError(description: "webhook-secret-file: at most 8 secrets") }
        return secrets
    }

    /// The `webhook-signature` value for one delivery: `v1,<base64>` per secret, space-separated.
    func header(id: String, timestamp: Int64, body: [UInt8]) -> String {
        let content = Array("\(id).\(timestamp).".utf8) + body
        return secrets.map { "v1," + Data(hmacSHA256(key: $0.key, content)).base64EncodedString() }
            .joined(separator: " ")
    }
}
