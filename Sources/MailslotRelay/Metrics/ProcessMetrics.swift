import Foundation

/// The relay process's CPU time, memory and open files, read from /proc when scraped, in the
/// names Prometheus client libraries use (`process_*`). Absent figures (no /proc) are left out.
struct ProcessMetrics {
    var cpuSeconds: Double?
    var residentBytes: Int?
    var maxResidentBytes: Int?
    var openFileDescriptors: Int?
    var startTimeSeconds: Double?

    private static let started = Date().timeIntervalSince1970

    /// The figures now.
    static func current() -> ProcessMetrics {
        var metrics = ProcessMetrics(startTimeSeconds: started)
        var usage = rusage()
        if getrusage(RUSAGE_SELF.rawValue, &usage) == 0 {
            func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1_000_000 }
            metrics.cpuSeconds = seconds(usage.ru_utime) + seconds(usage.ru_stime)
            metrics.maxResidentBytes = Int(usage.ru_maxrss) * 1024
        }
        if let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) {
            for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
                metrics.residentBytes = line.split(separator: " ").dropFirst().first.flatMap { Int($0) }.map { $0 * 1024 }
            }
        }
        metrics.openFileDescriptors = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")).map(\.count)
        return metrics
    }

    /// Prometheus text lines for the figures that are known.
    func exposition() -> String {
        var text = ""
        func add(_ name: String, _ type: String, _ value: (some CustomStringConvertible)?) {
            guard let value else { return }
            text += "# TYPE \(name) \(type)\n\(name) \(value)\n"
        }
        add("process_cpu_seconds_total", "counter", cpuSeconds)
        add("process_resident_memory_bytes", "gauge", residentBytes)
        add("process_max_resident_memory_bytes", "gauge", maxResidentBytes)
        add("process_open_fds", "gauge", openFileDescriptors)
        add("process_start_time_seconds", "gauge", startTimeSeconds)
        return text
    }
}
