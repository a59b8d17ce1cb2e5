import Foundation

/// What a finished process printed, and how it ended.
public struct ProcessResult: Sendable {
    public let status: Int32
    public let stdout: String
    public let stderr: String
}

/// Runs the project's own executables from tests, as a person at a terminal would.
public enum ProcessRunner {
    /// An executable built beside the test runner (SwiftPM puts both in one folder).
    public static func builtProduct(_ name: String) -> URL {
        let folder = Bundle.main.executableURL?.deletingLastPathComponent()
            ?? URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        return folder.appendingPathComponent(name)
    }

    /// Runs `executable` to its end. Output goes to temporary files and the process's end resumes
    /// the caller, so no thread of the Swift concurrency pool is blocked meanwhile — in-process
    /// relays of parallel tests need those threads to answer.
    ///
    /// Started with `posix_spawn`, not Foundation's `Process`: on Linux, `Process.run()` (Swift
    /// 6.3.1) reads past a buffer while it lists `/proc/self/fd`, and crashes now and then in a
    /// test process holding the thousand or more descriptors of parallel test relays
    /// (swiftlang/swift-corelibs-foundation#5472).
    public static func run(_ executable: URL, _ arguments: [String], environment: [String: String]? = nil,
                           stdin: String? = nil) async throws -> ProcessResult {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("mailslot-run-\(UUID().uuidString)").path
        defer { for name in ["out", "err", "in"] { try? FileManager.default.removeItem(atPath: "\(base).\(name)") } }
        try Data((stdin ?? "").utf8).write(to: URL(fileURLWithPath: "\(base).in"))
        let pid = try spawn(executable.path, arguments, environment: environment,
                            stdin: "\(base).in", stdout: "\(base).out", stderr: "\(base).err")
        let status: Int32 = await withCheckedContinuation { continuation in
            // waitpid blocks: on a thread of its own, never one of the concurrency pool's.
            Thread.detachNewThread { continuation.resume(returning: waitForExit(pid)) }
        }
        func read(_ name: String) -> String {
            String(decoding: FileManager.default.contents(atPath: "\(base).\(name)") ?? Data(), as: UTF8.self)
        }
        return ProcessResult(status: status, stdout: read("out"), stderr: read("err"))
    }

    /// Starts `path` with `arguments`, its standard streams opened on the three files, every other
    /// descriptor of this process closed in the child; `environment` nil inherits this one's.
    private static func spawn(_ path: String, _ arguments: [String], environment: [String: String]?,
                              stdin: String, stdout: String, stderr: String) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, stdin, O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, stdout, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, stderr, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        // glibc 2.34 and later; Swift's Glibc module does not declare it, hence the lookup.
        if let closeFrom = closeFromAction { _ = closeFrom(&actions, 3) }
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { $0.map { strdup("\($0.key)=\($0.value)") } + [nil] }
        defer {
            argv.forEach { free($0) }
            envp?.forEach { free($0) }
        }
        var pid: pid_t = 0
        let result = envp.map { posix_spawn(&pid, path, &actions, nil, argv, $0) } ?? posix_spawn(&pid, path, &actions, nil, argv, environ)
        guard result == 0 else { throw POSIXError(POSIXErrorCode(rawValue: result) ?? .EINVAL) }
        return pid
    }

    /// The exit status of `pid` (128 + the signal's number when a signal ended it, as a shell says).
    private static func waitForExit(_ pid: pid_t) -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : 128 + signal
    }

    /// `posix_spawn_file_actions_addclosefrom_np`, where the C library has it.
    private static let closeFromAction: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32)? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32).self)
    }()
}
