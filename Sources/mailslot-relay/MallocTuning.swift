#if canImport(Glibc)
import Glibc
#endif

/// How the relay process asks glibc's allocator to keep freed memory.
enum MallocTuning {
    /// Keeps up to 4 MiB free at the top of each allocator heap instead of glibc's 128 KiB, unless
    /// the operator tuned malloc already (`GLIBC_TUNABLES`, `MALLOC_TRIM_THRESHOLD_`).
    ///
    /// Why: SQLite's writer thread frees a little over 128 KiB after every commit and allocates it
    /// again for the next one. With the default threshold each commit handed those pages back
    /// (`madvise`, a TLB shootdown on every core) and faulted them in again: ~20 % of the writer
    /// thread at 19,000 messages/s, ~3,900 `madvise` calls a second. 4 MiB per heap is the most
    /// this keeps beyond what is in use; 1 MiB already stopped the churn on the bench.
    static func apply(environment: [String: String]) {
        #if canImport(Glibc)
        guard environment["MALLOC_TRIM_THRESHOLD_"] == nil,
              !(environment["GLIBC_TUNABLES"] ?? "").contains("trim_threshold") else { return }
        // Swift's Glibc module leaves out <malloc.h>; mallopt and M_TRIM_THRESHOLD (-1) are
        // glibc's stable ABI.
        typealias Mallopt = @convention(c) (CInt, CInt) -> CInt
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "mallopt") else { return }
        let mallopt = unsafeBitCast(symbol, to: Mallopt.self)
        let trimThreshold: CInt = -1
        _ = mallopt(trimThreshold, 4 << 20)
        #endif
    }
}
