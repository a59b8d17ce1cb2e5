// Fuzz target `token-verify`: custom tokens (Sources/MailslotCrypto/Formats/CustomToken.swift,
// TokenVerifier) and PASETO v4 (Sources/MailslotCrypto/Paseto/), with the issuer key and audience
// of spec/vectors/tokens.json. The first byte picks what the rest of the input is:
//
//   0  a token string, verified as the relay does at sign-in; also split by PasetoToken, which
//      must be canonical (the parts re-encode to the same string).
//   1  a token string, decrypted as `v4.local` with the official vectors' key.
//   2  the claims: the harness signs them with the issuer key and the right `kid` footer, so the
//      claim checks (JSON, uid, audience, RFC 3339 times, lifetime) see the fuzzer's bytes.
//   3  claims and footer, split at the first 0xFF byte, both signed: the footer's JSON and `kid`
//      lookup with a token whose signature is valid.
//   4  a message (and footer after the first 0xFF) encrypted as `v4.local` and decrypted again.

import Foundation
import MailslotWire

@_cdecl("LLVMFuzzerTestOneInput")
public func tokenVerifyOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = bytes(data, size)
    guard let mode = input.first else { return 0 }
    let rest = Array(input.dropFirst())
    switch mode % 5 {
    case 0:
        let token = String(decoding: rest, as: UTF8.self)
        checkSplit(token)
        verifyAndCheck(token)
    case 1:
        _ = try? PasetoV4Local.decrypt(String(decoding: rest, as: UTF8.self), with: Fixed.localKey)
    case 2:
        verifySigned(claims: rest, footer: Array(#"{"kid":"\#(Fixed.issuer.publicKey.paserkID)"}"#.utf8))
    case 3:
        let (claims, footer) = split(rest)
        verifySigned(claims: claims, footer: footer)
    default:
        let (message, footer) = split(rest)
        let token = PasetoV4Local.encrypt(message, with: Fixed.localKey, footer: footer)
        let decrypted = Result { () throws(PasetoError) in try PasetoV4Local.decrypt(token, with: Fixed.localKey, footer: footer) }
        expect(decrypted == .success(message), "a v4.local token did not decrypt to its message")
    }
    return 0
}

/// The bytes before and after the first 0xFF (no 0xFF: all of it, and nothing).
private func split(_ bytes: [UInt8]) -> ([UInt8], [UInt8]) {
    guard let separator = bytes.firstIndex(of: 0xFF) else { return (bytes, []) }
    return (Array(bytes[..<separator]), Array(bytes[(separator + 1)...]))
}

/// A token that splits must be the canonical writing of its parts: no second spelling of the same
/// payload or footer gets past the parser.
private func checkSplit(_ token: String) {
    guard let parsed = try? PasetoToken(parsing: token) else { return }
    var again = parsed.header + Base64URL.encode(parsed.payload)
    if !parsed.footer.isEmpty { again += "." + Base64URL.encode(parsed.footer) }
    expect(again == token, "PasetoToken accepted a non-canonical token")
}

/// Verifies `token` and checks what an accepted token promises.
@discardableResult
private func verifyAndCheck(_ token: String) -> Result<VerifiedToken, TokenError> {
    let result = Result { () throws(TokenError) in try Fixed.verifier.verify(token, now: Fixed.now) }
    if case .success(let verified) = result {
        let now = Fixed.now.timeIntervalSince1970
        expect(Identifier.isValidUID(verified.uid), "a token for an invalid uid was accepted")
        expect(verified.keyID == Fixed.issuer.publicKey.paserkID, "a token was accepted under another key id")
        expect(verified.expiresAt > verified.issuedAt && now < verified.expiresAt, "an expired token was accepted")
        expect(verified.issuedAt <= now + CustomToken.clockSkew, "a token issued in the future was accepted")
        expect(verified.expiresAt - verified.issuedAt <= Double(CustomToken.maxLifetime), "a token living over an hour was accepted")
        expect(token.utf8.count <= CustomToken.maxTokenBytes, "an oversized token was accepted")
    }
    return result
}

/// Signs `claims` with the issuer key under `footer` and verifies the token: the signature is
/// good, so only the footer's shape and the claims decide.
private func verifySigned(claims: [UInt8], footer: [UInt8]) {
    let token = PasetoV4Public.sign(claims, with: Fixed.issuer, footer: footer)
    checkSplit(token)
    if case .failure(let error) = verifyAndCheck(token) {
        switch error {
        case .unsupportedVersion, .wrongPurpose:
            expect(false, "a freshly signed v4.public token was refused with \(error.code)")
        case .badSignature:
            expect(false, "the issuer's own signature did not verify")
        default: break
        }
    }
}

/// The spec's token vectors (mode 0), the official PASETO v4 vectors (modes 0 and 1), and the
/// claims and footers of the valid tokens (modes 2 and 3).
func fuzzSeeds(root: String) -> [(name: String, bytes: [UInt8])] {
    var seeds: [(name: String, bytes: [UInt8])] = []
    let vectors = Seeds.json(root, "spec/vectors/tokens.json")
    if let issuer = vectors["issuer"] as? [String: Any] {
        expect(issuer["public_key"] as? String == Fixed.issuer.publicKey.paserk, "tokens.json names another issuer key")
    }
    // The harness must verify as the vectors say, or its seeds would not reach what they should.
    expect(vectors["now"] as? String == "2027-01-15T08:00:00+00:00" && vectors["audience"] as? String == Fixed.audience,
           "tokens.json has another time or audience than the harness")
    for vector in Seeds.list(vectors, "verify") {
        guard let token = vector["token"] as? String, let expected = vector["expect"] as? String else { continue }
        let outcome: String
        do { _ = try Fixed.verifier.verify(token, now: Fixed.now); outcome = "ok" } catch { outcome = error.code }
        expect(outcome == expected, "tokens.json case \(vector["name"] ?? "?"): the harness got \(outcome), the vector says \(expected)")
    }
    let tokens = (Seeds.list(vectors, "mint") + Seeds.list(vectors, "verify")).compactMap { $0["token"] as? String }
    for (index, token) in tokens.enumerated() {
        seeds.append(("custom-\(index)", Seeds.mode(0, token.utf8)))
        guard let parsed = try? PasetoToken(parsing: token), parsed.payload.count >= 64 else { continue }
        let claims = parsed.payload.dropLast(64)
        seeds.append(("claims-\(index)", Seeds.mode(2, claims)))
        seeds.append(("claims-footer-\(index)", Seeds.mode(3, Array(claims) + [0xFF] + parsed.footer)))
    }
    let official = Seeds.json(root, "Tests/MailslotCryptoTests/Fixtures/paseto/v4.json")
    for (index, test) in Seeds.list(official, "tests").enumerated() {
        guard let token = test["token"] as? String else { continue }
        seeds.append(("paseto-\(index)", Seeds.mode(token.hasPrefix("v4.local.") ? 1 : 0, token.utf8)))
        if let payload = test["payload"] as? String {
            seeds.append(("local-\(index)", Seeds.mode(4, Array(payload.utf8) + [0xFF] + Array((test["footer"] as? String ?? "").utf8))))
        }
    }
    let claims = [
        #"{"aud":"relay.example","exp":"2027-01-15T08:05:00Z","iat":"2027-01-15T08:00:00.5z","jti":"j","nbf":"2027-01-15T07:59:00-01:30","sub":"a.b_c-d"}"#,
        #"{"aud":"relay.example","exp":"2027-01-15T09:00:01+00:00","iat":"2027-01-15T08:00:00+00:00","sub":"x"}"#,
        #"{"aud":"relay.example","exp":"2027-01-15T08:05:00+00:00","iat":"2027-01-15T08:00:00+00:00","sub":"x","jti":7}"#,
    ]
    for (index, claim) in claims.enumerated() { seeds.append(("hand-claims-\(index)", Seeds.mode(2, claim.utf8))) }
    return seeds
}
