import Foundation
import MailslotWire
import NIOHTTP1

// The operator's webhook: a Standard Webhooks 1.0 POST naming the mailbox, for apps whose
// backend already runs its push. spec/push.md §5.4, docs/design/wakeups.md §4.4.

/// Sends wake-ups to the operator's webhook.
struct WebhookProvider: PushProvider {
    let kind = PushProviderKind.webhook
    let http: OutboundHTTP
    let url: String
    let signature: WebhookSignature
    let clock: RelayClock

    /// The body's members, encoded sorted and compact.
    struct Body: Encodable, Equatable {
        let registration: String
        let tag: String
        let token: String?
        let type: String
        let uid: String
    }

    func send(_ wake: Wake) async -> PushOutcome {
        guard case .webhook(let token) = wake.target else { return .blamed(.badResponse) }
        let body = Self.body(uid: wake.uid, registration: wake.registrationID, tag: wake.tag, token: token)
        let timestamp = clock.now() / 1000
        let headers = HTTPHeaders([
            ("content-type", "application/json"), ("webhook-id", wake.webhookID), ("webhook-timestamp", String(timestamp)),
            ("webhook-signature", signature.header(id: wake.webhookID, timestamp: timestamp, body: body)),
        ])
        switch await http.post(url, headers: headers, body: body) {
        case .success(let answer): return Self.outcome(status: answer.status, retryAfter: answer.retryAfter())
        case .failure(let failure): return WebPushProvider.outcome(failure)
        }
    }

    /// `{"registration":…,"tag":…,"token":…,"type":"mailslot.wake","uid":…}`, the token absent when there is none.
    static func body(uid: String, registration: String, tag: String, token: String?) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Strings always encode.
        return Array(try! encoder.encode(Body(registration: registration, tag: tag, token: token, type: "mailslot.wake", uid: uid)))
    }

    /// What the backend's status means.
    static func outcome(status: Int, retryAfter: Duration?) -> PushOutcome {
        switch status {
        case 200..<300: .sent
        case 410: .dead(.status4xx)
        case 401, 403: .misconfigured(.config)
        case 429: .retry(after: retryAfter, reason: .rateLimited, pausesRoute: true)
        case 300..<400: .misconfigured(.redirect)
        case 500..<600: .retry(after: retryAfter, reason: .status5xx)
        default: .blamed(.status4xx)
        }
    }
}
