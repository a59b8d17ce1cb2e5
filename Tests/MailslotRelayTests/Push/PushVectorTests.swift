import _CryptoExtras
import Crypto
import Foundation
import MailslotCrypto
import Testing
@testable import MailslotRelay

/// `spec/vectors/push.json` (spec/push.md §7): the Web Push payload encryption (RFC 8291
/// Appendix A and the relay's 166-byte wake bodies), VAPID and APNs tokens (ES256 signatures are
/// randomised: verify-only, with cases the claim checks refuse), the FCM OAuth assertion (RS256
/// is deterministic: exact), and Standard Webhooks signatures. Written with
/// `MAILSLOT_WRITE_VECTORS=1 swift test --filter PushVectorTests`; otherwise the file is checked:
/// every exact value recomputed, every token verified. tools/interop/check.py checks it with
/// http_ece, py_vapid and `cryptography`.
@Suite struct PushVectorTests {
    static let writing = ProcessInfo.processInfo.environment["MAILSLOT_WRITE_VECTORS"] == "1"
    static let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("spec/vectors/push.json")

    static func b64(_ bytes: some Collection<UInt8>) -> String { Base64URL.encode(bytes) }
    static func bytes(_ text: String) -> [UInt8] { Base64URL.decode(text)! }

    /// A P-256 signing key derived from a name (BLAKE2b-256 of `mailslot push vector key: ` + name).
    static func signingKey(_ name: String) -> P256.Signing.PrivateKey {
        try! P256.Signing.PrivateKey(rawRepresentation: blake2b(Array("mailslot push vector key: \(name)".utf8), length: 32))
    }

    /// The parts of the file recomputed exactly from the code.
    static func exact() throws -> [String: Any] {
        let cipher = WebPushCipherTests.cipher
        let salt = blake2b(Array("mailslot push vector salt".utf8), length: 16)
        var payloads: [[String: Any]] = []
        for tag in ["", "aB3_-x", String(repeating: "Z", count: 48)] {
            let body = try cipher.wakeBody(tag: tag, ephemeralKey: WebPushCipherTests.ephemeral, salt: salt)
            payloads.append(["tag": tag, "body": b64(body), "opens": true, "auth": WebPushCipherTests.auth])
        }
        var wrongAuth = bytes(WebPushCipherTests.auth)
        wrongAuth[0] ^= 1
        payloads.append(["tag": "aB3_-x", "body": payloads[1]["body"]!, "opens": false, "auth": b64(wrongAuth),
                         "why": "another auth secret: the AES-GCM tag does not verify"])

        let rsaPEM = try CompactJWSTests.fixture("test-rsa-2048.pem")
        let rsa = try _RSA.Signing.PrivateKey(pemRepresentation: rsaPEM)
        let account: [String: Any] = ["client_email": "mailslot-test@example.iam.gserviceaccount.com", "private_key_id": "test-key-1",
                                      "token_uri": "https://oauth2.googleapis.com/token", "project_id": "mailslot-test"]
        let json = String(decoding: try JSONSerialization.data(withJSONObject: account.merging(["private_key": rsaPEM]) { $1 }),
                          as: UTF8.self)
        let assertion = try GoogleServiceAccount(json: json).assertion(audience: "https://oauth2.googleapis.com/token", now: 1_800_000_000)

        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
        let second = "whsec_" + Data(blake2b(Array("mailslot push vector webhook secret".utf8), length: 32)).base64EncodedString()
        let webhookBody = WebhookProvider.body(uid: "bob", registration: "Hq2vX0Ck9m1Lr8sWbTn2pQ", tag: "k3J9vQ0aZx", token: nil)
        func sign(_ secrets: [String], id: String, timestamp: Int64, body: [UInt8]) throws -> String {
            WebhookSignature(secrets: try secrets.map { try WebhookSignature.Secret(text: $0) }).header(id: id, timestamp: timestamp, body: body)
        }
        return [
            "webpush_rfc8291": [
                "plaintext": WebPushCipherTests.plaintext, "as_private": WebPushCipherTests.asPrivate, "as_public": WebPushCipherTests.asPublic,
                "ua_private": WebPushCipherTests.uaPrivate, "ua_public": WebPushCipherTests.uaPublic, "salt": WebPushCipherTests.salt,
                "auth": WebPushCipherTests.auth, "record_size": 4096,
                "body": b64(cipher.seal(record: Array(WebPushCipherTests.plaintext.utf8) + [2], ephemeralKey: WebPushCipherTests.ephemeral,
                                        salt: bytes(WebPushCipherTests.salt))),
            ],
            "webpush_payloads": [
                "ua_private": WebPushCipherTests.uaPrivate, "ua_public": WebPushCipherTests.uaPublic,
                "as_private": WebPushCipherTests.asPrivate, "salt": b64(salt), "body_bytes": WebPushCipher.wakeBodyBytes,
                "cases": payloads,
            ],
            "oauth_assertion": [
                "public_key_pem": rsa.publicKey.pemRepresentation, "now": 1_800_000_000,
                "header": #"{"alg":"RS256","kid":"test-key-1","typ":"JWT"}"#,
                "claims": String(decoding: CompactJWS.parts(assertion)!.claims, as: UTF8.self),
                "jwt": assertion, "form_body": GoogleServiceAccount.tokenRequestBody(assertion: assertion),
            ],
            "webhook": [
                ["secrets": [secret], "id": "msg_p5jXN8AQM9LWM0D4loKWxJek", "timestamp": 1_614_265_330, "body": #"{"test": 2432232314}"#,
                 "signature": try sign([secret], id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1_614_265_330,
                                       body: Array(#"{"test": 2432232314}"#.utf8))],
                ["secrets": [secret, second], "id": "msg_Xq1xq7o2H1a3BD9eZt8Q3w", "timestamp": 1_800_000_000,
                 "body": String(decoding: webhookBody, as: UTF8.self),
                 "signature": try sign([secret, second], id: "msg_Xq1xq7o2H1a3BD9eZt8Q3w", timestamp: 1_800_000_000, body: webhookBody)],
            ],
        ]
    }

    /// The verify-only tokens, made fresh when writing.
    static func signed() throws -> [String: Any] {
        let vapidKey = signingKey("vapid")
        let vapid = try VAPID(key: vapidKey, subject: "mailto:ops@example.net")
        func vapidCase(audience: String, exp: Int64, expect: String, why: String) -> [String: Any] {
            let token = CompactJWS.es256(header: ["alg": .string("ES256"), "typ": .string("JWT")],
                                         claims: ["aud": .string(audience), "exp": .integer(exp), "sub": .string(vapid.subject)], key: vapidKey)
            return ["endpoint_origin": "https://push.example.net", "now": 1_800_000_000, "authorization": "vapid t=\(token),k=\(vapid.publicKeyText)",
                    "expect": expect, "why": why]
        }
        let apnsKey = signingKey("apns")
        return [
            "vapid": [
                "public_key": vapid.publicKeyText,
                "cases": [
                    vapidCase(audience: "https://push.example.net", exp: 1_800_043_200, expect: "valid", why: "as the relay signs: exp = now + 12 h"),
                    vapidCase(audience: "https://push.example.net", exp: 1_800_090_000, expect: "refused", why: "exp 25 h ahead (RFC 8292 §2: at most 24 h)"),
                    vapidCase(audience: "https://other.example.net", exp: 1_800_043_200, expect: "refused", why: "aud is another origin"),
                ],
            ],
            "apns_jwt": [
                "public_key": b64(apnsKey.publicKey.x963Representation), "key_id": "ABC123DEFG", "team_id": "DEF123GHIJ", "now": 1_800_000_000,
                "jwt": APNsToken(key: apnsKey, keyID: "ABC123DEFG", teamID: "DEF123GHIJ").sign(now: 1_800_000_000),
            ],
        ]
    }

    static func encode(_ object: Any) throws -> Data {
        try JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])
    }

    @Test func pushVectors() throws {
        let exact = try Self.exact()
        if Self.writing {
            var document = exact.merging(try Self.signed()) { $1 }
            document["about"] = "Mailslot wake-up vectors, spec/push.md §7. Keys are test-only."
            try (try Self.encode(document) + Data("\n".utf8)).write(to: Self.path)
            return
        }
        let stored = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: Self.path)) as? [String: Any])
        for key in exact.keys.sorted() {
            #expect(try Self.encode(stored[key] as Any) == (try Self.encode(exact[key]!)), "\(key) is what the code makes")
        }
        // The payloads open to their tags (or not) with the user agent's key.
        let payloads = try #require(stored["webpush_payloads"] as? [String: Any])
        let ua = try P256.KeyAgreement.PrivateKey(rawRepresentation: Self.bytes(payloads["ua_private"] as! String))
        for item in payloads["cases"] as! [[String: Any]] {
            let opened = try? WebPushTestOpener.open(Self.bytes(item["body"] as! String), privateKey: ua, auth: Self.bytes(item["auth"] as! String))
            #expect((opened != nil) == (item["opens"] as! Bool))
            if let opened { #expect(String(decoding: opened, as: UTF8.self) == item["tag"] as! String) }
        }
        // VAPID: the signature verifies in every case; the claim checks accept only the valid one.
        let vapid = try #require(stored["vapid"] as? [String: Any])
        let vapidKey = try P256.Signing.PublicKey(x963Representation: Self.bytes(vapid["public_key"] as! String))
        for item in vapid["cases"] as! [[String: Any]] {
            let header = item["authorization"] as! String
            let token = String(header.dropFirst("vapid t=".count).prefix { $0 != "," })
            #expect(header.hasSuffix(",k=" + (vapid["public_key"] as! String)))
            #expect(CompactJWS.verifyES256(token, key: vapidKey))
            let claims = try JSONSerialization.jsonObject(with: Data(CompactJWS.parts(token)!.claims)) as! [String: Any]
            let now = item["now"] as! Int64
            let valid = claims["aud"] as? String == item["endpoint_origin"] as? String
                && (claims["exp"] as! Int64) > now && (claims["exp"] as! Int64) <= now + 86_400
            #expect(valid == (item["expect"] as! String == "valid"), "\(item["why"] ?? "")")
        }
        let apns = try #require(stored["apns_jwt"] as? [String: Any])
        let apnsToken = apns["jwt"] as! String
        #expect(CompactJWS.verifyES256(apnsToken, key: try P256.Signing.PublicKey(x963Representation: Self.bytes(apns["public_key"] as! String))))
        #expect(String(decoding: CompactJWS.parts(apnsToken)!.header, as: UTF8.self) == #"{"alg":"ES256","kid":"ABC123DEFG"}"#)
        #expect(String(decoding: CompactJWS.parts(apnsToken)!.claims, as: UTF8.self) == #"{"iat":1800000000,"iss":"DEF123GHIJ"}"#)
    }
}
