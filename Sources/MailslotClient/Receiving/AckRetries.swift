import Foundation
import MailslotWire

/// The acks of one live subscription that the relay has not confirmed yet, and when to send one
/// again. A relay that cannot carry out an ack for now — its database out of reach, its disk full,
/// a failure of its own (a 5xx code) — answers an `error` frame naming the id: the message stays
/// on the relay, and this subscription will not bring it again (only the next one would). So the
/// receiver acks it again after a pause that grows, a few times, rather than leave it on the relay
/// until the connection ends. A refusal (4xx) is final: acking again would not change it.
struct AckRetries {
    /// Acks sent again for one id at most, after the first.
    static let maxRetries = 6
    /// The longest pause before an ack is sent again.
    static let maxWait = 30.0

    /// Ids acked and not yet confirmed, with the number of times each was sent again.
    private var unconfirmed: [String: Int] = [:]

    /// The ack of `id` was sent.
    mutating func sent(_ id: String) {
        if unconfirmed[id] == nil { unconfirmed[id] = 0 }
    }

    /// The relay answered `acked`: the message is erased.
    mutating func confirmed(_ id: String) {
        unconfirmed[id] = nil
    }

    /// How long to wait before acking `id` again now that the relay answered it with `problem`;
    /// nil when it should not be acked again: a refusal, an id this subscription did not ack
    /// (or already gave up on), or the retries spent. Waits 0.5 s, doubling, at least what the
    /// relay asked (`retry_after`), at most ``maxWait``, each shortened at random by up to a
    /// quarter so that the clients of a recovering relay do not all come back at once.
    mutating func retry(after problem: Problem, id: String, random: Double = Double.random(in: 0..<1)) -> Duration? {
        guard let retries = unconfirmed[id] else { return nil }
        guard problem.code.status >= 500, retries < Self.maxRetries else {
            unconfirmed[id] = nil  // final, or given up: the next subscription brings the message again
            return nil
        }
        unconfirmed[id] = retries + 1
        let backoff = 0.5 * pow(2, Double(retries)) * (1 - 0.25 * random)
        let seconds = min(Self.maxWait, max(backoff, Double(problem.retryAfter ?? 0)))
        return .milliseconds(Int64(seconds * 1000))
    }

    /// How many acks await their confirmation.
    var count: Int { unconfirmed.count }
}
