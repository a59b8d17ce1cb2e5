import Synchronization

/// The relay-wide cap on blob transfer bytes per second, `--max-transfer-rate` (issue 27;
/// docs/operations.md, "Transfer bandwidth"): one token bucket that every part upload and every
/// download draws from, whatever the storage (it sits above ``BlobStorage``).
///
/// Why: on a small machine the relay spends ~3.5 ms of CPU per MiB uploaded (docs/performance.md),
/// so a few unthrottled transfers take most of the cores and ordinary messages wait for CPU. The
/// cap bounds what transfers can take, at the cost of their speed.
///
/// How: a transfer that has just received (or sent) `n` bytes charges them with
/// ``reserve(_:)`` and, before it asks for its next chunk, sleeps until the deadline it got
/// (``wait(until:)``). The bucket is a virtual clock, `due`: the time at which every byte charged so
/// far is paid for at ``rate``. A charge moves `due` forward by `n / rate` from `max(due, now)`;
/// the charger may go on at once while `due` is at most ``burst`` ahead of now, and otherwise waits
/// until it is. Since every charge moves the same `due`, concurrent transfers queue behind each
/// other and together move ``rate`` bytes a second, plus one burst after an idle spell. Nothing is
/// buffered to wait: the chunk is already in hand and the next one is not asked for (the HTTP body's
/// back-pressure stops reading the socket; a download's next range read does not start).
final class TransferBandwidth: Sendable {
    /// Bytes per second, all transfers together; more than 0.
    let rate: Int64
    /// Bytes that may pass at once after an idle spell: ``burstMilliseconds`` of the rate.
    let burst: Int64
    private let burstNanoseconds: Int64
    private let clock: TransferClock
    /// `due` in nanoseconds on ``clock``, and the charge's remainder (`bytes × 10⁹ mod rate`), so
    /// that no rounding is lost however small the chunks: pacing is exact.
    private let state: Mutex<(due: Int64, remainder: Int64)>

    /// How much of the rate may pass at once after an idle spell, in milliseconds: long enough
    /// that a small file or one range goes through unhindered, short enough that the message path
    /// never sees transfers burst for long.
    static let burstMilliseconds: Int64 = 50

    /// The bytes a transfer moves between two charges (and so between two waits): a download's
    /// slice, an upload's run of body buffers. 2.5 ms of the rate, between 64 KiB and 512 KiB.
    ///
    /// Why not smaller: each wait is a timer and a thread woken on the relay, work that ordinary
    /// messages wait behind on a busy machine. Charged per 64 KiB, four uploads and four downloads
    /// under a 200 MB/s cap made ~6,000 wake-ups a second, and the relay's CPU per MiB was 10–20 %
    /// higher up and 40–70 % higher down than with these runs (docs/performance.md, "Files"); here a
    /// cap makes at most ~400 charges a second below 210 MB/s. Why not larger: with N transfers sharing the cap, each is silent about
    /// N × this ÷ rate between two of its runs, and clients time out a silent connection — at low
    /// rates the runs stay as small as before (64 KiB at 26 MB/s and below).
    let chargeBytes: Int

    /// The bounds of ``chargeBytes``.
    static let chargeBytesRange = (64 << 10)...(512 << 10)

    /// The largest rate: 1 TB/s, far above any disk, so that no product here overflows.
    static let maxRate: Int64 = 1_000_000_000_000

    /// A bucket of `rate` bytes per second (1 to ``maxRate``), full, on `clock`.
    init(rate: Int64, clock: TransferClock = .system) {
        precondition(rate > 0 && rate <= Self.maxRate, "a transfer rate of 0 is no cap: no bucket")
        self.rate = rate
        self.clock = clock
        burstNanoseconds = Self.burstMilliseconds * 1_000_000
        burst = rate * Self.burstMilliseconds / 1000
        chargeBytes = Int(min(max(rate / 400, Int64(Self.chargeBytesRange.lowerBound)), Int64(Self.chargeBytesRange.upperBound)))
        // Full: due is a whole burst in the past.
        state = Mutex((clock.now() - burstNanoseconds, 0))
    }

    /// Charges `bytes` just moved: the time on ``clock`` before which the transfer must not ask
    /// for its next chunk, or nil when it may go on now.
    func reserve(_ bytes: Int) -> Int64? {
        guard bytes > 0 else { return nil }
        let now = clock.now()
        let due = state.withLock { state -> Int64 in
            if state.due < now {
                // Idle since: the bucket refilled (to at most a burst, below).
                state.due = now
                state.remainder = 0
            }
            // bytes × 10⁹ / rate, carrying the remainder: a chunk is at most a few MiB, so the
            // product fits in 128 bits and the quotient in 64.
            let (high, low) = Int64(bytes).multipliedFullWidth(by: 1_000_000_000)
            let (quotient, remainder) = rate.dividingFullWidth((high, low))
            let total = remainder + state.remainder
            state.due += quotient + total / rate
            state.remainder = total % rate
            return state.due
        }
        let resume = due - burstNanoseconds
        return resume > now ? resume : nil
    }

    /// Sleeps until `deadline` on ``clock`` (from ``reserve(_:)``); throws `CancellationError`
    /// when the transfer's task is cancelled (its client went away).
    func wait(until deadline: Int64) async throws {
        try await clock.sleep(until: deadline)
    }

    /// Charges `bytes` and waits until the transfer may go on: for a download, after a chunk is
    /// written and before the next is read.
    func pace(_ bytes: Int) async throws {
        if let deadline = reserve(bytes) { try await wait(until: deadline) }
    }
}

/// Where ``TransferBandwidth`` reads the time and sleeps: Swift's continuous clock outside tests,
/// which give one whose sleeps move its time instead of passing it (the pacing checked exactly,
/// with no timed assertion). Nanoseconds from an origin of the clock's choosing.
package struct TransferClock: Sendable {
    private let read: @Sendable () -> Int64
    private let sleeper: @Sendable (Int64) async throws -> Void

    /// A clock that answers `now` (monotonic, in nanoseconds) and sleeps with `sleep(until:)`.
    package init(now: @escaping @Sendable () -> Int64, sleep: @escaping @Sendable (_ until: Int64) async throws -> Void) {
        read = now
        sleeper = sleep
    }

    /// The continuous clock, in nanoseconds since this value was made.
    package static var system: TransferClock {
        let clock = ContinuousClock()
        let origin = clock.now
        return TransferClock(now: { nanoseconds(origin.duration(to: clock.now)) }) { deadline in
            try await clock.sleep(until: origin.advanced(by: .nanoseconds(deadline)), tolerance: nil)
        }
    }

    /// A duration in whole nanoseconds.
    private static func nanoseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }

    /// Now, in nanoseconds.
    package func now() -> Int64 { read() }

    /// Returns at `deadline` (nanoseconds) or later; throws when the task is cancelled.
    package func sleep(until deadline: Int64) async throws { try await sleeper(deadline) }
}
