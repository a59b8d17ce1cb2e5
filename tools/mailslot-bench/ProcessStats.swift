import Foundation

/// What the kernel says about a process (Linux `/proc`), and about the machine. Nil wherever the
/// file is missing (another OS, or the process is gone).
enum ProcessStats {
    /// User plus system CPU time of `pid`, in seconds (`/proc/PID/stat` fields 14 and 15); with
    /// `includingReapedChildren`, plus that of the children it has waited for (fields 16 and 17).
    static func cpuSeconds(pid: Int32, includingReapedChildren: Bool = false) -> Double? {
        guard let fields = statFields(pid), fields.count > 14 else { return nil }
        let used = (includingReapedChildren ? fields[11...14] : fields[11...12]).compactMap { Double($0) }
        guard used.count == (includingReapedChildren ? 4 : 2) else { return nil }
        return used.reduce(0, +) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// The processes whose parent is `parent` (field 4 of every `/proc/PID/stat`).
    static func children(of parent: Int32) -> [Int32] {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return [] }
        return entries.compactMap { Int32($0) }.filter { pid in
            statFields(pid).flatMap { $0.count > 1 ? Int32($0[1]) : nil } == parent
        }
    }

    /// The proportional set size of `pid` (`Pss` in `smaps_rollup`: shared pages divided among
    /// the processes that map them), in bytes.
    static func proportionalBytes(pid: Int32) -> Int? { field("Pss:", in: "/proc/\(pid)/smaps_rollup") }

    /// The fields of `/proc/PID/stat` after "pid (comm)": field 3 (state) first. The command name
    /// may hold spaces and parentheses, so the fields start after its last ")".
    private static func statFields(_ pid: Int32) -> [Substring]? {
        guard let text = read("/proc/\(pid)/stat"), let close = text.lastIndex(of: ")") else { return nil }
        return text[text.index(after: close)...].split(separator: " ")
    }

    /// The resident set size of `pid` now (`VmRSS`), in bytes.
    static func residentBytes(pid: Int32) -> Int? { statusField("VmRSS:", pid: pid) }

    /// The peak resident set size of `pid` over its life (`VmHWM`), in bytes.
    static func peakResidentBytes(pid: Int32) -> Int? { statusField("VmHWM:", pid: pid) }

    /// The CPU time the calling thread has used, in nanoseconds: read before and after a
    /// synchronous piece of work (one seal, one open), it is that work's CPU cost alone, whatever
    /// else the process's other threads do meanwhile.
    static func threadCPUNanoseconds() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }

    /// This process's own CPU time (user plus system), in seconds.
    static func ownCPUSeconds() -> Double {
        var usage = rusage()
        #if canImport(Glibc)
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        #else
        getrusage(RUSAGE_SELF, &usage)
        #endif
        func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
        return seconds(usage.ru_utime) + seconds(usage.ru_stime)
    }

    /// Raises the open-file limit to its hard limit, so thousands of sockets fit; a relay this
    /// process starts inherits it. Returns the limit now in force.
    @discardableResult
    static func raiseFileLimit() -> UInt64 {
        var limit = rlimit()
        #if canImport(Glibc)
        let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        #else
        let resource = RLIMIT_NOFILE
        #endif
        guard getrlimit(resource, &limit) == 0 else { return 0 }
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max
            _ = setrlimit(resource, &limit)
            _ = getrlimit(resource, &limit)
        }
        return UInt64(limit.rlim_cur)
    }

    /// The machine the numbers came from: CPU model and count, memory, kernel.
    static func machine() -> [(String, String)] {
        var facts: [(String, String)] = []
        if let cpuinfo = read("/proc/cpuinfo") {
            let lines = cpuinfo.split(separator: "\n")
            if let model = lines.first(where: { $0.hasPrefix("model name") })?.split(separator: ":", maxSplits: 1).last {
                facts.append(("cpu", model.trimmingCharacters(in: .whitespaces)))
            }
            facts.append(("cpu_threads", "\(lines.filter { $0.hasPrefix("processor") }.count)"))
        }
        facts.append(("cores_online", "\(ProcessInfo.processInfo.activeProcessorCount)"))
        if let meminfo = read("/proc/meminfo"),
           let total = meminfo.split(separator: "\n").first(where: { $0.hasPrefix("MemTotal:") }) {
            facts.append(("memory", total.dropFirst("MemTotal:".count).trimmingCharacters(in: .whitespaces)))
        }
        if let kernel = read("/proc/sys/kernel/osrelease") { facts.append(("kernel", kernel.trimmingCharacters(in: .whitespacesAndNewlines))) }
        if let load = read("/proc/loadavg") {
            facts.append(("loadavg_at_end", load.split(separator: " ").prefix(3).joined(separator: " ")))
        }
        return facts
    }

    private static func statusField(_ name: String, pid: Int32) -> Int? { field(name, in: "/proc/\(pid)/status") }

    /// A `Name:   12345 kB` line of a `/proc` file, in bytes.
    private static func field(_ name: String, in path: String) -> Int? {
        guard let text = read(path),
              let line = text.split(separator: "\n").first(where: { $0.hasPrefix(name) }) else { return nil }
        // "VmRSS:	   12345 kB"
        let number = line.dropFirst(name.count).split(whereSeparator: { $0 == " " || $0 == "\t" }).first
        return number.flatMap { Int($0) }.map { $0 * 1024 }
    }

    private static func read(_ path: String) -> String? {
        // /proc files report a size of 0: read until the end rather than trusting the size.
        guard let handle = FileHandle(forReadingAtPath: path) else { return nil }
        defer { try? handle.close() }
        guard let data = try? handle.readToEnd() else { return nil }
        return String(decoding: data, as: UTF8.self)
    }
}
