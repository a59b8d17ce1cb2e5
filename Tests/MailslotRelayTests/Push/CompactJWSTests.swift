import _CryptoExtras
import Crypto
import Foundation
import MailslotCrypto
import Testing
@testable import MailslotRelay

/// ES256 and RS256 compact tokens and the VAPID header (spec/push.md §5).
@Suite struct CompactJWSTests {
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/push")

    static func fixture(_ name: String) throws -> String {
        try String(contentsOf: fixtures.appendingPathComponent(name), encoding: .utf8)
    }

    @Test func es256HeaderClaimsAndRawSignature() throws {
        let key = P256.Signing.PrivateKey()
        let token = CompactJWS.es256(header: ["alg": .string("ES256"), "kid": .string("ABC123DEFG")],
                                     claims: ["iss": .string("DEF123GHIJ"), "iat": .integer(1_800_000_000)], key: key)
        let parts = try #require(CompactJWS.parts(token))
        #expect(String(decoding: parts.header, as: UTF8.self) == #"{"alg":"ES256","kid":"ABC123DEFG"}"#)
        #expect(String(decoding: parts.claims, as: UTF8.self) == #"{"iat":1800000000,"iss":"DEF123GHIJ"}"#)
        #expect(parts.signature.count == 64)
        #expect(CompactJWS.verifyES256(token, key: key.publicKey))
        #expect(!CompactJWS.verifyES256(token, key: P256.Signing.PrivateKey().publicKey))
        // A changed claim no longer verifies.
        let pieces = token.split(separator: ".")
        let forged = pieces[0] + "." + Base64URL.encode(Array(#"{"iat":1800000001,"iss":"DEF123GHIJ"}"#.utf8)) + "." + pieces[2]
        #expect(!CompactJWS.verifyES256(String(forged), key: key.publicKey))
    }

    /// RSASSA-PKCS1-v1_5 is deterministic: the token is the one Python's `cryptography` made from the same key.
    @Test func rs256Vector() throws {
        let key = try _RSA.Signing.PrivateKey(pemRepresentation: Self.fixture("test-rsa-2048.pem"))
        let token = try CompactJWS.rs256(
            header: ["alg": .string("RS256"), "kid": .string("test-key-1"), "typ": .string("JWT")],
            claims: ["aud": .string("https://oauth2.googleapis.com/token"), "exp": .integer(1_800_003_600), "iat": .integer(1_800_000_000),
                     "iss": .string("mailslot-test@example.iam.gserviceaccount.com"),
                     "scope": .string("https://www.googleapis.com/auth/firebase.messaging")],
            key: key)
        #expect(token == (try Self.fixture("test-rsa-2048.rs256.jwt")).trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(CompactJWS.verifyRS256(token, key: key.publicKey))
    }

    @Test func vapidHeaderFormAndClaims() throws {
        let key = P256.Signing.PrivateKey()
        let vapid = try VAPID(key: key, subject: "mailto:ops@example.net")
        #expect(vapid.publicKeyText.count == 87)
        let header = vapid.authorization(audience: "https://push.example.net", now: 1_800_000_000)
        #expect(header.hasPrefix("vapid t="))
        #expect(!header.contains(" k="), "no space after the comma: py_vapid splits on the last space")
        #expect(header.hasSuffix(",k=" + vapid.publicKeyText))
        let token = String(header.dropFirst("vapid t=".count).prefix { $0 != "," })
        let parts = try #require(CompactJWS.parts(token))
        #expect(String(decoding: parts.header, as: UTF8.self) == #"{"alg":"ES256","typ":"JWT"}"#)
        #expect(String(decoding: parts.claims, as: UTF8.self)
                == #"{"aud":"https://push.example.net","exp":1800043200,"sub":"mailto:ops@example.net"}"#)
        #expect(CompactJWS.verifyES256(token, key: key.publicKey))
    }

    @Test func vapidTokensAreCachedUntilAnHourBeforeExpiry() throws {
        let vapid = try VAPID(key: P256.Signing.PrivateKey(), subject: "https://example.net/contact")
        let first = vapid.authorization(audience: "https://a.example", now: 1_000_000)
        #expect(vapid.authorization(audience: "https://a.example", now: 1_000_000 + 10 * 3600) == first)
        #expect(vapid.authorization(audience: "https://a.example", now: 1_000_000 + 11 * 3600) != first)
        for index in 0..<300 { _ = vapid.authorization(audience: "https://h\(index).example", now: 1_000_000) }
        #expect(vapid.cachedCount == VAPID.maxCached)
    }

    @Test func vapidAudienceIsTheOrigin() {
        #expect(VAPID.audience(of: URL(string: "https://Push.Example.net/up/8f3Kq?x=1")!) == "https://push.example.net")
        #expect(VAPID.audience(of: URL(string: "https://push.example.net:443/x")!) == "https://push.example.net")
        #expect(VAPID.audience(of: URL(string: "https://push.example.net:8443/x")!) == "https://push.example.net:8443")
        #expect(VAPID.audience(of: URL(string: "http://127.0.0.1:9000/x")!) == "http://127.0.0.1:9000")
    }

    @Test func vapidKeyFilesInEveryForm() throws {
        // `openssl ecparam -genkey`: EC PARAMETERS, then SEC1.
        let ecparams = try Self.fixture("test-vapid-ecparams.pem")
        #expect(ecparams.contains("BEGIN EC PARAMETERS"))
        let fromSEC1 = try VAPID.key(pem: ecparams)
        // PKCS#8, what py_vapid and keygen write.
        let fromPKCS8 = try VAPID.key(pem: fromSEC1.pemRepresentation)
        #expect(fromPKCS8.rawRepresentation == fromSEC1.rawRepresentation)
        #expect(throws: PushKeyFileError.self) { try VAPID.key(pem: "") }
        #expect(throws: PushKeyFileError.self) { try VAPID.key(pem: fromSEC1.pemRepresentation + "\n" + fromSEC1.pemRepresentation) }
        #expect(throws: PushKeyFileError.self) { try VAPID.key(pem: (try Self.fixture("test-rsa-2048.pem"))) }
        #expect(throws: PushKeyFileError.self) { try VAPID(key: fromSEC1, subject: "ops@example.net") }
    }

    @Test func keyFilesReadableByOthersAreRefused() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("vapid-\(UUID().uuidString).pem").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        _ = FileManager.default.createFile(atPath: path, contents: Data("x".utf8), attributes: [.posixPermissions: 0o644])
        #expect(throws: PushKeyFileError.self) { try PushKeyFiles.read(path, setting: "vapid-key") }
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
        #expect(try PushKeyFiles.read(path, setting: "vapid-key") == "x")
    }
}
