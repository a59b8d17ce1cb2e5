import Foundation
import MailslotAudit
import MailslotTestSupport
import MailslotWire
import Testing
@testable import MailslotRelay

/// The relay's own request pieces — `WebPushCipher`, `VAPID`, `WebhookSignature` — checked by the
/// reference implementations in the stand-ins (`tools/push run`): Mozilla's http_ece decrypts the
/// body, py_vapid verifies the header and the stand-in the RFC 8292 claims, Python's `hmac` the
/// webhook signature; and the key files tools/push writes (py_vapid's own PEM, the two-secret
/// webhook file) are the ones these types read. No relay, no dispatcher: what fails here is the
/// bytes, not the scheduling.
@Suite(.serialized, .enabled(if: PushStandins.available, PushStandins.skipReason))
struct PushStandinCrossTests {
    var standins: PushStandins { PushStandins.current! }

    func file(_ name: String) throws -> String {
        try String(contentsOfFile: standins.folder + "/" + name, encoding: .utf8)
    }

    @Test(arguments: ["", "aB3_-x", String(repeating: "Z", count: 48)])
    func aWebPushWakeUpBuiltByTheRelaysPiecesPassesHttpEceAndPyVapid(_ tag: String) async throws {
        let subscription = try await standins.subscribe()
        let vapid = try VAPID(key: try VAPID.key(pem: try file("vapid.pem")), subject: "mailto:push-tests@mailslot.invalid")
        let cipher = try WebPushCipher(p256dh: try #require(Base64URL.decode(subscription.p256dh)),
                                       auth: try #require(Base64URL.decode(subscription.auth)))
        let endpoint = try #require(URL(string: subscription.endpoint))
        let audience = try #require(VAPID.audience(of: endpoint))
        let body = try cipher.wakeBody(tag: tag)
        #expect(body.count == 166)
        let origin = AuditHTTP(base: URL(string: audience)!)
        let answer = try await origin.call("POST", endpoint.path, body: Data(body), headers: [
            "TTL": "86400", "Urgency": "high", "Topic": "mailslot-wake", "Content-Encoding": "aes128gcm",
            "Content-Type": "application/octet-stream",
            "Authorization": vapid.authorization(audience: audience, now: Int64(Date().timeIntervalSince1970)),
        ])
        let entry = try #require(try await standins.requests(.webpush, for: subscription.id).last)
        #expect(answer.status == 201, "\(entry)")
        #expect(entry.ok && entry.tag == tag, "\(entry)")
    }

    @Test func theWebhookSignatureOfTheRelayIsTheStandardWebhooksOne() async throws {
        let secrets = try WebhookSignature.secrets(file: try file("webhook-secrets"))
        #expect(secrets.count == 2)
        let signature = WebhookSignature(secrets: secrets)
        let id = "msg_" + Base64URL.encode(randomBytes(16))
        let registration = newRegistrationID()
        let body = Array(#"{"registration":"\#(registration)","tag":"k3J9vQ0aZx","token":"device-1","type":"mailslot.wake","uid":"bob"}"#.utf8)
        let timestamp = Int64(Date().timeIntervalSince1970)
        let webhook = AuditHTTP(base: URL(string: "http://127.0.0.1:\(standins.ports["webhook"]!)")!)
        let answer = try await webhook.call("POST", "/hooks/mailslot", body: Data(body), headers: [
            "webhook-id": id, "webhook-timestamp": String(timestamp), "webhook-signature": signature.header(id: id, timestamp: timestamp, body: body),
        ])
        let entry = try #require(try await standins.requests(.webhook, for: registration).last)
        #expect(answer.status == 204, "\(entry)")
        #expect(entry.ok && entry.signedBy == [0, 1], "both secrets sign: \(entry)")
    }
}
