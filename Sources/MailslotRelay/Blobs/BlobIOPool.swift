import NIOPosix
#if canImport(Glibc)
import Glibc
#endif

/// The threads that do the heavy work of blob transfers — hashing part bodies, writing them,
/// `fdatasync`, reading ranges for downloads — apart from the threads ordinary messages need
/// (issue 27: message p99 beside large transfers; docs/design/attachments.md §3.1).
///
/// Messages run on the NIO event loops and the Swift cooperative pool, one thread per core
/// each. Hashing a part's bytes in the request's task held a cooperative thread for every body
/// buffer, and the blocking calls shared ``NIOThreadPool/singleton`` with everything else; a
/// message queued behind them. Here the transfers get a pool of their own: a few threads, each
/// running at a lower CPU priority (``niceness``) while it works, so that on a busy machine the
/// kernel runs a message's thread first and a transfer takes what is left. Transfers are not
/// starved: a niced thread still gets its share when the CPU is contended, and all of it when not.
///
/// Bounded: each transfer has at most one job here at a time (``PartStream``, ``FileBlobStorage``
/// `read`), and transfers are bounded by ``TransferLimiter`` and the connection limit.
final class BlobIOPool: Sendable {
    /// The relay's pool, started on first use and never shut down (as NIO's singletons).
    static let shared = BlobIOPool(threads: 4, niceness: 10)

    /// The nice value (0 to 19) each thread takes while it runs a job: 10 weighs ~1/10 of a
    /// default thread in the kernel's share. Raising one's own nice value needs no privilege.
    let niceness: Int32
    private let pool: NIOThreadPool

    /// A started pool of `threads` threads that run at `niceness`. Four threads by default: a
    /// thread waits in `fdatasync` for a part's bytes to reach the disk, and the others go on
    /// hashing meanwhile.
    init(threads: Int, niceness: Int32) {
        precondition(threads > 0 && (0...19).contains(niceness), "BlobIOPool: threads > 0, niceness 0...19")
        self.niceness = niceness
        pool = NIOThreadPool(numberOfThreads: threads)
        pool.start()
    }

    /// Runs blocking `body` on one of the pool's threads, at the pool's priority.
    func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await pool.runIfActive { [niceness] in
            Self.lowerPriority(to: niceness)
            return try body()
        }
    }

    /// Stops the threads once their jobs are done (tests; the shared pool lives with the process).
    func shutdown() async throws {
        try await pool.shutdownGracefully()
    }

    /// The calling thread's nice value. On Linux the nice value belongs to a thread, and
    /// `PRIO_PROCESS` with id 0 names the calling thread (setpriority(2), "NOTES").
    static func niceness() -> Int32 {
        getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
    }

    /// Sets the calling thread's nice value to `niceness` unless it is already that or higher.
    /// A failure (a sandbox refusing the call) leaves the thread as it was: only speed is lost.
    private static func lowerPriority(to niceness: Int32) {
        guard Self.niceness() < niceness else { return }
        _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, niceness)
    }
}
