import Foundation

/// A PostgreSQL cluster the bench starts for its relays (`--postgres`) with the project's
/// `tools/postgres start DIR`, and stops and deletes with `tools/postgres stop DIR` at the end —
/// also when the run fails or is interrupted (``Teardown``).
final class ThrowawayPostgres: Sendable {
    /// The tools/postgres script.
    let script: URL
    /// The folder the script made: the cluster's data, log and wrapper.
    let directory: URL
    /// The application role's URL (`MAILSLOT_TEST_DATABASE_URL`); it holds a password, never printed.
    let databaseURL: String
    /// The cluster's data folder (`MAILSLOT_TEST_PGDATA`), where `postmaster.pid` is.
    let pgdata: String
    private let teardown: UUID

    private init(script: URL, directory: URL, databaseURL: String, pgdata: String, teardown: UUID) {
        self.script = script
        self.directory = directory
        self.databaseURL = databaseURL
        self.pgdata = pgdata
        self.teardown = teardown
    }

    /// `path`, or the project's `tools/postgres`: looked for above this executable (it is built
    /// in the project's `.build`), then in the current folder.
    static func locateScript(_ path: String?) throws -> URL {
        if let path {
            guard FileManager.default.isExecutableFile(atPath: path) else {
                throw BenchFailure.usage("--postgres-script \(path) is not an executable file")
            }
            return URL(fileURLWithPath: path)
        }
        var folders: [URL] = []
        if var folder = Bundle.main.executableURL?.resolvingSymlinksInPath().deletingLastPathComponent() {
            while folder.path != "/" {
                folders.append(folder)
                folder.deleteLastPathComponent()
            }
        }
        folders.append(URL(fileURLWithPath: FileManager.default.currentDirectoryPath))
        for folder in folders {
            let candidate = folder.appendingPathComponent("tools/postgres")
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
        }
        throw BenchFailure.usage("cannot find the project's tools/postgres above this executable or in the current folder; give --postgres-script PATH")
    }

    /// Starts a cluster in a new folder under `MAILSLOT_PG_TMPDIR` (else the temporary folder),
    /// as `tools/postgres run` would, and reads the variables the script prints.
    static func start(script: URL, fsync: Bool) async throws -> ThrowawayPostgres {
        let environment = ProcessInfo.processInfo.environment
        let parent = environment["MAILSLOT_PG_TMPDIR"].flatMap { $0.isEmpty ? nil : URL(fileURLWithPath: $0) }
            ?? FileManager.default.temporaryDirectory
        // The script makes the folder; as root it hands it to the `postgres` user.
        let directory = parent.appendingPathComponent("mailslot-bench-pg-\(UUID().uuidString.prefix(8))")
        // Registered before the start: an interruption during it must still stop what it began.
        let teardown = Teardown.add { Self.runStop(script: script, directory: directory) }
        let output: (status: Int32, stdout: String)
        do {
            output = try await run(script, ["start"] + (fsync ? [] : ["--no-fsync"]) + [directory.path])
        } catch {
            Self.runStop(script: script, directory: directory)
            Teardown.remove(teardown)
            throw error
        }
        let exports = parseExports(output.stdout)
        guard output.status == 0, let url = exports["MAILSLOT_TEST_DATABASE_URL"], let pgdata = exports["MAILSLOT_TEST_PGDATA"] else {
            Self.runStop(script: script, directory: directory)
            Teardown.remove(teardown)
            throw BenchFailure.unreachable("\(script.path) start did not start a PostgreSQL cluster (exit \(output.status); its messages are above)")
        }
        return ThrowawayPostgres(script: script, directory: directory, databaseURL: url, pgdata: pgdata, teardown: teardown)
    }

    /// Stops the cluster and deletes its folder.
    func stop() async {
        let script = self.script, directory = self.directory
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                Self.runStop(script: script, directory: directory)
                continuation.resume()
            }
        }
        Teardown.remove(teardown)
    }

    /// The `export NAME='value'` lines the script prints, as a dictionary.
    static func parseExports(_ text: String) -> [String: String] {
        var values: [String: String] = [:]
        for line in text.split(separator: "\n") where line.hasPrefix("export ") {
            let assignment = line.dropFirst("export ".count)
            guard let equals = assignment.firstIndex(of: "=") else { continue }
            var value = assignment[assignment.index(after: equals)...]
            if value.count >= 2, value.first == "'", value.last == "'" { value = value.dropFirst().dropLast() }
            values[String(assignment[..<equals])] = String(value)
        }
        return values
    }

    /// `tools/postgres stop DIR`, waited for (it bounds its own waits); quiet when there is nothing to stop.
    private static func runStop(script: URL, directory: URL) {
        guard FileManager.default.fileExists(atPath: directory.path) else { return }
        let process = Process()
        process.executableURL = script
        process.arguments = ["stop", directory.path]
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        // Foundation's waitUntilExit() spins a run loop, which a dispatch thread does not run.
        let exited = DispatchSemaphore(value: 0)
        process.terminationHandler = { _ in exited.signal() }
        do { try process.run() } catch {
            Console.error("mailslot-bench: cannot run \(script.path) stop: \(error.localizedDescription); the cluster in \(directory.path) may still run")
            return
        }
        exited.wait()
        if process.terminationStatus != 0 {
            Console.error("mailslot-bench: \(script.path) stop \(directory.path) exited \(process.terminationStatus)")
        }
    }

    /// Runs the script with its stderr on ours (what it says goes to the user) and returns its
    /// stdout once it has exited; the reading and waiting happen on a dispatch thread, not in the
    /// concurrency pool. With posix_spawn, not Foundation's Process: Process learns that its child
    /// ended when a socket the child inherits closes, and the server `start` leaves running
    /// inherits it too, so Process would wait for the server's end.
    private static func run(_ script: URL, _ arguments: [String]) async throws -> (status: Int32, stdout: String) {
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else { throw BenchFailure.failed("cannot make a pipe to run \(script.path)") }
        let (readEnd, writeEnd) = (ends[0], ends[1])
        // Neither end for anything else this process starts (the dup2 below gives the child its own).
        _ = fcntl(readEnd, F_SETFD, FD_CLOEXEC)
        _ = fcntl(writeEnd, F_SETFD, FD_CLOEXEC)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, writeEnd, 1)
        let argv: [UnsafeMutablePointer<CChar>?] = ([script.path] + arguments).map { strdup($0) } + [nil]
        defer { for argument in argv { free(argument) } }
        var child: pid_t = 0
        let spawned = posix_spawn(&child, script.path, &actions, nil, argv, environ)
        let pid = child
        close(writeEnd)
        guard spawned == 0 else {
            close(readEnd)
            throw BenchFailure.unreachable("cannot run \(script.path): \(String(cString: strerror(spawned)))")
        }
        return await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                var output: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 4096)
                while true {
                    let count = read(readEnd, &buffer, buffer.count)
                    if count > 0 { output += buffer[0..<count] } else if count == 0 || errno != EINTR { break }
                }
                close(readEnd)
                var status: Int32 = 0
                while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
                // The exit code when it exited (not killed by a signal); -1 otherwise.
                let code = status & 0x7f == 0 ? (status >> 8) & 0xff : -1
                continuation.resume(returning: (code, String(decoding: output, as: UTF8.self)))
            }
        }
    }
}
