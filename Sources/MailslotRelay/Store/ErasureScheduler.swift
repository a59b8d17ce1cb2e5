import Logging

/// Makes erasure real within a bound: after messages are deleted, truncates the WAL within
/// `delay` seconds so their ciphertext is gone from the database files, batching the many
/// erasures of a busy relay into one checkpoint.
final class ErasureScheduler: Sendable {
    private let requests: AsyncStream<Void>.Continuation
    private let stream: AsyncStream<Void>
    private let store: any RelayStore
    private let delay: Double

    init(store: any RelayStore, delay: Double) {
        self.store = store
        self.delay = delay
        (stream, requests) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// Something was erased: schedule a checkpoint.
    func erased() { requests.yield() }

    /// Runs until cancelled, checkpointing after each burst of erasures.
    func run(logger: Logger) async {
        for await _ in stream {
            try? await Task.sleep(for: .seconds(delay))
            var attempts = 0
            // A long-running reader can hold the WAL; try again a few times, then wait for the next erasure.
            while attempts < 5, (try? await store.checkpoint()) != true {
                attempts += 1
                try? await Task.sleep(for: .milliseconds(200))
            }
            if attempts == 5 { logger.warning("WAL checkpoint kept busy by readers; erased content may linger until the next one") }
            if Task.isCancelled { return }
        }
    }

}
