import Logging
import PostgresNIO
import Synchronization

/// The PostgreSQL store's connections: a `PostgresClient` pool whose every use is bounded in time
/// and whose failures to reach the server become ``StoreFailure/unavailable``.
///
/// While the server is down, the pool keeps retrying in the background and queues what asks for
/// a connection — for up to a minute before it fails them. A relay must answer sooner: a use
/// that has no connection within ``leaseTimeout`` gives up, and after a failure to reach the
/// server, uses fail at once for ``failFastInterval`` before one is let through to try again. So
/// during an outage every request is answered `503 unavailable` within seconds, and when the
/// server returns the next use finds it (the pool reconnects by itself): nothing to restart.
///
/// A wait given up is not always an outage: under load every connection may be busy for longer
/// than ``leaseTimeout`` while the server answers them all. A wait given up while some other use
/// got a connection, or finished its work on one, since it began (``Outcome/busy``) fails that
/// one use with ``StoreFailure/busy`` and nothing else; only one during which no use got a
/// connection and none finished (``Outcome/unreachable``) means the server is out of reach, and
/// starts the fail-fast interval. (Every connection held for the whole wait by a statement still
/// running is the one case of load that still reads as an outage: nothing then tells the two apart.)
///
/// One watchdog task per pool gives up the waits that last too long, rather than a timer per use:
/// a use is two or three per message, and a timer task costs its start, its sleep and its
/// cancellation — thread wake-ups that were a good part of a relay's CPU at a thousand messages a
/// second.
final class PostgresPool: Sendable {
    let client: PostgresClient
    private let logger: Logger
    private let running: Task<Void, Never>
    private let watchdog: Task<Void, Never>
    /// When the last failure to reach the server happened, if it is recent.
    private let lastFailure = Mutex<ContinuousClock.Instant?>(nil)
    /// When a use last got a connection, and when one last finished with it (``Leases``).
    private let leases = Leases()
    /// The uses under way, by number: the watchdog gives up those still without a connection
    /// after ``leaseTimeout``.
    private let uses = Uses()
    /// How often the watchdog looks: a wait is given up between ``leaseTimeout`` and this much later.
    static let watchdogInterval: Duration = .milliseconds(250)

    /// How long a use waits for a connection before it is answered ``StoreFailure/unavailable``.
    static let leaseTimeout: Duration = .seconds(3)
    /// How long after a failure to reach the server uses fail without trying.
    static let failFastInterval: Duration = .seconds(1)

    /// A pool of at most `maximumConnections`, running until ``close()``; its connections show
    /// as `name` in `pg_stat_activity.application_name`.
    init(configuration: PostgresClient.Configuration, maximumConnections: Int, name: String, logger: Logger) {
        var configuration = configuration
        configuration.options.maximumConnections = maximumConnections
        configuration.options.connectTimeout = .seconds(3)
        configuration.options.additionalStartupParameters.append(("application_name", name))
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        self.client = client
        self.logger = logger
        running = Task { await client.run() }
        watchdog = Task { [uses] in
            while (try? await Task.sleep(for: Self.watchdogInterval)) != nil {
                let now = ContinuousClock.now
                let late = uses.state.withLock { uses in
                    uses.waiting.values.filter { use in
                        use.since.duration(to: now) >= Self.leaseTimeout && !use.lease.leased.load(ordering: .sequentiallyConsistent)
                    }
                }
                for use in late {
                    use.lease.gaveUp.store(true, ordering: .sequentiallyConsistent)
                    use.cancel()
                }
            }
        }
    }

    /// Stops the pool: connections close; later uses fail.
    func close() async {
        watchdog.cancel()
        running.cancel()
        await running.value
        await watchdog.value
    }

    /// Whether the server was unreachable moments ago (uses fail at once meanwhile).
    var recentlyFailed: Bool {
        lastFailure.withLock { last in
            guard let failed = last else { return false }
            if failed.duration(to: .now) < Self.failFastInterval { return true }
            last = nil
            return false
        }
    }

    /// Runs `body` on a pooled connection. Throws ``StoreFailure/unavailable`` when no connection
    /// comes within ``leaseTimeout`` or the connection fails under `body`; `body`'s own errors
    /// (a refusal, a constraint) as they are.
    func withConnection<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        if recentlyFailed { throw StoreFailure.unavailable }
        let lease = Lease()
        let since = leases.now
        let work = Task { [client, leases] () async throws -> T in
            try await client.withConnection { (connection: PostgresConnection) async throws -> T in
                lease.leased.store(true, ordering: .sequentiallyConsistent)
                leases.last.store(leases.now, ordering: .relaxed)
                let value = try await body(connection)
                // The server answered all of `body`: proof of life for the uses waiting meanwhile.
                leases.returned.store(leases.now, ordering: .relaxed)
                return value
            }
        }
        // Only the wait for a connection is given up (by the watchdog): a transaction under way is
        // let finish (or fail with its connection), so that no answer claims less than what was committed.
        let number = uses.state.withLock { uses in
            defer { uses.next += 1 }
            uses.waiting[uses.next] = Use(since: .now, lease: lease, cancel: { work.cancel() })
            return uses.next
        }
        defer { _ = uses.state.withLock { $0.waiting.removeValue(forKey: number) } }
        do {
            // The caller's cancellation reaches `body` as if it ran in the caller's task.
            return try await withTaskCancellationHandler { try await work.value } onCancel: { work.cancel() }
        } catch where Self.outcome(gaveUp: lease.gaveUp.load(ordering: .sequentiallyConsistent), error: error, waitedSince: since,
                                   lastLeased: leases.last.load(ordering: .relaxed),
                                   lastReturned: leases.returned.load(ordering: .relaxed)) == .busy {
            throw StoreFailure.busy
        } catch where lease.gaveUp.load(ordering: .sequentiallyConsistent) || Self.isUnreachable(error) {
            let first = lastFailure.withLock { last in defer { last = .now }; return last == nil }
            if first {
                // Once per outage, not once per request. The code and SQLSTATE only: no statement, no value.
                logger.warning("cannot reach the database; answering 503 unavailable until it is back", metadata: [
                    "error.type": "\(type(of: error))",
                    "sqlstate": "\((error as? PSQLError)?.serverInfo?[.sqlState] ?? "-")",
                ])
            }
            throw StoreFailure.unavailable
        }
    }

    /// What a failed use says of the server.
    enum Outcome: Equatable {
        /// The server is out of reach: fail fast for a while.
        case unreachable
        /// Every connection was busy: this use fails, the next ones try.
        case busy
        /// The use's own error (a statement's failure, a refusal): passed on as it is.
        case own
    }

    /// Classifies a use's failure, a pure function of the pool's stamps: a wait for a connection
    /// given up (`gaveUp`) while another use got one, or finished its work on one, after this one
    /// began to wait (`lastLeased` or `lastReturned` ≥ `waitedSince`, all nanoseconds on one
    /// clock) is load — the server answers; a wait given up otherwise, or an error that says the
    /// server could not be reached (``isUnreachable(_:)``), is an outage; anything else is the
    /// use's own.
    static func outcome(gaveUp: Bool, error: any Error, waitedSince: Int64, lastLeased: Int64, lastReturned: Int64) -> Outcome {
        if gaveUp { return max(lastLeased, lastReturned) >= waitedSince ? .busy : .unreachable }
        return isUnreachable(error) ? .unreachable : .own
    }

    /// When a use last got a connection (`last`) and when one last finished its work on one
    /// (`returned`), in nanoseconds after the pool began (`Int64.min`: never). Atomics, not a
    /// lock: every use writes them.
    private final class Leases: Sendable {
        let last = Atomic<Int64>(.min)
        let returned = Atomic<Int64>(.min)
        private let origin = ContinuousClock.now

        /// Now, in nanoseconds after the pool began.
        var now: Int64 {
            let elapsed = origin.duration(to: .now).components
            return elapsed.seconds * 1_000_000_000 + elapsed.attoseconds / 1_000_000_000
        }
    }

    /// `body`'s result, or `timeoutError()` once `timeout` passed. `body` is then cancelled but not
    /// waited for: a pool's lease, or a query on a connection the network dropped, may take its
    /// time to notice.
    static func within<T: Sendable>(_ timeout: Duration, orThrow timeoutError: @escaping @Sendable () -> any Error,
                                    _ body: @escaping @Sendable () async throws -> T) async throws -> T {
        // A ticket takes the first result only: the work's, or the timer's.
        let outcome = CommitTicket<T>()
        let work = Task {
            do { outcome.resolve(.success(try await body())) } catch { outcome.resolve(.failure(error)) }
        }
        let timer = Task {
            guard (try? await Task.sleep(for: timeout)) != nil else { return }
            outcome.resolve(.failure(timeoutError()))
            work.cancel()
        }
        defer { timer.cancel() }
        return try await outcome.value
    }

    /// One use's progress: whether it got its connection, or gave up waiting for one.
    private final class Lease: Sendable {
        let leased = Atomic<Bool>(false)
        let gaveUp = Atomic<Bool>(false)
    }

    /// The uses under way, by number.
    private final class Uses: Sendable {
        let state = Mutex<(next: UInt64, waiting: [UInt64: Use])>((0, [:]))
    }

    /// A use under way, as the watchdog sees it.
    private struct Use: Sendable {
        let since: ContinuousClock.Instant
        let lease: Lease
        let cancel: @Sendable () -> Void
    }

    /// Whether `error` says the server could not be reached or the connection was lost, rather
    /// than that a statement failed: the pool's own failures, a connection closed or broken, or
    /// the server refusing connections (shutting down, starting, too many clients).
    static func isUnreachable(_ error: any Error) -> Bool {
        switch error {
        case StoreFailure.unavailable: return true
        case let error as PSQLError:
            switch error.code {
            case .connectionError, .serverClosedConnection, .clientClosedConnection, .uncleanShutdown, .poolClosed,
                 .sslUnsupported, .failedToAddSSLHandler:
                return true
            case .server:
                // Class 08: connection exceptions; 57P01–57P03: shut down or not accepting yet; 53300: too many connections.
                guard let state = error.serverInfo?[.sqlState] else { return false }
                return state.hasPrefix("08") || ["57P01", "57P02", "57P03", "53300"].contains(state)
            default: return false
            }
        default:
            // The pool's errors (its circuit breaker tripped, a cancelled wait) have no public type to match.
            return String(reflecting: type(of: error)).contains("ConnectionPoolError")
        }
    }
}
