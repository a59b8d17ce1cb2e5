import Foundation
import Testing
@testable import MailslotCrypto

/// The custom-token issuer and verifier: one test per rejection class.
@Suite struct CustomTokenTests {
    let issuerKey = IdentityKeyPair(seed: SecretBytes(copying: [UInt8](repeating: 7, count: 32)))
    let audience = "relay.example"
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    var issuer: TokenIssuer { TokenIssuer(key: issuerKey, audience: audience) }
    var verifier: TokenVerifier { TokenVerifier(issuerKeys: [IdentityKeyPair().publicKey, issuerKey.publicKey], audience: audience) }

    /// Signs arbitrary claims and footer with the issuer key, as a hostile or buggy minter might.
    func raw(_ claims: String, footer: String? = nil, key: IdentityKeyPair? = nil) -> String {
        let key = key ?? issuerKey
        let footer = footer ?? #"{"kid":"\#(key.publicKey.paserkID)"}"#
        return PasetoV4Public.sign(Array(claims.utf8), with: key, footer: Array(footer.utf8))
    }

    func claims(sub: String = "alice", aud: String? = nil, iat: Int64 = 0, exp: Int64 = 300, extra: String = "") -> String {
        let t = Int64(now.timeIntervalSince1970)
        return #"{"sub":"\#(sub)","aud":"\#(aud ?? audience)","iat":"\#(Timestamp.format(t + iat))","exp":"\#(Timestamp.format(t + exp))"\#(extra)}"#
    }

    @Test func mintedTokenVerifies() throws {
        let token = try issuer.mint(uid: "alice", lifetime: 600, tokenID: "t-1", now: now)
        #expect(token.hasPrefix("v4.public."))
        let verified = try verifier.verify(token, now: now.addingTimeInterval(10))
        #expect(verified.uid == "alice")
        #expect(verified.tokenID == "t-1")
        #expect(verified.expiresAt - verified.issuedAt == 600)
        #expect(verified.keyID == issuerKey.publicKey.paserkID)
    }

    @Test func mintingIsDeterministicAndReadable() throws {
        let token = try issuer.mint(uid: "alice", lifetime: 60, now: now)
        #expect(try issuer.mint(uid: "alice", lifetime: 60, now: now) == token)
        let message = try PasetoV4Public.verify(token, with: issuerKey.publicKey)
        #expect(String(decoding: message, as: UTF8.self)
                == #"{"aud":"relay.example","exp":"2027-01-15T08:01:00+00:00","iat":"2027-01-15T08:00:00+00:00","sub":"alice"}"#)
        let footer = try PasetoToken(parsing: token).footer
        #expect(String(decoding: footer, as: UTF8.self) == #"{"kid":"\#(issuerKey.publicKey.paserkID)"}"#)
    }

    @Test func minterRefusesBadInput() {
        #expect(throws: TokenError.invalidSubject) { try issuer.mint(uid: "al ice", now: now) }
        #expect(throws: TokenError.invalidSubject) { try issuer.mint(uid: "", now: now) }
        #expect(throws: TokenError.lifetimeTooLong) { try issuer.mint(uid: "alice", lifetime: 3601, now: now) }
        #expect(throws: TokenError.invalidClaim("exp")) { try issuer.mint(uid: "alice", lifetime: 0, now: now) }
        #expect(throws: TokenError.wrongAudience) { try TokenIssuer(key: issuerKey, audience: "").mint(uid: "alice", now: now) }
    }

    @Test func oversized() {
        let token = raw(claims(extra: #","pad":"\#(String(repeating: "x", count: 4000))""#))
        #expect(throws: TokenError.oversized) { try verifier.verify(token, now: now) }
    }

    @Test(arguments: ["", "v4.public", "v4.public.", "v4.public.!!!", "v4.public.AAAA.", "a.b.c.d.e",
                      "v4.public.AAAA=", "v4.public.\u{0}"])
    func malformed(token: String) {
        #expect { try verifier.verify(token, now: now) } throws: { error in
            if case TokenError.malformed = error { return true }
            return false
        }
    }

    @Test func shortPayloadIsMalformedNotBadSignature() {
        // A structurally valid token whose payload can't even hold a signature.
        let token = "v4.public." + Base64URL.encode([UInt8](repeating: 1, count: 10)) + "."
            + Base64URL.encode(Array(#"{"kid":"\#(issuerKey.publicKey.paserkID)"}"#.utf8))
        #expect(throws: TokenError.malformed("the payload is shorter than a signature")) { try verifier.verify(token, now: now) }
    }

    @Test(arguments: ["v1", "v2", "v3", "v5", "V4"])
    func otherVersions(version: String) throws {
        let token = try issuer.mint(uid: "alice", now: now).replacingOccurrences(of: "v4.", with: "\(version).")
        #expect(throws: TokenError.unsupportedVersion(version)) { try verifier.verify(token, now: now) }
    }

    @Test func localPurposeIsRefused() {
        let footer = Array(#"{"kid":"\#(issuerKey.publicKey.paserkID)"}"#.utf8)
        let token = PasetoV4Local.encrypt(Array(claims().utf8), with: SymmetricKey(), footer: footer)
        #expect(throws: TokenError.wrongPurpose("local")) { try verifier.verify(token, now: now) }
    }

    @Test func footerProblems() {
        let noFooter = PasetoV4Public.sign(Array(claims().utf8), with: issuerKey)
        #expect(throws: TokenError.malformed("the footer with the key id is missing")) { try verifier.verify(noFooter, now: now) }
        #expect(throws: TokenError.malformed("the footer is not a JSON object with a string \"kid\"")) {
            try verifier.verify(raw(claims(), footer: "kid"), now: now)
        }
        #expect(throws: TokenError.malformed("the footer is not a JSON object with a string \"kid\"")) {
            try verifier.verify(raw(claims(), footer: #"{"kid":7}"#), now: now)
        }
        #expect(throws: TokenError.malformed("the footer is too long")) {
            try verifier.verify(raw(claims(), footer: #"{"kid":"\#(String(repeating: "k", count: 600))"}"#), now: now)
        }
    }

    @Test func unknownKey() throws {
        let stranger = IdentityKeyPair()
        let token = try TokenIssuer(key: stranger, audience: audience).mint(uid: "alice", now: now)
        #expect(throws: TokenError.unknownKey) { try verifier.verify(token, now: now) }
    }

    @Test func foreignKeyClaimingTrustedKid() {
        // Signed by a stranger, but naming the trusted issuer's kid: the signature must fail.
        let token = raw(claims(), footer: #"{"kid":"\#(issuerKey.publicKey.paserkID)"}"#, key: IdentityKeyPair())
        #expect(throws: TokenError.badSignature) { try verifier.verify(token, now: now) }
    }

    @Test func tamperedPayloadOrFooter() throws {
        let token = try issuer.mint(uid: "alice", now: now)
        let parts = token.split(separator: ".").map(String.init)
        var payload = Base64URL.decode(parts[2])!
        payload[8] ^= 0x01
        let tampered = "v4.public.\(Base64URL.encode(payload)).\(parts[3])"
        #expect(throws: TokenError.badSignature) { try verifier.verify(tampered, now: now) }
        // Same kid, different footer bytes (added whitespace): the footer is signed.
        let footer = Base64URL.encode(Array(#"{"kid": "\#(issuerKey.publicKey.paserkID)"}"#.utf8))
        #expect(throws: TokenError.badSignature) { try verifier.verify("v4.public.\(parts[2]).\(footer)", now: now) }
    }

    @Test func claimsNotJSON() {
        #expect(throws: TokenError.malformed("the claims are not a JSON object")) { try verifier.verify(raw("[1,2]"), now: now) }
        #expect(throws: TokenError.malformed("the claims are not a JSON object")) { try verifier.verify(raw("\u{FF}"), now: now) }
    }

    @Test(arguments: [#"{"aud":"relay.example"}"#, #"{"sub":"","aud":"relay.example"}"#, #"{"sub":"a/b","aud":"relay.example"}"#,
                      #"{"sub":7,"aud":"relay.example"}"#, #"{"sub":"..","aud":"relay.example"}"#])
    func invalidSubject(claims: String) {
        #expect(throws: TokenError.invalidSubject) { try verifier.verify(raw(claims), now: now) }
    }

    @Test func wrongAudience() {
        #expect(throws: TokenError.wrongAudience) { try verifier.verify(raw(claims(aud: "other.relay")), now: now) }
        #expect(throws: TokenError.wrongAudience) { try verifier.verify(raw(#"{"sub":"alice"}"#), now: now) }
    }

    /// Foundation's JSONSerialization, which the verifier once used, drops a raw U+FEFF at the
    /// start of a string: these were accepted as `alice`, the audience and the kid.
    @Test func aLeadingByteOrderMarkCharacterInAStringIsKept() throws {
        let bom = "\u{FEFF}"
        #expect(throws: TokenError.invalidSubject) { try verifier.verify(raw(claims(sub: bom + "alice")), now: now) }
        #expect(throws: TokenError.wrongAudience) { try verifier.verify(raw(claims(aud: bom + audience)), now: now) }
        #expect(throws: TokenError.unknownKey) {
            try verifier.verify(raw(claims(), footer: #"{"kid":"\#(bom)\#(issuerKey.publicKey.paserkID)"}"#), now: now)
        }
        // A member named U+FEFF + "sub" is another member, not a second `sub`.
        #expect(try verifier.verify(raw(claims(extra: #","\#(bom)sub":"bob""#)), now: now).uid == "alice")
        #expect(throws: TokenError.invalidSubject) {
            try verifier.verify(raw(#"{"\#(bom)sub":"alice","aud":"\#(audience)","iat":"2027-01-15T08:00:00Z","exp":"2027-01-15T08:05:00Z"}"#), now: now)
        }
    }

    /// Numbers are read as binary64 wherever they are: one too large or too small for it is refused.
    @Test func numbersBeyondBinary64AreRefused() throws {
        for number in ["1e400", "-1e400", "1e-400", "2e-324"] {
            #expect(throws: TokenError.self) { try verifier.verify(raw(claims(extra: #","n":\#(number)"#)), now: now) }
        }
        #expect(try verifier.verify(raw(claims(extra: #","n":[0e-400,5e-324,1.7976931348623157e308]"#)), now: now).uid == "alice")
    }

    @Test func audienceAndKeyIDAreComparedByteForByte() {
        // "K" (U+004B) and the Kelvin sign (U+212A) are canonically equivalent; bytes differ.
        let kelvin = TokenVerifier(issuerKeys: [issuerKey.publicKey], audience: "relay.\u{212A}x")
        #expect(throws: TokenError.wrongAudience) { try kelvin.verify(raw(claims(aud: "relay.Kx")), now: now) }
    }

    @Test func anEmptyConfiguredAudienceAcceptsNothing() {
        let unconfigured = TokenVerifier(issuerKeys: [issuerKey.publicKey], audience: "")
        #expect(throws: TokenError.wrongAudience) { try unconfigured.verify(raw(claims(aud: "")), now: now) }
    }

    @Test func invalidTimeClaims() {
        #expect(throws: TokenError.invalidClaim("iat")) {
            try verifier.verify(raw(#"{"sub":"alice","aud":"relay.example","exp":"2030-01-01T00:00:00Z"}"#), now: now)
        }
        #expect(throws: TokenError.invalidClaim("exp")) {
            try verifier.verify(raw(#"{"sub":"alice","aud":"relay.example","iat":"2027-01-15T08:00:00Z","exp":1800000300}"#), now: now)
        }
        #expect(throws: TokenError.invalidClaim("exp")) { try verifier.verify(raw(claims(iat: 0, exp: 0)), now: now) }
        #expect(throws: TokenError.invalidClaim("nbf")) { try verifier.verify(raw(claims(extra: #","nbf":"soon""#)), now: now) }
        #expect(throws: TokenError.invalidClaim("jti")) { try verifier.verify(raw(claims(extra: #","jti":42"#)), now: now) }
    }

    @Test func expired() {
        #expect(throws: TokenError.expired) { try verifier.verify(raw(claims(iat: -600, exp: -1)), now: now) }
        // Exactly at exp the token is no longer valid.
        #expect(throws: TokenError.expired) { try verifier.verify(raw(claims(iat: -300, exp: 0)), now: now) }
    }

    @Test func issuedInTheFuture() throws {
        #expect(throws: TokenError.issuedInFuture) { try verifier.verify(raw(claims(iat: 61, exp: 300)), now: now) }
        // Within the clock skew is accepted.
        #expect(try verifier.verify(raw(claims(iat: 60, exp: 300)), now: now).uid == "alice")
    }

    @Test func notYetValid() throws {
        let t = Int64(now.timeIntervalSince1970)
        #expect(throws: TokenError.notYetValid) {
            try verifier.verify(raw(claims(extra: #","nbf":"\#(Timestamp.format(t + 120))""#)), now: now)
        }
        #expect(try verifier.verify(raw(claims(extra: #","nbf":"\#(Timestamp.format(t))""#)), now: now).uid == "alice")
    }

    @Test func lifetimeOverAnHour() throws {
        #expect(throws: TokenError.lifetimeTooLong) { try verifier.verify(raw(claims(iat: 0, exp: 3601)), now: now) }
        #expect(try verifier.verify(raw(claims(iat: 0, exp: 3600)), now: now).uid == "alice")
    }

    @Test func keyRotation() throws {
        let next = IdentityKeyPair()
        let both = TokenVerifier(issuerKeys: [issuerKey.publicKey, next.publicKey], audience: audience)
        #expect(try both.verify(try issuer.mint(uid: "a", now: now), now: now).uid == "a")
        #expect(try both.verify(try TokenIssuer(key: next, audience: audience).mint(uid: "b", now: now), now: now).uid == "b")
        let onlyNext = TokenVerifier(issuerKeys: [next.publicKey], audience: audience)
        #expect(throws: TokenError.unknownKey) { try onlyNext.verify(try issuer.mint(uid: "a", now: now), now: now) }
    }

    @Test func everyErrorHasADistinctCode() {
        let errors: [TokenError] = [.oversized, .malformed(""), .unsupportedVersion(""), .wrongPurpose(""), .unknownKey,
                                    .badSignature, .invalidSubject, .wrongAudience, .invalidClaim(""), .expired,
                                    .issuedInFuture, .notYetValid, .lifetimeTooLong]
        #expect(Set(errors.map(\.code)).count == errors.count)
    }
}
