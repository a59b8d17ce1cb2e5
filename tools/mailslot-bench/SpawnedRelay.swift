import Foundation

/// A `mailslot-relay serve` this bench started: its own temporary data folder, a free loopback
/// port and a fresh issuer key, with limits high enough that the bench is never rate-limited.
/// It can be killed and started again on the same folder and port (the crash test); at the end
/// it is stopped and its folder deleted, also when the bench is interrupted (``Teardown``).
final class SpawnedRelay: Sendable {
    /// The relay executable.
    let binary: URL
    /// The temporary folder: `data/` (the relay's) and `relay.log` (its output).
    let root: URL
    /// The loopback port it listens on, the same across restarts.
    let port: Int
    /// The arguments of `serve`.
    let arguments: [String]
    /// The environment of `serve`: the bench's, with the database URL (if any) in
    /// `MAILSLOT_DATABASE_URL` — never on a command line, which `ps` shows.
    private let environment: [String: String]
    private let process: Locked<Process?>
    /// The clean-up registered with ``Teardown`` while the relay exists.
    private let teardown: UUID

    /// The data folder.
    var dataDirectory: URL { root.appendingPathComponent("data") }
    /// The relay's stdout and stderr.
    var logFile: URL { root.appendingPathComponent("relay.log") }

    /// The relay next to this executable (both come from the same `swift build`), unless `path` is given.
    static func locateBinary(_ path: String?) throws -> URL {
        let url: URL
        if let path {
            url = URL(fileURLWithPath: path)
        } else {
            guard let executable = Bundle.main.executableURL else {
                throw BenchFailure.usage("cannot tell where this executable is; give --relay-binary PATH")
            }
            url = executable.resolvingSymlinksInPath().deletingLastPathComponent().appendingPathComponent("mailslot-relay")
        }
        guard FileManager.default.isExecutableFile(atPath: url.path) else {
            throw BenchFailure.usage("""
                no relay executable at \(url.path): build it next to the bench \
                (swift build -c release --product mailslot-relay, with the same --scratch-path) or give --relay-binary PATH
                """)
        }
        return url
    }

    /// Prepares a relay (folder, port, arguments) without starting it; with `databaseURL`, on that
    /// PostgreSQL database instead of SQLite in its folder.
    init(binary: URL, issuerPublicKey: String, audience: String, durability: String?, maxEnvelopeBytes: Int?,
         databaseURL: String? = nil, extraArguments: [String] = []) throws {
        self.binary = binary
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("mailslot-bench-\(UUID().uuidString.prefix(8))")
        let process = Locked<Process?>(nil)
        self.root = root
        self.process = process
        // Registered before the folder exists, so that an interruption never leaves it behind.
        teardown = Teardown.add {
            if let pid = process.withLock({ $0?.processIdentifier }) { Foundation.kill(pid, SIGKILL) }
            try? FileManager.default.removeItem(at: root)
        }
        try FileManager.default.createDirectory(at: root.appendingPathComponent("data"), withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        port = try Self.freePort()
        var arguments = [
            "serve",
            "--listen", "127.0.0.1:\(port)",
            "--data", root.appendingPathComponent("data").path,
            "--issuer-public-key", issuerPublicKey,
            "--audience", audience,
            // Far above what the bench offers, so the relay's own work is what is measured.
            "--create-rate", "10000000",
            "--create-burst", "10000000",
            "--max-pending", "10000000",
            "--max-connections", "1000000",
            "--session-ttl", "86400",
            "--log-level", "warning",
        ]
        if let durability { arguments += ["--durability", durability] }
        if let maxEnvelopeBytes { arguments += ["--max-envelope-bytes", "\(maxEnvelopeBytes)"] }
        self.arguments = arguments + extraArguments
        // The bench's own MAILSLOT_DATABASE_URL never leaks in: SQLite unless a database is given.
        var environment = ProcessInfo.processInfo.environment
        environment["MAILSLOT_DATABASE_URL"] = databaseURL
        self.environment = environment
    }

    /// The running process's id, if it runs.
    var pid: Int32? { process.withLock { $0.map(\.processIdentifier) } }

    /// Starts the relay (again): a new process on the same folder and port.
    func start() throws {
        if !FileManager.default.fileExists(atPath: logFile.path) {
            _ = FileManager.default.createFile(atPath: logFile.path, contents: nil, attributes: [.posixPermissions: 0o600])
        }
        guard let log = FileHandle(forWritingAtPath: logFile.path) else {
            throw BenchFailure.failed("cannot write the relay's log \(logFile.path)")
        }
        log.seekToEndOfFile()
        let started = Process()
        started.executableURL = binary
        started.arguments = arguments
        started.environment = environment
        started.standardOutput = log
        started.standardError = log
        started.standardInput = FileHandle.nullDevice
        do { try started.run() } catch {
            throw BenchFailure.unreachable("cannot start \(binary.path): \(error.localizedDescription)")
        }
        try? log.close()
        process.withLock { $0 = started }
    }

    /// Waits until `GET /healthz` answers, failing early if the process exits.
    func waitHealthy(_ http: RelayHTTP, timeout: Double = 20) async throws {
        let deadline = Monotonic.now() + UInt64(timeout * 1e9)
        while Monotonic.now() < deadline {
            if await http.healthy() { return }
            if let running = process.withLock({ $0?.isRunning }), !running {
                throw BenchFailure.unreachable("the relay exited during start-up:\n\(logTail())")
            }
            try await Task.sleep(nanoseconds: 50_000_000)
        }
        throw BenchFailure.unreachable("the relay did not answer /healthz within \(Int(timeout)) s:\n\(logTail())")
    }

    /// `kill -9`: no shutdown, no checkpoint. Waits (bounded) until the process is gone.
    func kill() async {
        guard let running = process.withLock({ $0 }) else { return }
        Foundation.kill(running.processIdentifier, SIGKILL)
        _ = await waitUntil(seconds: 10) { !running.isRunning }
        process.withLock { $0 = nil }
    }

    /// SIGTERM (the relay shuts down cleanly), then SIGKILL if it is still there after 10 s.
    func stop() async {
        guard let running = process.withLock({ $0 }) else { return }
        if running.isRunning {
            running.terminate()
            if await !waitUntil(seconds: 10, { !running.isRunning }) {
                Console.error("mailslot-bench: the relay did not stop within 10 s of SIGTERM; killing it")
                Foundation.kill(running.processIdentifier, SIGKILL)
                _ = await waitUntil(seconds: 5) { !running.isRunning }
            }
        }
        process.withLock { $0 = nil }
    }

    /// Deletes the temporary folder (data and log).
    func remove() {
        try? FileManager.default.removeItem(at: root)
        Teardown.remove(teardown)
    }

    /// The last lines of the relay's output, for error messages.
    func logTail(lines: Int = 15) -> String {
        guard let data = FileManager.default.contents(atPath: logFile.path) else { return "(no relay output)" }
        let text = String(decoding: data, as: UTF8.self).split(separator: "\n").suffix(lines).joined(separator: "\n")
        return text.isEmpty ? "(no relay output)" : text
    }

    /// A port nothing listens on now: bind port 0 on loopback and read what the kernel chose.
    private static func freePort() throws -> Int {
        #if canImport(Glibc)
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let descriptor = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard descriptor >= 0 else { throw BenchFailure.failed("cannot open a socket to find a free port") }
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                bind(descriptor, socketAddress, length) == 0 && getsockname(descriptor, socketAddress, &length) == 0
            }
        }
        guard bound else { throw BenchFailure.failed("cannot bind a loopback socket to find a free port") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
