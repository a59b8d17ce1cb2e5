import Foundation
import MailslotWire

/// Forged and misused custom tokens: each must be refused with 401 `invalid_token`, and none
/// may open a session.
enum TokenChecks {
    @Sendable static func run(_ context: AuditContext) async {
        let uid = context.uid("forger")
        let now = Int64(Date().timeIntervalSince1970)
        let issuer = context.target.issuer
        let kid = issuer.publicKey.paserkID

        /// A v4.public token over exactly these claims, signed by `key`.
        func signed(_ claims: [String: String], key: IdentityKeyPair = issuer, footer: String? = nil) -> String {
            let footer = footer ?? #"{"kid":"\#(key.publicKey.paserkID)"}"#
            return PasetoV4Public.sign(json(claims), with: key, footer: Array(footer.utf8))
        }
        func claims(sub: String = uid, aud: String = context.target.audience, iat: Int64 = now, exp: Int64 = now + 300) -> [String: String] {
            ["sub": sub, "aud": aud, "iat": Timestamp.format(iat), "exp": Timestamp.format(exp)]
        }
        func refused(_ name: String, _ token: String) async {
            await context.check(name) {
                context.expect(name, try await context.http.call("POST", "/v1/sessions", body: ["token": token]), 401, "invalid_token")
            }
        }

        await context.check("token.valid-token-signs-in") {
            context.expect("token.valid-token-signs-in", try await context.http.call("POST", "/v1/sessions", body: ["token": signed(claims())]), 201)
        }
        // The same claims and the same kid, signed by a key the relay does not trust.
        let foreign = IdentityKeyPair()
        await refused("token.signed-by-a-foreign-key", signed(claims(), key: foreign, footer: #"{"kid":"\#(kid)"}"#))
        await refused("token.foreign-key-with-its-own-kid", signed(claims(), key: foreign))

        let valid = signed(claims())
        let parts = valid.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        // Payload tampering: another subject spliced in under the original signature.
        var payload = Base64URL.decode(parts[2]) ?? []
        let forged = json(claims(sub: context.bob.uid))
        if payload.count == forged.count + 64 { payload.replaceSubrange(0..<forged.count, with: forged) } else { payload[0] ^= 1 }
        await refused("token.tampered-payload", "v4.public.\(Base64URL.encode(payload)).\(parts[3])")
        await refused("token.tampered-footer", "v4.public.\(parts[2]).\(Base64URL.encode(Array(#"{"kid":"\#(kid)","x":1}"#.utf8)))")
        await refused("token.footer-removed", "v4.public.\(parts[2])")
        await refused("token.purpose-confusion-v4-local", "v4.local.\(parts[2]).\(parts[3])")
        await refused("token.version-confusion-v3", "v3.public.\(parts[2]).\(parts[3])")
        await refused("token.version-confusion-v2", "v2.public.\(parts[2]).\(parts[3])")
        await refused("token.expired", signed(claims(iat: now - 1000, exp: now - 400)))
        await refused("token.issued-in-the-future", signed(claims(iat: now + 600, exp: now + 900)))
        await refused("token.lifetime-over-an-hour", signed(claims(exp: now + 3601 + 60)))
        await refused("token.wrong-audience", signed(claims(aud: context.target.audience + ".other")))
        await refused("token.invalid-subject", signed(claims(sub: "../\(context.bob.uid)")))
        await refused("token.missing-subject", signed(["aud": context.target.audience, "iat": Timestamp.format(now), "exp": Timestamp.format(now + 300)]))
        await refused("token.over-long", signed(claims().merging(["jti": String(repeating: "j", count: 5000)]) { $1 }))
        await refused("token.garbage", "not a token")

        await context.check("token.not-utf8") {
            var body = Array(#"{"token":"v4.public."#.utf8)
            body += [0xC3, 0x28, 0xFF]
            body += Array(#""}"#.utf8)
            context.expect("token.not-utf8", try await context.http.call("POST", "/v1/sessions", body: Data(body)), 400, "invalid_json")
        }
    }

    static func json(_ object: [String: String]) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Array((try? encoder.encode(object)) ?? Data())
    }
}
