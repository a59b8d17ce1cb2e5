import ServiceLifecycle
import Synchronization

/// The subscriptions' tasks, counted, and whether the relay is stopping.
///
/// A subscription runs tasks only while it has work (``Subscriber``), outside the server's own
/// task tree: a stopping relay waits for them (their last commits) before its final checkpoint,
/// and a socket whose upgrade completes after the shutdown began is closed at once — the
/// shutdown's close event went out to the connections before it was a subscription.
final class SubscriberTasks: Sendable {
    private let running = Atomic<Int>(0)
    private let stopping = Atomic<Bool>(false)

    /// Runs `work` in a new task, counted until it ends.
    func spawn(_ work: @escaping @Sendable () async -> Void) {
        running.add(1, ordering: .relaxed)
        Task {
            await work()
            running.subtract(1, ordering: .releasing)
        }
    }

    /// Whether the relay has begun to stop.
    var isStopping: Bool { stopping.load(ordering: .relaxed) }

    /// The relay begins to stop.
    func stop() { stopping.store(true, ordering: .relaxed) }

    /// Waits until no subscription task runs, for at most `limit`.
    func drained(within limit: Duration) async {
        let deadline = ContinuousClock.now + limit
        while running.load(ordering: .acquiring) > 0, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(10))
        }
    }
}

/// Tells ``SubscriberTasks`` when the relay's graceful shutdown begins.
struct SubscriberShutdown: Service {
    let tasks: SubscriberTasks

    func run() async throws {
        try? await gracefulShutdown()
        tasks.stop()
    }
}
