import _CryptoExtras
import Crypto
import Foundation
import MailslotCrypto
import Testing
@testable import MailslotRelay

/// Each provider's request as spec/push.md §5 fixes it and each answer's meaning (§4.3 and the
/// providers' tables in docs/design/wakeups.md §4).
@Suite struct PushProviderAnswerTests {
    @Test func webPushAnswers() {
        #expect(WebPushProvider.outcome(status: 201, retryAfter: nil) == .sent)
        #expect(WebPushProvider.outcome(status: 404, retryAfter: nil) == .dead(.status4xx))
        #expect(WebPushProvider.outcome(status: 410, retryAfter: nil) == .dead(.status4xx))
        #expect(WebPushProvider.outcome(status: 413, retryAfter: nil) == .blamed(.status4xx))
        #expect(WebPushProvider.outcome(status: 403, retryAfter: nil) == .blamed(.status4xx))
        #expect(WebPushProvider.outcome(status: 302, retryAfter: nil) == .blamed(.redirect))
        #expect(WebPushProvider.outcome(status: 429, retryAfter: .seconds(120)) == .retry(after: .seconds(120), reason: .rateLimited, pausesRoute: true))
        #expect(WebPushProvider.outcome(status: 503, retryAfter: nil) == .retry(after: nil, reason: .status5xx))
        #expect(WebPushProvider.outcome(.address) == .refused(.address))
        #expect(WebPushProvider.outcome(.timeout) == .retry(after: nil, reason: .timeout))
    }

    @Test func webPushHeaders() {
        let headers = WebPushProvider.headers(authorization: "vapid t=x,k=y")
        #expect(headers.map { "\($0.name): \($0.value)" } == [
            "ttl: 86400", "urgency: high", "topic: mailslot-wake", "content-encoding: aes128gcm",
            "content-type: application/octet-stream", "authorization: vapid t=x,k=y",
        ])
    }

    @Test func apnsRequestAndAnswers() {
        #expect(APNsProvider.body(tag: "k3J9", mode: .alert) == #"{"aps":{"alert":{"loc-key":"mailslot.wake"},"mutable-content":1},"mailslot":"k3J9"}"#)
        #expect(APNsProvider.body(tag: "", mode: .background) == #"{"aps":{"content-available":1},"mailslot":""}"#)
        let alert = APNsProvider.headers(bearer: "J", topic: "net.example.app", mode: .alert, tag: "", now: 1_800_000_000)
        #expect(alert.map { "\($0.name): \($0.value)" } == [
            "authorization: bearer J", "apns-topic: net.example.app", "apns-push-type: alert", "apns-priority: 10",
            "apns-expiration: 1800086400", "apns-collapse-id: mailslot", "content-type: application/json",
        ])
        let background = APNsProvider.headers(bearer: "J", topic: "t", mode: .background, tag: "x", now: 0)
        #expect(background.first(name: "apns-priority") == "5" && background.first(name: "apns-collapse-id") == nil)
        #expect(APNsProvider.outcome(status: 200, reason: nil, retryAfter: nil) == .sent)
        #expect(APNsProvider.outcome(status: 400, reason: "BadDeviceToken", retryAfter: nil) == .dead(.status4xx))
        #expect(APNsProvider.outcome(status: 410, reason: "Unregistered", retryAfter: nil) == .dead(.status4xx))
        #expect(APNsProvider.outcome(status: 410, reason: "ExpiredToken", retryAfter: nil) == .dead(.status4xx))
        #expect(APNsProvider.outcome(status: 400, reason: "DeviceTokenNotForTopic", retryAfter: nil) == .blamed(.status4xx))
        #expect(APNsProvider.outcome(status: 400, reason: "BadTopic", retryAfter: nil) == .misconfigured(.config, pause: .seconds(60)))
        #expect(APNsProvider.outcome(status: 403, reason: "InvalidProviderToken", retryAfter: nil) == .misconfigured(.config, pause: .seconds(60)))
        #expect(APNsProvider.outcome(status: 429, reason: "TooManyRequests", retryAfter: nil) == .retry(after: .seconds(60), reason: .rateLimited))
        #expect(APNsProvider.outcome(status: 429, reason: "TooManyProviderTokenUpdates", retryAfter: .seconds(5)) == .retry(after: .seconds(60), reason: .rateLimited))
        #expect(APNsProvider.outcome(status: 503, reason: "ServiceUnavailable", retryAfter: nil) == .retry(after: nil, reason: .status5xx))
    }

    @Test func apnsTokenRenewsAt40MinutesNeverBefore20() {
        let token = APNsToken(key: P256.Signing.PrivateKey(), keyID: "ABC123DEFG", teamID: "DEF123GHIJ")
        let first = token.current(now: 1_000)
        #expect(token.current(now: 1_000 + 39 * 60).token == first.token)
        #expect(token.current(now: 1_000 + 40 * 60).issuedAt == 1_000 + 40 * 60)
        let young = token.current(now: 10_000)
        #expect(token.renew(expired: young.issuedAt, now: young.issuedAt + 19 * 60) == nil, "a young token expired: the clock is wrong")
        #expect(token.renew(expired: young.issuedAt, now: young.issuedAt + 20 * 60) != nil)
        let parts = CompactJWS.parts(first.token)!
        #expect(String(decoding: parts.header, as: UTF8.self) == #"{"alg":"ES256","kid":"ABC123DEFG"}"#)
        #expect(String(decoding: parts.claims, as: UTF8.self) == #"{"iat":1000,"iss":"DEF123GHIJ"}"#)
    }

    @Test func fcmRequestAndAnswers() throws {
        #expect(FCMProvider.body(token: "dA1:x-y_z.w", tag: "k3") ==
                #"{"message":{"android":{"collapse_key":"mailslot-k3","priority":"HIGH","ttl":"86400s"},"data":{"mailslot":"k3"},"token":"dA1:x-y_z.w"}}"#)
        let unregistered = Array(#"{"error":{"code":404,"status":"NOT_FOUND","details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"UNREGISTERED"}]}}"#.utf8)
        #expect(FCMProvider.errorCode(unregistered) == "UNREGISTERED")
        #expect(FCMProvider.outcome(status: 404, code: "UNREGISTERED", retryAfter: nil) == .dead(.status4xx))
        #expect(FCMProvider.outcome(status: 400, code: "INVALID_ARGUMENT", retryAfter: nil) == .blamed(.status4xx))
        #expect(FCMProvider.outcome(status: 403, code: "SENDER_ID_MISMATCH", retryAfter: nil) == .blamed(.status4xx))
        #expect(FCMProvider.outcome(status: 403, code: "PERMISSION_DENIED", retryAfter: nil) == .misconfigured(.config, pause: .seconds(60)))
        #expect(FCMProvider.outcome(status: 401, code: "THIRD_PARTY_AUTH_ERROR", retryAfter: nil) == .misconfigured(.config, pause: .seconds(60)))
        #expect(FCMProvider.outcome(status: 429, code: "QUOTA_EXCEEDED", retryAfter: nil) == .retry(after: .seconds(60), reason: .rateLimited, pausesRoute: true))
        #expect(FCMProvider.outcome(status: 503, code: "UNAVAILABLE", retryAfter: .seconds(9)) == .retry(after: .seconds(9), reason: .status5xx))
    }

    @Test func serviceAccountAssertionAndForm() throws {
        let pem = try CompactJWSTests.fixture("test-rsa-2048.pem")
        func accountJSON(_ key: String) throws -> String {
            String(decoding: try JSONSerialization.data(withJSONObject: [
                "type": "service_account", "project_id": "mailslot-test", "private_key_id": "test-key-1", "private_key": key,
                "client_email": "mailslot-test@example.iam.gserviceaccount.com", "token_uri": "https://oauth2.googleapis.com/token",
            ]), as: UTF8.self)
        }
        let account = try GoogleServiceAccount(json: try accountJSON(pem))
        let assertion = try account.assertion(audience: "https://oauth2.googleapis.com/token", now: 1_800_000_000)
        #expect(assertion == (try CompactJWSTests.fixture("test-rsa-2048.rs256.jwt")).trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(GoogleServiceAccount.tokenRequestBody(assertion: "A.B.C")
                == "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=A.B.C")
        #expect(throws: PushKeyFileError.self) { try GoogleServiceAccount(json: #"{"project_id":"x"}"#) }
        // A key below 2048 bits is refused.
        let small = try _RSA.Signing.PrivateKey(unsafeKeySize: .init(bitCount: 1024))
        let smallJSON = try accountJSON(small.pemRepresentation)
        #expect(throws: PushKeyFileError.self) { try GoogleServiceAccount(json: smallJSON) }
    }

    @Test func webhookRequestAndAnswers() {
        #expect(String(decoding: WebhookProvider.body(uid: "bob", registration: "Hq2vX0Ck9m1Lr8sWbTn2pQ", tag: "k3", token: nil), as: UTF8.self)
                == #"{"registration":"Hq2vX0Ck9m1Lr8sWbTn2pQ","tag":"k3","type":"mailslot.wake","uid":"bob"}"#)
        #expect(String(decoding: WebhookProvider.body(uid: "bob", registration: "r", tag: "", token: "dev/1"), as: UTF8.self)
                == #"{"registration":"r","tag":"","token":"dev/1","type":"mailslot.wake","uid":"bob"}"#)
        #expect(WebhookProvider.outcome(status: 204, retryAfter: nil) == .sent)
        #expect(WebhookProvider.outcome(status: 410, retryAfter: nil) == .dead(.status4xx))
        #expect(WebhookProvider.outcome(status: 422, retryAfter: nil) == .blamed(.status4xx))
        #expect(WebhookProvider.outcome(status: 401, retryAfter: nil) == .misconfigured(.config, pause: .seconds(60)))
        #expect(WebhookProvider.outcome(status: 429, retryAfter: .seconds(3)) == .retry(after: .seconds(3), reason: .rateLimited, pausesRoute: true))
        #expect(WebhookProvider.outcome(status: 500, retryAfter: nil) == .retry(after: nil, reason: .status5xx))
    }
}
