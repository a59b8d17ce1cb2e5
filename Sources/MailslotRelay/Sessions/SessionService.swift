import Foundation
import MailslotWire

/// Sign-in, refresh, sign-out and the check of every request's bearer session.
///
/// Session and refresh tokens are 32 random bytes, base64url, with a prefix that tells them
/// apart (`mss_`, `msr_`). The store keeps only their BLAKE2b-256 hashes, looked up directly:
/// the secrets are uniformly random, so a hash lookup reveals nothing an attacker could use.
struct SessionService: Sendable {
    let store: any RelayStore
    let verifier: TokenVerifier
    /// Lifetime of an access session, in milliseconds.
    let sessionLifetime: Int64
    /// Lifetime of a refresh token, in milliseconds.
    let refreshLifetime: Int64
    /// Live sign-ins per uid; a new one revokes the least recently refreshed beyond this.
    let maxFamilies: Int
    let metrics: RelayMetrics

    static let accessPrefix = "mss_"
    static let refreshPrefix = "msr_"

    /// Who a valid session signs in, and the family it belongs to (for sign-out).
    struct Principal: Sendable, Equatable {
        let uid: String
        let family: Data
        let expiresAt: Int64
    }

    /// Exchanges a custom token for a new session family.
    func signIn(token: String, now: Int64) async throws -> SessionGrant {
        let verified: VerifiedToken
        do {
            verified = try verifier.verify(token, now: Date(timeIntervalSince1970: Double(now) / 1000))
        } catch {
            metrics.signIn(outcome: error.code)
            throw Problem(.invalidToken, "the custom token was refused: \(error.code)")
        }
        let secrets = Secrets()
        do {
            try await store.insertSessionPair(uid: verified.uid, family: Data(randomBytes(16)), accessHash: secrets.accessHash,
                                              accessExpiresAt: now + sessionLifetime, refreshHash: secrets.refreshHash,
                                              refreshExpiresAt: now + refreshLifetime, maxFamilies: maxFamilies)
        } catch {
            metrics.signIn(outcome: "store_failed")
            throw error
        }
        metrics.signIn(outcome: "ok")
        return grant(uid: verified.uid, secrets, now: now)
    }

    /// Spends a refresh token for a new pair; a spent one revokes its family.
    func refresh(_ refresh: String, now: Int64) async throws -> SessionGrant {
        guard let hash = Self.hash(refresh, prefix: Self.refreshPrefix) else {
            metrics.refresh(outcome: "invalid")
            throw Problem(.refreshInvalid, "not a refresh token")
        }
        let secrets = Secrets()
        switch try await store.rotateRefresh(hash: hash, now: now, accessHash: secrets.accessHash,
                                             accessExpiresAt: now + sessionLifetime, refreshHash: secrets.refreshHash,
                                             refreshExpiresAt: now + refreshLifetime) {
        case .rotated(let uid):
            metrics.refresh(outcome: "ok")
            return grant(uid: uid, secrets, now: now)
        case .invalid:
            metrics.refresh(outcome: "invalid")
            throw Problem(.refreshInvalid, "the refresh token is unknown or expired; sign in again")
        case .reused:
            metrics.refresh(outcome: "reused")
            throw Problem(.refreshReused, "the refresh token was already used; every session of this sign-in is revoked")
        }
    }

    /// Checks an `Authorization` header value. Throws 401 problems for anything but a live session.
    func authenticate(authorization: String?, now: Int64) async throws -> Principal {
        guard let authorization else { throw Problem(.unauthenticated, "sign in and send Authorization: Bearer <session>") }
        let parts = authorization.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "bearer",
              let hash = Self.hash(String(parts[1]), prefix: Self.accessPrefix) else {
            throw Problem(.unauthenticated, "the Authorization header must be `Bearer <session>`")
        }
        guard let session = try await store.session(hash: hash), session.kind == .access else {
            throw Problem(.unauthenticated, "the session is unknown or was revoked; sign in again")
        }
        guard session.expiresAt > now else { throw Problem(.sessionExpired, "the session expired; refresh it") }
        return Principal(uid: session.uid, family: session.family, expiresAt: session.expiresAt)
    }

    /// Ends every session of the principal's sign-in.
    func signOut(_ principal: Principal) async throws {
        try await store.revokeFamily(principal.family)
    }

    /// A fresh access secret and refresh secret, with the hashes the store keeps.
    private struct Secrets {
        let access = SessionService.accessPrefix + Base64URL.encode(randomBytes(32))
        let refresh = SessionService.refreshPrefix + Base64URL.encode(randomBytes(32))
        var accessHash: Data { SessionService.hash(access, prefix: SessionService.accessPrefix)! }
        var refreshHash: Data { SessionService.hash(refresh, prefix: SessionService.refreshPrefix)! }
    }

    private func grant(uid: String, _ secrets: Secrets, now: Int64) -> SessionGrant {
        SessionGrant(uid: uid, session: secrets.access, refresh: secrets.refresh, expiresAt: EpochMilliseconds.format(now + sessionLifetime),
                     refreshExpiresAt: EpochMilliseconds.format(now + refreshLifetime))
    }

    /// BLAKE2b-256 of a well-formed secret with the expected prefix; nil for anything else.
    static func hash(_ secret: String, prefix: String) -> Data? {
        guard secret.hasPrefix(prefix), secret.utf8.count == prefix.utf8.count + 43,
              Base64URL.decode(secret.dropFirst(prefix.count))?.count == 32 else { return nil }
        return Data(blake2b(Array(secret.utf8), length: 32))
    }
}
