import Foundation
import MailslotWire
import NIOHTTP1

// FCM HTTP v1: a high-priority data message without a notification block, holding only the tag
// (Signal's shape). spec/push.md §5.3, docs/design/wakeups.md §4.3.

/// Sends wake-ups through FCM.
struct FCMProvider: PushProvider {
    let kind = PushProviderKind.fcm
    let http: OutboundHTTP
    let account: GoogleServiceAccount
    let accessToken: GoogleAccessToken
    /// FCM's base URL (or a test server).
    let url: String

    func send(_ wake: Wake) async -> PushOutcome {
        guard case .fcm(let device) = wake.target else { return .blamed(.badResponse) }
        let target = url + "/v1/projects/" + account.projectID + "/messages:send"
        let body = Array(Self.body(token: device, tag: wake.tag).utf8)
        for attempt in 0..<2 {
            let bearer: String
            switch await accessToken.token() {
            case .success(let token): bearer = token
            case .failure(.refused): return .misconfigured(.config)
            case .failure(.unavailable(let failure)): return WebPushProvider.outcome(failure)
            }
            let headers = HTTPHeaders([("authorization", "Bearer " + bearer), ("content-type", "application/json; charset=utf-8")])
            switch await http.post(target, headers: headers, body: body) {
            case .failure(let failure): return WebPushProvider.outcome(failure)
            case .success(let answer):
                let code = Self.errorCode(answer.body)
                // A token FCM no longer takes is dropped and the call made once more at once.
                if answer.status == 401, code == nil || code == "UNAUTHENTICATED", attempt == 0 {
                    await accessToken.invalidate(bearer)
                    continue
                }
                return Self.outcome(status: answer.status, code: code, retryAfter: answer.retryAfter())
            }
        }
        return .misconfigured(.config)
    }

    /// The body (spec/push.md §5.3). Tokens are `[A-Za-z0-9_:.-]` and tags `[A-Za-z0-9_-]`: no escaping needed.
    static func body(token: String, tag: String) -> String {
        let collapse = tag.isEmpty ? "mailslot" : "mailslot-" + tag
        return #"{"message":{"android":{"collapse_key":""# + collapse + #"","priority":"HIGH","ttl":"86400s"},"data":{"mailslot":""#
            + tag + #""},"token":""# + token + #""}}"#
    }

    private struct ErrorAnswer: Decodable {
        struct Body: Decodable {
            struct Detail: Decodable {
                let type: String?
                let errorCode: String?
                enum CodingKeys: String, CodingKey { case type = "@type", errorCode }
            }
            let status: String?
            let details: [Detail]?
        }
        let error: Body
    }

    /// The FcmError `errorCode`, else the error's `status`.
    static func errorCode(_ body: [UInt8]) -> String? {
        guard let answer = try? JSONDecoder().decode(ErrorAnswer.self, from: Data(body)) else { return nil }
        let fcm = answer.error.details?.first { $0.type == "type.googleapis.com/google.firebase.fcm.v1.FcmError" }?.errorCode
        return fcm ?? answer.error.status
    }

    /// What FCM's answer means (Google's `ErrorCode` reference).
    static func outcome(status: Int, code: String?, retryAfter: Duration?) -> PushOutcome {
        switch (status, code) {
        case (200, _): .sent
        case (_, "UNREGISTERED"): .dead(.status4xx)
        case (400, "INVALID_ARGUMENT"), (403, "SENDER_ID_MISMATCH"): .blamed(.status4xx)
        case (429, _): .retry(after: retryAfter ?? .seconds(60), reason: .rateLimited, pausesRoute: true)
        case (300..<400, _): .misconfigured(.redirect)
        case (500..<600, _): .retry(after: retryAfter, reason: .status5xx)
        case (400, _): .blamed(.status4xx)
        // 401 (again, or THIRD_PARTY_AUTH_ERROR), 403 PERMISSION_DENIED, 404 (a wrong project).
        default: .misconfigured(.config)
        }
    }
}
