import Crypto
import Foundation
import Synchronization

// The APNs provider token: an ES256 JWT from the team's .p8 key, one per relay, shared by every
// call. Apple refuses a token refreshed more often than every 20 minutes and one older than an
// hour, so it is renewed at 40 minutes. spec/push.md §5.2, docs/design/wakeups.md §4.2.

/// The relay's APNs provider token.
final class APNsToken: Sendable {
    /// A token is renewed when this old (s).
    static let renewAfter: Int64 = 40 * 60
    /// A token younger than this is never renewed: Apple counts it as too many updates (s).
    static let minimumAge: Int64 = 20 * 60

    private let key: P256.Signing.PrivateKey
    /// `kid`: the key's 10-character id.
    let keyID: String
    /// `iss`: the 10-character team id.
    let teamID: String
    private let state = Mutex<(token: String, issuedAt: Int64)?>(nil)

    init(key: P256.Signing.PrivateKey, keyID: String, teamID: String) {
        self.key = key
        self.keyID = keyID
        self.teamID = teamID
    }

    /// The key in a `.p8` file (PKCS#8 PEM).
    static func key(pem text: String) throws(PushKeyFileError) -> P256.Signing.PrivateKey {
        let block = try PushKeyFiles.privateKeyBlock(text, setting: "apns-key")
        do { return try P256.Signing.PrivateKey(pemRepresentation: block.text) } catch {
            throw PushKeyFileError(description: "apns-key: not a P-256 private key (.p8)")
        }
    }

    /// The token to send at `now` (s): the current one, or a new one when it is 40 minutes old.
    /// Signing happens under the lock: one new token, however many calls ask at once.
    func current(now: Int64) -> (token: String, issuedAt: Int64) {
        state.withLock { state in
            if let state, now - state.issuedAt < Self.renewAfter, now >= state.issuedAt { return state }
            let fresh = (sign(now: now), now)
            state = fresh
            return fresh
        }
    }

    /// After `403 ExpiredProviderToken` for the token issued at `issuedAt`: a new one if that one is
    /// at least 20 minutes old (else nil: the clock is wrong, a configuration error).
    func renew(expired issuedAt: Int64, now: Int64) -> String? {
        state.withLock { state in
            if let state, state.issuedAt != issuedAt { return state.token }  // another call renewed it
            guard now - issuedAt >= Self.minimumAge else { return nil }
            let fresh = (sign(now: now), now)
            state = fresh
            return fresh.0
        }
    }

    /// Header `{"alg":"ES256","kid":…}`, claims `{"iat":…,"iss":…}`.
    func sign(now: Int64) -> String {
        CompactJWS.es256(header: ["alg": .string("ES256"), "kid": .string(keyID)],
                         claims: ["iat": .integer(now), "iss": .string(teamID)], key: key)
    }
}
