import Foundation
import MailslotWire
import NIOHTTP1

// APNs over HTTP/2 with token authentication, Signal's shape: an alert with `mutable-content`
// that wakes the app's Notification Service Extension (priority 10), or a background push
// (priority 5). The body carries only the tag. spec/push.md §5.2, docs/design/wakeups.md §4.2.

/// Sends wake-ups through APNs.
struct APNsProvider: PushProvider {
    let kind = PushProviderKind.apns
    let http: OutboundHTTP
    let token: APNsToken
    /// `apns-topic`: the app's bundle id.
    let topic: String
    /// Apple's production and development base URLs (or test servers).
    let url: String
    let sandboxURL: String
    let clock: RelayClock

    func send(_ wake: Wake) async -> PushOutcome {
        guard case .apns(let device, let sandbox, let mode) = wake.target else { return .blamed(.badResponse) }
        let now = clock.now() / 1000
        let current = token.current(now: now)
        let target = (sandbox ? sandboxURL : url) + "/3/device/" + device
        let body = Array(Self.body(tag: wake.tag, mode: mode).utf8)
        var outcome = await call(target, bearer: current.token, mode: mode, tag: wake.tag, now: now, body: body)
        // An expired token is renewed and the call made again at once, once.
        if case .expiredToken = outcome {
            guard let renewed = token.renew(expired: current.issuedAt, now: now) else {
                return .misconfigured(.config)
            }
            outcome = await call(target, bearer: renewed, mode: mode, tag: wake.tag, now: now, body: body)
        }
        switch outcome {
        case .expiredToken: return .misconfigured(.config)
        case .final(let result): return result
        }
    }

    private enum CallResult { case final(PushOutcome), expiredToken }

    private func call(_ target: String, bearer: String, mode: APNsPushMode, tag: String, now: Int64, body: [UInt8]) async -> CallResult {
        switch await http.post(target, headers: Self.headers(bearer: bearer, topic: topic, mode: mode, tag: tag, now: now), body: body) {
        case .success(let answer):
            let reason = (try? JSONDecoder().decode(Reason.self, from: Data(answer.body)))?.reason
            if answer.status == 403, reason == "ExpiredProviderToken" { return .expiredToken }
            return .final(Self.outcome(status: answer.status, reason: reason, retryAfter: answer.retryAfter()))
        case .failure(let failure): return .final(WebPushProvider.outcome(failure))
        }
    }

    private struct Reason: Decodable { let reason: String? }

    /// The request headers (spec/push.md §5.2).
    static func headers(bearer: String, topic: String, mode: APNsPushMode, tag: String, now: Int64) -> HTTPHeaders {
        var headers = HTTPHeaders([
            ("authorization", "bearer " + bearer), ("apns-topic", topic),
            ("apns-push-type", mode == .background ? "background" : "alert"),
            ("apns-priority", mode == .background ? "5" : "10"),
            ("apns-expiration", String(now + 86_400)),
        ])
        if mode != .background { headers.add(name: "apns-collapse-id", value: tag.isEmpty ? "mailslot" : "mailslot-" + tag) }
        headers.add(name: "content-type", value: "application/json")
        return headers
    }

    /// The body: the tag beside an empty "new message" signal. Tags are `[A-Za-z0-9_-]`, so the
    /// JSON needs no escaping.
    static func body(tag: String, mode: APNsPushMode) -> String {
        switch mode {
        case .background: #"{"aps":{"content-available":1},"mailslot":""# + tag + #""}"#
        default: #"{"aps":{"alert":{"loc-key":"mailslot.wake"},"mutable-content":1},"mailslot":""# + tag + #""}"#
        }
    }

    /// What APNs' answer means (Apple, "Handling notification responses from APNs").
    static func outcome(status: Int, reason: String?, retryAfter: Duration?) -> PushOutcome {
        switch (status, reason) {
        case (200, _): .sent
        case (400, "BadDeviceToken"), (410, _): .dead(.status4xx)
        case (400, "DeviceTokenNotForTopic"): .blamed(.status4xx)
        case (429, "TooManyProviderTokenUpdates"): .retry(after: .seconds(60), reason: .rateLimited)
        case (429, _): .retry(after: retryAfter ?? .seconds(60), reason: .rateLimited)
        case (300..<400, _): .misconfigured(.redirect)
        case (500..<600, _): .retry(after: retryAfter, reason: .status5xx)
        // Other 400s (BadTopic, TopicDisallowed, …), 403 Invalid/MissingProviderToken, 404, 405.
        default: .misconfigured(.config)
        }
    }
}
