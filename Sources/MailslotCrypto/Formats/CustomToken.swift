import Foundation

// The custom-token format: the one place that says what a Mailslot sign-in token is.
// Specified byte for byte in spec/tokens.md; any PASETO v4 library can mint one.
//
//   v4.public.<base64url(claims || Ed25519 signature)>.<base64url({"kid":"k4.pid.…"})>
//   claims: {"sub": uid, "aud": relay id, "iat": RFC 3339, "exp": RFC 3339, "jti"?: string, "nbf"?: RFC 3339}
//   implicit assertion: empty

/// Why a custom token was refused. Every case has a stable ``code`` for error answers and logs.
public enum TokenError: Error, Equatable, Sendable {
    /// Longer than ``CustomToken/maxTokenBytes``; refused before any parsing.
    case oversized
    /// Not a well-formed PASETO token, or its footer or claims are not the expected JSON.
    case malformed(String)
    /// A PASETO version other than `v4`.
    case unsupportedVersion(String)
    /// A purpose other than `public` (`v4.local` tokens are never custom tokens).
    case wrongPurpose(String)
    /// The footer's `kid` names no trusted issuer key.
    case unknownKey
    /// The signature does not verify with the key the footer names.
    case badSignature
    /// `sub` is missing or is not a valid uid.
    case invalidSubject
    /// `aud` is missing or is not this relay's audience.
    case wrongAudience
    /// A time claim (`iat`, `exp`, `nbf`) or `jti` is missing where required or not of its type.
    case invalidClaim(String)
    /// `exp` has passed.
    case expired
    /// `iat` is later than now plus the allowed clock skew.
    case issuedInFuture
    /// `nbf` is later than now plus the allowed clock skew.
    case notYetValid
    /// `exp - iat` exceeds ``CustomToken/maxLifetime``.
    case lifetimeTooLong

    /// The stable, documented code of this failure (spec/tokens.md).
    public var code: String {
        switch self {
        case .oversized: "token_oversized"
        case .malformed: "token_malformed"
        case .unsupportedVersion: "token_unsupported_version"
        case .wrongPurpose: "token_wrong_purpose"
        case .unknownKey: "token_unknown_key"
        case .badSignature: "token_bad_signature"
        case .invalidSubject: "token_invalid_subject"
        case .wrongAudience: "token_wrong_audience"
        case .invalidClaim: "token_invalid_claim"
        case .expired: "token_expired"
        case .issuedInFuture: "token_issued_in_future"
        case .notYetValid: "token_not_yet_valid"
        case .lifetimeTooLong: "token_lifetime_too_long"
        }
    }
}

/// The limits of the custom-token format.
public enum CustomToken {
    /// The longest token accepted, in bytes. Real tokens are about 300.
    public static let maxTokenBytes = 4096
    /// The longest footer accepted, in bytes after decoding.
    public static let maxFooterBytes = 512
    /// The longest lifetime (`exp - iat`) a token may have, in seconds.
    public static let maxLifetime: Int64 = 3600
    /// How far in the future `iat` and `nbf` may lie, to absorb clock differences, in seconds.
    public static let clockSkew: Double = 60
    /// The longest `aud` or `jti`, in bytes.
    public static let maxClaimBytes = 256
    /// The deepest nesting accepted in the claims or the footer.
    public static let maxJSONDepth = 8
}

/// A token that passed every check: who it signs in, and for how long.
public struct VerifiedToken: Sendable, Equatable {
    /// The user the token signs in (`sub`).
    public let uid: String
    /// When the issuer minted it (`iat`), in seconds since the epoch.
    public let issuedAt: Double
    /// When it stops being accepted (`exp`), in seconds since the epoch.
    public let expiresAt: Double
    /// The issuer's token id (`jti`), if any.
    public let tokenID: String?
    /// The `k4.pid` of the issuer key that signed it.
    public let keyID: String
}

/// Mints custom tokens with an issuer's secret key: what an app's backend does.
public struct TokenIssuer: Sendable {
    private let key: IdentityKeyPair
    private let audience: String

    /// An issuer that signs with `key` for the relay whose id is `audience`.
    public init(key: IdentityKeyPair, audience: String) {
        self.key = key
        self.audience = audience
    }

    /// Mints a token that signs in `uid` for `lifetime` seconds (1...3600) from `now`.
    ///
    /// ```swift
    /// let issuer = TokenIssuer(key: try IdentityKeyPair(paserk: secretKeyText), audience: "mailslot")
    /// let token = try issuer.mint(uid: "alice", lifetime: 120)   // hand it to Alice's app
    /// ```
    ///
    /// - Parameters:
    ///   - uid: The user the token signs in (spec/protocol.md §2).
    ///   - lifetime: Seconds the token may be used for, at most ``CustomToken/maxLifetime``.
    ///   - tokenID: A `jti` claim, for a relay or backend that records tokens used.
    ///   - now: The issue time (`iat`).
    /// - Returns: The token, `v4.public.…` with the issuer key's id in its footer (spec/tokens.md).
    /// - Throws: ``TokenError/invalidSubject`` for an invalid uid, ``TokenError/lifetimeTooLong``,
    ///   ``TokenError/wrongAudience`` for an empty or over-long audience, ``TokenError/invalidClaim(_:)``.
    public func mint(uid: String, lifetime: Int64 = 300, tokenID: String? = nil,
                     now: Date = Date()) throws(TokenError) -> String {
        guard Identifier.isValidUID(uid) else { throw .invalidSubject }
        guard !audience.isEmpty, audience.utf8.count <= CustomToken.maxClaimBytes else { throw .wrongAudience }
        guard lifetime > 0 else { throw .invalidClaim("exp") }
        guard lifetime <= CustomToken.maxLifetime else { throw .lifetimeTooLong }
        if let tokenID, tokenID.isEmpty || tokenID.utf8.count > CustomToken.maxClaimBytes { throw .invalidClaim("jti") }
        let issuedAt = Int64(now.timeIntervalSince1970.rounded(.down))
        var claims = ["sub": uid, "aud": audience,
                      "iat": Timestamp.format(issuedAt), "exp": Timestamp.format(issuedAt + lifetime)]
        claims["jti"] = tokenID
        return PasetoV4Public.sign(Self.json(claims), with: key, footer: Self.json(["kid": key.publicKey.paserkID]))
    }

    /// Compact JSON with sorted keys, so the same inputs always give the same token.
    private static func json(_ object: [String: String]) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Array((try? encoder.encode(object)) ?? Data())
    }
}

/// Checks custom tokens against a set of trusted issuer public keys: what the relay does at sign-in.
public struct TokenVerifier: Sendable {
    private let keysByID: [String: IdentityPublicKey]
    private let audience: String

    /// A verifier that trusts `issuerKeys` (several, so keys can rotate) and accepts only tokens
    /// addressed to `audience`.
    public init(issuerKeys: [IdentityPublicKey], audience: String) {
        self.keysByID = Dictionary(issuerKeys.map { ($0.paserkID, $0) }, uniquingKeysWith: { first, _ in first })
        self.audience = audience
    }

    /// Verifies `token` at time `now`, or says precisely why it is refused. The order of the checks
    /// is part of the format (spec/tokens.md): nothing is read from the claims before the
    /// signature has verified.
    ///
    /// ```swift
    /// let verifier = TokenVerifier(issuerKeys: [backendKey], audience: "mailslot")
    /// let signedIn = try verifier.verify(token)   // signedIn.uid, signedIn.expiresAt
    /// ```
    ///
    /// - Parameters:
    ///   - token: The token as the client sent it.
    ///   - now: The time its `iat` and `exp` are checked against (with ``CustomToken/clockSkew``).
    /// - Returns: The verified claims.
    /// - Throws: The first ``TokenError`` in the order spec/tokens.md gives: the size, the format,
    ///   an unknown key id, the signature, then each claim.
    public func verify(_ token: String, now: Date = Date()) throws(TokenError) -> VerifiedToken {
        guard token.utf8.count <= CustomToken.maxTokenBytes else { throw .oversized }
        let parsed: PasetoToken
        do { parsed = try PasetoToken(parsing: token) } catch { throw .malformed(Self.describe(error)) }
        guard parsed.version == "v4" else { throw .unsupportedVersion(parsed.version) }
        guard parsed.purpose == "public" else { throw .wrongPurpose(parsed.purpose) }

        guard !parsed.footer.isEmpty else { throw .malformed("the footer with the key id is missing") }
        guard parsed.footer.count <= CustomToken.maxFooterBytes else { throw .malformed("the footer is too long") }
        guard let footer = Self.object(parsed.footer), case .string(let kid)? = footer["kid"] else {
            throw .malformed("the footer is not a JSON object with a string \"kid\"")
        }
        // Ids are ASCII; looking up anything else could match by Unicode equivalence.
        guard kid.utf8.allSatisfy({ $0 < 0x80 }), let key = keysByID[kid] else { throw .unknownKey }

        let message: [UInt8]
        do {
            message = try PasetoV4Public.verify(parsed, with: key)
        } catch .malformed(let reason) {
            throw .malformed(reason)
        } catch {
            throw .badSignature
        }

        guard let claims = Self.object(message) else { throw .malformed("the claims are not a JSON object") }
        guard case .string(let uid)? = claims["sub"], Identifier.isValidUID(uid) else { throw .invalidSubject }
        // An unconfigured (empty) audience accepts nothing, as the minter never writes one.
        guard case .string(let aud)? = claims["aud"], !audience.isEmpty, aud.utf8.elementsEqual(audience.utf8) else {
            throw .wrongAudience  // byte for byte, not by Unicode equivalence
        }
        let issuedAt = try Self.time(claims, "iat")
        let expiresAt = try Self.time(claims, "exp")
        let notBefore = claims["nbf"] == nil ? nil : try Self.time(claims, "nbf")
        var tokenID: String?
        if let jti = claims["jti"] {
            guard case .string(let jti) = jti, !jti.isEmpty, jti.utf8.count <= CustomToken.maxClaimBytes else {
                throw .invalidClaim("jti")
            }
            tokenID = jti
        }
        guard expiresAt > issuedAt else { throw .invalidClaim("exp") }

        let now = now.timeIntervalSince1970
        guard now < expiresAt else { throw .expired }
        guard issuedAt <= now + CustomToken.clockSkew else { throw .issuedInFuture }
        if let notBefore { guard notBefore <= now + CustomToken.clockSkew else { throw .notYetValid } }
        guard expiresAt - issuedAt <= Double(CustomToken.maxLifetime) else { throw .lifetimeTooLong }
        return VerifiedToken(uid: uid, issuedAt: issuedAt, expiresAt: expiresAt, tokenID: tokenID, keyID: kid)
    }

    private static func time(_ claims: [String: JSONValue], _ name: String) throws(TokenError) -> Double {
        guard case .string(let text)? = claims[name], let seconds = Timestamp.parse(text) else {
            throw .invalidClaim(name)
        }
        return seconds
    }

    /// A strict-JSON object (StrictJSON: no trailing commas, no duplicate members, depth ≤ 8).
    /// Read with `JSONDecoder`, as envelope bodies and key bundles are: Foundation's
    /// `JSONSerialization` drops a raw U+FEFF at the start of a string, member names included,
    /// so it read `"\u{FEFF}sub"` as `sub` and `"\u{FEFF}alice"` as `alice`.
    private static func object(_ bytes: [UInt8]) -> [String: JSONValue]? {
        guard (try? StrictJSON.validate(bytes, maxDepth: CustomToken.maxJSONDepth)) != nil else { return nil }
        return try? JSONDecoder().decode([String: JSONValue].self, from: Data(bytes))
    }

    private static func describe(_ error: PasetoError) -> String {
        if case .malformed(let reason) = error { return reason }
        return "not a PASETO token"
    }
}
