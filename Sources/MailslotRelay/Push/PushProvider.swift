import Foundation
import MailslotWire

// What the wake-up dispatcher hands a provider and what it gets back. A provider makes one
// outbound call and maps the answer to a ``PushOutcome``; what to do about it (retry, blame,
// remove, pause) is the scheduler's (``WakeScheduler``). spec/push.md §4, docs/design/wakeups.md §3.1.

/// One wake-up to send: a claimed row joined with its registration.
struct Wake: Sendable, Equatable {
    /// The claimed row, as the store handed it out (requeued from it on a retry).
    let claimed: ClaimedWakeup
    /// The registration's target, read back from the store.
    let target: PushTarget
    /// The webhook event id all attempts of this wake-up share: `msg_` and 22 base64url characters.
    let webhookID: String

    var uid: String { claimed.uid }
    var registrationID: String { claimed.registrationID }
    var version: Int64 { claimed.version }
    var tag: String { claimed.tag }
    var attempt: Int { claimed.attempt }
    var route: String { claimed.route }
    var provider: PushProviderKind { claimed.provider }
}

/// Why a call did not deliver: the `reason` label of `mailslot_push_failed_total` (spec/push.md §4.3).
enum PushFailureReason: String, Sendable, Equatable, CaseIterable {
    case timeout
    case connect
    case status4xx = "status_4xx"
    case status5xx = "status_5xx"
    case rateLimited = "rate_limited"
    case redirect
    case address
    case badResponse = "bad_response"
    case config
}

/// What a provider's answer means.
enum PushOutcome: Sendable, Equatable {
    /// Accepted by the provider.
    case sent
    /// Try again later, no earlier than `after` when the provider said (`Retry-After`);
    /// `pausesRoute`: the limit is the route's, not the device's, so the whole route waits as long.
    case retry(after: Duration?, reason: PushFailureReason, pausesRoute: Bool = false)
    /// The registration's fault (a malformed token, a subscription for another key): one more failure.
    case blamed(PushFailureReason)
    /// The provider says the registration no longer exists: removed.
    case dead(PushFailureReason)
    /// The operator's configuration is wrong (key, topic, secret): the provider pauses (by
    /// default ``configurationPause``), no registration is blamed.
    case misconfigured(PushFailureReason, pause: Duration = PushOutcome.configurationPause)
    /// The address policy refused the endpoint at call time: counts as blamed.
    case refused(PushFailureReason)

    /// How long an answer that blames the operator's configuration pauses its provider
    /// (spec/push.md §4.3), whichever provider gave it.
    static let configurationPause: Duration = .seconds(60)

    /// The failure reason, nil for ``sent``.
    var reason: PushFailureReason? {
        switch self {
        case .sent: nil
        case .retry(_, let reason, _), .blamed(let reason), .dead(let reason), .misconfigured(let reason, _), .refused(let reason): reason
        }
    }
}

/// A push service the relay wakes devices through.
protocol PushProvider: Sendable {
    /// Which provider this is.
    var kind: PushProviderKind { get }
    /// Makes one call for `wake` (bounded by the call timeout) and says what its answer means.
    /// Never throws: every failure is an outcome.
    func send(_ wake: Wake) async -> PushOutcome
}

extension Duration {
    /// The duration in whole milliseconds (rounded down), as the relay clock counts.
    var milliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }
}
