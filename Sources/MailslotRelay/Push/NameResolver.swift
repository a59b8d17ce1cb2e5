import NIOCore
import NIOPosix
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

// Resolves the names of Web Push endpoints (spec/push.md §4.1 rule 1: at most 2 s). The names
// are the users', so is their DNS: a name server that never answers must cost the relay neither
// more than the timeout per call nor anything else's threads. `getaddrinfo` blocks and cannot be
// cancelled, so it runs on a small thread pool of this resolver's own (never NIO's shared pool,
// where the blob store's file I/O runs), the caller stops waiting at the timeout while the lookup
// finishes on its thread, and lookups still running or queued are bounded: past the bound a
// name fails at once, as a connect failure the scheduler retries later.

/// The resolver of Web Push endpoints' names.
final class NameResolver: Sendable {
    /// A blocking lookup: the addresses `host` resolves to for `port` (empty when none).
    typealias Lookup = @Sendable (_ host: String, _ port: Int) -> [IPAddress]

    /// Threads that run lookups.
    static let defaultThreads = 4
    /// Lookups running or queued at once; past this a name fails at once. The dispatcher makes at
    /// most `--push-concurrency` (≤ 256) calls at once; lookups abandoned at the timeout still
    /// count until their thread is done with them.
    static let defaultMaxOutstanding = 32

    private let pool: NIOThreadPool
    private let lookup: Lookup
    private let timeout: Duration
    private let maxOutstanding: Int
    /// Lookups submitted and not yet finished on their thread.
    private let outstanding = Mutex(0)

    /// A resolver with its own `threads`, giving up on a name after `timeout`.
    init(threads: Int = defaultThreads, timeout: Duration, maxOutstanding: Int = defaultMaxOutstanding,
         lookup: @escaping Lookup = NameResolver.getaddrinfo) {
        pool = NIOThreadPool(numberOfThreads: threads)
        pool.start()
        self.lookup = lookup
        self.timeout = timeout
        self.maxOutstanding = maxOutstanding
    }

    deinit {
        pool.shutdownGracefully { _ in }
    }

    /// Lookups running or queued now.
    var pending: Int { outstanding.withLock { $0 } }

    /// The addresses `host` resolves to, or nil: after the timeout, when too many lookups are
    /// pending, or when the resolver was shut down. Returns by the timeout whatever the lookup does.
    func resolve(_ host: String, port: Int) async -> [IPAddress]? {
        let admitted = outstanding.withLock { count in
            guard count < maxOutstanding else { return false }
            count += 1
            return true
        }
        guard admitted else { return nil }
        let waiter = Mutex<CheckedContinuation<[IPAddress]?, Never>?>(nil)
        let finish: @Sendable ([IPAddress]?) -> Void = { result in
            waiter.withLock { continuation in
                continuation?.resume(returning: result)
                continuation = nil
            }
        }
        return await withCheckedContinuation { continuation in
            waiter.withLock { $0 = continuation }
            let timer = MultiThreadedEventLoopGroup.singleton.any().scheduleTask(in: .milliseconds(timeout.milliseconds)) { finish(nil) }
            pool.submit { [self] state in
                let addresses: [IPAddress]?
                if case .active = state { addresses = lookup(host, port) } else { addresses = nil }
                outstanding.withLock { $0 -= 1 }
                timer.cancel()
                finish(addresses)
            }
        }
    }

    /// Stops the threads once the lookups running end; later names fail at once.
    func shutdown() {
        pool.shutdownGracefully { _ in }
    }

    /// The system resolver (`getaddrinfo`), each address once.
    @Sendable static func getaddrinfo(_ host: String, port: Int) -> [IPAddress] {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_family = AF_UNSPEC
        var result: UnsafeMutablePointer<addrinfo>?
        guard Glibc.getaddrinfo(host, String(port), &hints, &result) == 0, let first = result else { return [] }
        defer { freeaddrinfo(first) }
        var addresses: [IPAddress] = []
        var cursor: UnsafeMutablePointer<addrinfo>? = first
        while let info = cursor {
            if let sockaddr = info.pointee.ai_addr {
                switch Int32(info.pointee.ai_family) {
                case AF_INET:
                    let address = sockaddr.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr.s_addr }
                    if let ip = IPAddress(bytes: withUnsafeBytes(of: address) { Array($0) }) { addresses.append(ip) }
                case AF_INET6:
                    let address = sockaddr.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_addr }
                    if let ip = IPAddress(bytes: withUnsafeBytes(of: address) { Array($0) }) { addresses.append(ip) }
                default: break
                }
            }
            cursor = info.pointee.ai_next
        }
        var seen = Set<IPAddress>()
        return addresses.filter { seen.insert($0).inserted }
    }
}
