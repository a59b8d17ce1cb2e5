import Foundation
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The data folder's free space, as the relay's writes see it: a full disk is a state the relay
/// reports and survives, not a stream of `internal` errors.
///
/// Two defences, in this order:
/// - a watermark: creates are refused while the file system has less than `minFreeBytes` free,
///   so that acks, unsends, sweeps and sign-ins still have room after the last create;
/// - a reserve: a file of `reserveBytes` kept in the data folder. When a write still finds the
///   disk full (something else filled it), the reserve is deleted and the write tried again,
///   so that erasing — which needs room in the WAL for the zeroed pages — can always run. The
///   reserve comes back once free space is above the watermark plus the reserve again.
///
/// While a write has failed for lack of space and space has not come back, ``isFull`` is true:
/// `/readyz` answers 503 and creates `507 storage_full`.
final class DiskSpace: Sendable {
    /// How free space is read: bytes available to the relay's user at `path`, nil if unknown.
    typealias Probe = @Sendable (_ path: String) -> Int64?

    let directory: String
    let minFreeBytes: Int64
    let reserveBytes: Int64
    private let probe: Probe
    private let logger: Logger
    private let state: Mutex<State>

    private struct State {
        /// Free bytes at the last look, and when that was.
        var free: Int64?
        var checkedAt: ContinuousClock.Instant
        /// A write failed for lack of space, and space has not come back since.
        var full = false
    }

    /// Free space is read again at most this often: a create must not cost a system call.
    static let recheckInterval: Duration = .milliseconds(250)

    /// Watches `directory`; creates the reserve there if it is missing.
    init(directory: String, minFreeBytes: Int64, reserveBytes: Int64, probe: @escaping Probe = DiskSpace.available, logger: Logger) {
        self.directory = directory
        self.minFreeBytes = minFreeBytes
        self.reserveBytes = reserveBytes
        self.probe = probe
        self.logger = logger
        state = Mutex(State(free: probe(directory), checkedAt: .now))
        restoreReserve()
    }

    /// The reserve file's path.
    var reservePath: String { (directory as NSString).appendingPathComponent("relay.reserve") }

    /// Whether a new message may be stored now: space above the watermark, and no write has
    /// failed for lack of space since space last came back.
    func admitsCreates() -> Bool {
        let (free, full) = current()
        guard !full else { return false }
        guard let free else { return true }  // unknown (no statvfs): let SQLite say
        return free >= minFreeBytes
    }

    /// Whether the relay is short of space (for `/readyz`): below the watermark, or a write failed.
    var isShort: Bool { !admitsCreates() }

    /// The free bytes at the latest reading (at most ``recheckInterval`` old), if known.
    var freeBytes: Int64? { current().free }

    /// A write failed with SQLITE_FULL. Releases the reserve (true if there was one to release,
    /// so the write is worth one more try).
    func writeFailedForSpace() -> Bool {
        state.withLock { $0.full = true; $0.checkedAt = .now - Self.recheckInterval }
        let released = (try? FileManager.default.removeItem(atPath: reservePath)) != nil
        logger.error("the data folder's disk is full; new messages are refused until space is freed",
                     metadata: ["reserve_released": "\(released)"])
        return released
    }

    /// The free space, read again when the last reading is old; clears `full` (and restores the
    /// reserve) when the space is back above the watermark plus the reserve.
    private func current() -> (free: Int64?, full: Bool) {
        let now = ContinuousClock.now
        let stale = state.withLock { state -> Bool in now - state.checkedAt >= Self.recheckInterval }
        guard stale else { return state.withLock { ($0.free, $0.full) } }
        let free = probe(directory)
        let (recovered, full) = state.withLock { state -> (Bool, Bool) in
            state.free = free
            state.checkedAt = now
            guard state.full, let free, free >= minFreeBytes + reserveBytes else { return (false, state.full) }
            state.full = false
            return (true, false)
        }
        if recovered { logger.notice("disk space is back; new messages are accepted again") }
        // Also a reserve missing for another reason (deleted, or no room for it at start).
        if !full, let free, free >= minFreeBytes + reserveBytes { restoreReserve() }
        return state.withLock { ($0.free, $0.full) }
    }

    /// Creates the reserve file if it is missing (callers check that there is room for it).
    private func restoreReserve() {
        guard reserveBytes > 0, !FileManager.default.fileExists(atPath: reservePath) else { return }
        let descriptor = open(reservePath, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { return }
        defer { close(descriptor) }
        // Real blocks, not a hole: a sparse file would free nothing when deleted.
        if posix_fallocate(descriptor, 0, off_t(reserveBytes)) != 0 {
            unlink(reservePath)
            logger.warning("could not create the disk reserve", metadata: ["bytes": "\(reserveBytes)"])
        }
    }

    /// Bytes available to an unprivileged writer on the file system of `path` (statvfs).
    static let available: Probe = { path in
        var info = statvfs()
        guard statvfs(path, &info) == 0 else { return nil }
        return Int64(info.f_bavail) * Int64(info.f_frsize)
    }
}
