import MailslotWire

/// How large a multi-recipient create (`POST /v1/messages`, spec/protocol.md §4.25) this client
/// sends its relay: at most ``entries`` entries and about ``bytes`` of body. It starts at the
/// relay defaults and only goes down: a relay configured smaller (`--max-batch-entries`,
/// `--max-batch-bytes`) refuses a larger create whole (`invalid_entries`, `413 body_too_large`),
/// and the client halves the refused create and remembers the size that was taken, so that
/// one refusal per relay, not one per send, is the cost of a smaller relay.
struct BatchLimit: Sendable, Equatable {
    /// The most entries of one create (the relay's default `--max-batch-entries`).
    private(set) var entries = Defaults.maxBatchEntries
    /// About the most bytes of one create's body (under the relay's default `--max-batch-bytes`,
    /// with an eighth left for the JSON around the envelopes).
    private(set) var bytes = Defaults.maxBatchBytes / 8 * 7

    /// The body bytes one entry of `envelopeCount` envelope bytes costs, about: its base64url
    /// text and the JSON of `to`, `id` and `key_id` around it.
    static func cost(envelopeCount: Int) -> Int { envelopeCount * 4 / 3 + 200 }

    /// `items` in creates of at most ``entries`` entries and ``bytes`` bytes (a single entry over
    /// the bytes goes alone), in their order.
    func chunks<T>(_ items: [T], envelopeCount: (T) -> Int) -> [[T]] {
        var chunks: [[T]] = [], current: [T] = [], total = 0
        for item in items {
            let size = Self.cost(envelopeCount: envelopeCount(item))
            if !current.isEmpty, current.count >= entries || total + size > bytes {
                chunks.append(current)
                current = []
                total = 0
            }
            current.append(item)
            total += size
        }
        if !current.isEmpty { chunks.append(current) }
        return chunks
    }

    /// Whether `problem`, answering a whole create, says it was too large for this relay
    /// (more entries than its `--max-batch-entries`, a body over its `--max-batch-bytes`).
    static func isTooLarge(_ problem: Problem) -> Bool {
        problem.code == .invalidEntries || problem.code.status == 413
    }

    /// Lowered after a create of `count` entries and `size` bytes was refused by `problem` as
    /// too large: at most half as many entries (`invalid_entries`) or half the bytes (413), so
    /// that the refused create, chunked again, goes in at least two.
    mutating func refused(_ problem: Problem, count: Int, size: Int) {
        if problem.code == .invalidEntries {
            entries = max(1, min(entries, count / 2))
        } else {
            bytes = max(1, min(bytes, size / 2))
        }
    }
}
