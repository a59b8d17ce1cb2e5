import Foundation

/// Run-wide counts that every socket bumps and the progress line reads. Each socket also keeps
/// its own exact ledger; these are for watching and for knowing when the run has drained.
struct LiveCounts: Sendable {
    /// Sockets that got their `ready` frame.
    var ready = 0
    /// `send` frames written.
    var sent = 0
    /// `sent` or `error` answers to sends.
    var answered = 0
    /// Sends the relay stored (`sent` with created: true), to recipients that ack / to slow ones.
    var created = 0
    var createdSlow = 0
    /// Sends the relay refused.
    var refused = 0
    /// Messages delivered for the first time, to recipients that ack / to slow ones.
    var delivered = 0
    var deliveredSlow = 0
    /// Messages whose `acked` came back (erased).
    var erased = 0
    /// Senders that finished writing.
    var sendersDone = 0
    /// The first thing that went wrong, which ends the run.
    var failure: String?
}

/// The shared ``LiveCounts``.
typealias Counters = Locked<LiveCounts>

extension Locked where Value == LiveCounts {
    /// Records the first failure; later ones are consequences.
    func fail(_ text: String) { withLock { if $0.failure == nil { $0.failure = text } } }
}

/// One sample of the relay while the run goes on.
struct Sample: Sendable {
    /// Seconds since the clock started.
    let time: Double
    let counts: LiveCounts
    /// The relay's resident set size, if known.
    let residentBytes: Int?
}

/// Prints a progress line on stderr once a second and keeps the samples (the slow-consumer report
/// shows RSS against the growing backlog).
final class ProgressPrinter: Sendable {
    private let samples = Locked<[Sample]>([])
    private let task: Locked<Task<Void, Never>?> = Locked(nil)

    /// Starts sampling `counters` and the relay's RSS every second from `start`.
    func start(counters: Counters, target: RelayTarget, start: UInt64, quiet: Bool) {
        let samples = self.samples
        task.withLock {
            $0 = Task {
                var previous = counters.current
                var previousTime = start
                while !Task.isCancelled {
                    try? await Task.sleep(nanoseconds: 1_000_000_000)
                    if Task.isCancelled { break }
                    let now = Monotonic.now(), counts = counters.current
                    let rss = await target.residentBytes()
                    samples.withLock { $0.append(Sample(time: Monotonic.seconds(start, now), counts: counts, residentBytes: rss)) }
                    if !quiet {
                        let rate = Double(counts.erased - previous.erased) / Monotonic.seconds(previousTime, now)
                        var line = String(format: "[%5.1fs] sent %d  stored %d  delivered %d  acked %d  (%.0f msg/s)",
                                          Monotonic.seconds(start, now), counts.sent, counts.created + counts.createdSlow,
                                          counts.delivered + counts.deliveredSlow, counts.erased, rate)
                        if counts.createdSlow > 0 { line += "  slow backlog \(counts.createdSlow)" }
                        if let rss { line += String(format: "  relay rss %.1f MB", Double(rss) / 1_048_576) }
                        if counts.refused > 0 { line += "  refused \(counts.refused)" }
                        Console.error(line)
                    }
                    previous = counts
                    previousTime = now
                }
            }
        }
    }

    /// Stops sampling; returns the samples.
    func stop() -> [Sample] {
        task.withLock { $0?.cancel() }
        return samples.current
    }
}
