import Foundation
import MailslotWire
import NIOHTTP1

// Web Push (RFC 8030) with VAPID (RFC 8292) and the encrypted, padded tag (RFC 8291): what
// browsers and UnifiedPush distributors accept. spec/push.md §5.1, docs/design/wakeups.md §4.1.

/// Sends wake-ups to Web Push endpoints.
struct WebPushProvider: PushProvider {
    let kind = PushProviderKind.webpush
    let http: OutboundHTTP
    let vapid: VAPID
    let clock: RelayClock

    /// Wake-ups live one day at the push service.
    static let ttlSeconds = 86_400
    /// The push service replaces an undelivered wake-up of the subscription with a newer one.
    static let topic = "mailslot-wake"

    func send(_ wake: Wake) async -> PushOutcome {
        guard case .webPush(let endpoint, let p256dh, let auth) = wake.target,
              let cipher = try? WebPushCipher(p256dh: p256dh, auth: auth),
              let body = try? cipher.wakeBody(tag: wake.tag)
        else { return .blamed(.badResponse) }
        let headers = Self.headers(authorization: vapid.authorization(audience: endpoint.origin, now: clock.now() / 1000))
        switch await http.postWebPush(endpoint, headers: headers, body: body) {
        case .success(let answer): return Self.outcome(status: answer.status, retryAfter: answer.retryAfter())
        case .failure(let failure): return Self.outcome(failure)
        }
    }

    /// The request's headers, in the order spec/push.md §5.1 lists them.
    static func headers(authorization: String) -> HTTPHeaders {
        HTTPHeaders([
            ("ttl", String(ttlSeconds)), ("urgency", "high"), ("topic", topic),
            ("content-encoding", "aes128gcm"), ("content-type", "application/octet-stream"),
            ("authorization", authorization),
        ])
    }

    /// What a push service's status means (RFC 8030 §5–§7).
    static func outcome(status: Int, retryAfter: Duration?) -> PushOutcome {
        switch status {
        case 200, 201, 202: .sent
        case 404, 410: .dead(.status4xx)
        case 429: .retry(after: retryAfter, reason: .rateLimited, pausesRoute: true)
        case 300..<400: .blamed(.redirect)
        case 500..<600: .retry(after: retryAfter, reason: .status5xx)
        // 400, 413 (a malformed subscription), 401, 403 (made for another VAPID key), the rest.
        default: .blamed(.status4xx)
        }
    }

    /// What a call without an answer means.
    static func outcome(_ failure: OutboundHTTP.Failure) -> PushOutcome {
        switch failure {
        case .timeout: .retry(after: nil, reason: .timeout)
        case .connect: .retry(after: nil, reason: .connect)
        case .tooLarge: .retry(after: nil, reason: .badResponse)
        case .address: .refused(.address)
        }
    }
}
