import _CryptoExtras
import Crypto
import Foundation
import MailslotCrypto

// Compact JWS (RFC 7515 §7.1) for the two fixed-shape tokens the push providers need: ES256
// (VAPID, APNs) and RS256 (the FCM service account's OAuth assertion). A JSON object of string
// and integer members is all either uses, so this is a few lines over swift-crypto rather than a
// JWT library. docs/design/wakeups.md §10.

/// A compact JWS: `base64url(header).base64url(claims).base64url(signature)`.
enum CompactJWS {
    /// A member of a JWS header or claim set.
    enum Value: Sendable, Equatable, Encodable {
        case string(String)
        case integer(Int64)

        func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            switch self {
            case .string(let text): try container.encode(text)
            case .integer(let number): try container.encode(number)
            }
        }
    }

    /// A header or claim set as JSON: compact, members sorted, `/` not escaped — so that the bytes
    /// signed are the same every time and the vectors can pin them.
    static func json(_ object: [String: Value]) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Strings and integers always encode.
        return Array(try! encoder.encode(object))
    }

    /// The signing input, `base64url(header).base64url(claims)`.
    static func signingInput(header: [String: Value], claims: [String: Value]) -> String {
        Base64URL.encode(json(header)) + "." + Base64URL.encode(json(claims))
    }

    /// An ES256 token: ECDSA P-256 over SHA-256, the signature as the 64-byte `r ‖ s` (RFC 7518 §3.4).
    static func es256(header: [String: Value], claims: [String: Value], key: P256.Signing.PrivateKey) -> String {
        let input = signingInput(header: header, claims: claims)
        // Signing with a valid key over bytes cannot fail.
        let signature = try! key.signature(for: Array(input.utf8))
        return input + "." + Base64URL.encode(signature.rawRepresentation)
    }

    /// An RS256 token: RSASSA-PKCS1-v1_5 over SHA-256 (RFC 7518 §3.3); deterministic.
    static func rs256(header: [String: Value], claims: [String: Value], key: _RSA.Signing.PrivateKey) throws -> String {
        let input = signingInput(header: header, claims: claims)
        let signature = try key.signature(for: Array(input.utf8), padding: .insecurePKCS1v1_5)
        return input + "." + Base64URL.encode(signature.rawRepresentation)
    }

    /// The three parts of a compact token, decoded; nil unless there are exactly three of strict base64url.
    static func parts(_ token: String) -> (header: [UInt8], claims: [UInt8], signature: [UInt8], signingInput: String)? {
        let pieces = token.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard pieces.count == 3,
              let header = Base64URL.decode(pieces[0]),
              let claims = Base64URL.decode(pieces[1]),
              let signature = Base64URL.decode(pieces[2])
        else { return nil }
        return (header, claims, signature, pieces[0] + "." + pieces[1])
    }

    /// Whether `token` carries a valid ES256 signature by `key` (tests, vectors).
    static func verifyES256(_ token: String, key: P256.Signing.PublicKey) -> Bool {
        guard let parts = parts(token),
              let signature = try? P256.Signing.ECDSASignature(rawRepresentation: parts.signature)
        else { return false }
        return key.isValidSignature(signature, for: Array(parts.signingInput.utf8))
    }

    /// Whether `token` carries a valid RS256 signature by `key` (tests, vectors).
    static func verifyRS256(_ token: String, key: _RSA.Signing.PublicKey) -> Bool {
        guard let parts = parts(token) else { return false }
        return key.isValidSignature(_RSA.Signing.RSASignature(rawRepresentation: parts.signature),
                                    for: Array(parts.signingInput.utf8), padding: .insecurePKCS1v1_5)
    }
}
