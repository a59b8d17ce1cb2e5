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
    public static func run(_ executable: URL, _ arguments: [String], environment: [String: String]? = nil,
                           stdin: String? = nil) async throws -> ProcessResult {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("mailslot-run-\(UUID().uuidString)").path
        defer { for name in ["out", "err", "in"] { try? FileManager.default.removeItem(atPath: "\(base).\(name)") } }
        for name in ["out", "err"] { _ = FileManager.default.createFile(atPath: "\(base).\(name)", contents: nil) }
        try Data((stdin ?? "").utf8).write(to: URL(fileURLWithPath: "\(base).in"))
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        if let environment { process.environment = environment }
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: "\(base).out"))
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: "\(base).err"))
        process.standardInput = try FileHandle(forReadingFrom: URL(fileURLWithPath: "\(base).in"))
        let status: Int32 = try await withCheckedThrowingContinuation { continuation in
            process.terminationHandler = { continuation.resume(returning: $0.terminationStatus) }
            do { try process.run() } catch { continuation.resume(throwing: error) }
        }
        func read(_ name: String) -> String {
            String(decoding: FileManager.default.contents(atPath: "\(base).\(name)") ?? Data(), as: UTF8.self)
        }
        return ProcessResult(status: status, stdout: read("out"), stderr: read("err"))
    }
}
