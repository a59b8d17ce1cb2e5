import Logging
import ServiceLifecycle

/// A relay started in the background of this process (tests, benchmarks, examples): it listens
/// once ``Relay/start()`` returns, until ``stop()``.
public final class RunningRelay: Sendable {
    /// The port it listens on (the configured one, or the one picked for port 0).
    public let port: Int
    private let relay: Relay
    private let group: ServiceGroup
    private let task: Task<Void, any Error>

    init(relay: Relay, port: Int, group: ServiceGroup, task: Task<Void, any Error>) {
        self.relay = relay
        self.port = port
        self.group = group
        self.task = task
    }

    /// Stops it gracefully, as SIGTERM would: requests finish, sockets close, the database is checkpointed, the store closed.
    public func stop() async throws {
        do {
            await group.triggerGracefulShutdown()
            try await task.value
            try await relay.finishSubscriptions()
            try await relay.store.checkpoint()
        } catch {
            await relay.store.close()
            throw error
        }
        await relay.store.close()
    }
}

extension Relay {
    /// Starts the relay in the background and returns once it is listening; throws what kept
    /// it from listening (a port in use, say) instead of waiting for ever.
    ///
    /// ```swift
    /// var configuration = RelayConfiguration()
    /// configuration.port = 0                     // any free port
    /// let running = try await Relay(configuration: configuration, logger: logger).start()
    /// let relayURL = URL(string: "http://127.0.0.1:\(running.port)")!
    /// // … clients talk to relayURL …
    /// try await running.stop()                   // as SIGTERM would
    /// ```
    ///
    /// - Returns: The running relay: its ``RunningRelay/port``, and ``RunningRelay/stop()``.
    /// - Throws: What kept it from listening: the store's preparation (a migration), or the
    ///   server's (an address in use); the store is closed then.
    public func start() async throws -> RunningRelay {
        do { try await prepareStore() } catch {
            await store.close()
            throw error
        }
        let (ports, continuation) = AsyncStream.makeStream(of: Int.self)
        let group = ServiceGroup(configuration: .init(services: [application { continuation.yield($0) }], logger: logger))
        let task = Task {
            defer { continuation.finish() }  // a server that stops, before listening or after, ends the wait
            try await group.run()
        }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next() else {
            do { try await task.value } catch {
                await store.close()
                throw error
            }
            await store.close()
            throw RelayConfigurationError("the relay stopped before it listened")
        }
        return RunningRelay(relay: self, port: port, group: group, task: task)
    }
}
