import Crypto
import Foundation
import MailslotCrypto
import Synchronization

// VAPID (RFC 8292): the relay identifies itself to Web Push services with an ES256 JWT for the
// endpoint's origin and its public key, `Authorization: vapid t=<JWT>,k=<key>`. Subscriptions are
// bound to that key when a browser or distributor subscribes. spec/push.md §5.1, docs/design/wakeups.md §4.1.

/// The relay's VAPID identity: its P-256 key and contact, and the tokens it signed, per origin.
final class VAPID: Sendable {
    /// How long a token is valid (RFC 8292 §2: at most 24 h).
    static let lifetime: Int64 = 12 * 3600
    /// A cached token is replaced this long before it expires.
    static let renewBefore: Int64 = 3600
    /// The most origins whose tokens are kept; the one expiring soonest goes first.
    static let maxCached = 256

    /// The private key (never logged).
    private let key: P256.Signing.PrivateKey
    /// `mailto:` or `https:` — the operator's contact (`sub`).
    let subject: String
    /// The public key as unpadded base64url of the 65-byte uncompressed point (87 characters):
    /// the `k=` parameter and the browsers' `applicationServerKey`.
    let publicKeyText: String
    /// Signed tokens by audience: the header value and its `exp` (seconds).
    private let cache = Mutex<[String: (header: String, expires: Int64)]>([:])

    /// An identity from a key and subject; the subject must be a `mailto:` or `https:` URI.
    init(key: P256.Signing.PrivateKey, subject: String) throws(PushKeyFileError) {
        guard subject.hasPrefix("mailto:") || subject.hasPrefix("https://"), subject.count > 7,
              !subject.contains(where: { $0.isWhitespace || $0 == "\"" })
        else { throw PushKeyFileError(description: "vapid-subject must be a mailto: or https: URI") }
        self.key = key
        self.subject = subject
        publicKeyText = Base64URL.encode(key.publicKey.x963Representation)
    }

    /// The key in a PEM file: PKCS#8 (`PRIVATE KEY`, what py_vapid and `keygen --vapid` write) or
    /// SEC1 (`EC PRIVATE KEY`), an `EC PARAMETERS` block before it skipped.
    static func key(pem text: String, setting: String = "vapid-key") throws(PushKeyFileError) -> P256.Signing.PrivateKey {
        let block = try PushKeyFiles.privateKeyBlock(text, setting: setting)
        do { return try P256.Signing.PrivateKey(pemRepresentation: block.text) } catch {
            throw PushKeyFileError(description: "\(setting): not a P-256 private key")
        }
    }

    /// The origin a token is for: `scheme://host[:port]` of the endpoint, the port only when not the scheme's default.
    static func audience(of endpoint: URL) -> String? {
        guard let components = URLComponents(url: endpoint, resolvingAgainstBaseURL: false),
              let scheme = components.scheme?.lowercased(), let host = components.host, !host.isEmpty
        else { return nil }
        let hostText = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host.lowercased()
        if let port = components.port, !(scheme == "https" && port == 443) && !(scheme == "http" && port == 80) {
            return "\(scheme)://\(hostText):\(port)"
        }
        return "\(scheme)://\(hostText)"
    }

    /// The JWT for `audience` at `now` (seconds), without caching: header `{"alg":"ES256","typ":"JWT"}`,
    /// claims `aud`, `exp` = now + 12 h, `sub`.
    func token(audience: String, now: Int64) -> String {
        CompactJWS.es256(header: ["alg": .string("ES256"), "typ": .string("JWT")],
                         claims: ["aud": .string(audience), "exp": .integer(now + Self.lifetime), "sub": .string(subject)],
                         key: key)
    }

    /// The `Authorization` value for `audience` at `now` (seconds): `vapid t=<JWT>,k=<key>`, no
    /// space after the comma (py_vapid's verifier splits on the last space). Reused until an hour
    /// before it expires.
    func authorization(audience: String, now: Int64) -> String {
        if let cached = cache.withLock({ $0[audience] }), cached.expires - Self.renewBefore > now {
            return cached.header
        }
        let header = "vapid t=\(token(audience: audience, now: now)),k=\(publicKeyText)"
        cache.withLock { entries in
            if entries[audience] == nil, entries.count >= Self.maxCached,
               let soonest = entries.min(by: { $0.value.expires < $1.value.expires })?.key {
                entries[soonest] = nil
            }
            entries[audience] = (header, now + Self.lifetime)
        }
        return header
    }

    /// How many audiences have a cached token (tests of the bound).
    var cachedCount: Int { cache.withLock { $0.count } }
}
