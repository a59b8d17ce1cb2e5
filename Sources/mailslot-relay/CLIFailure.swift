import ArgumentParser
import Foundation

/// A failure the user can act on: a message for stderr and a documented exit code (sysexits).
struct CLIFailure: Error {
    let message: String
    let exitCode: ExitCode

    static func usage(_ message: String) -> CLIFailure { CLIFailure(message: message, exitCode: ExitCode(64)) }
    static func dataError(_ message: String) -> CLIFailure { CLIFailure(message: message, exitCode: ExitCode(65)) }
    static func noInput(_ message: String) -> CLIFailure { CLIFailure(message: message, exitCode: ExitCode(66)) }
    static func cannotCreate(_ message: String) -> CLIFailure { CLIFailure(message: message, exitCode: ExitCode(73)) }
    static func noPermission(_ message: String) -> CLIFailure { CLIFailure(message: message, exitCode: ExitCode(77)) }
}

extension ParsableCommand {
    /// Runs `body`, turning a ``CLIFailure`` into its message on stderr and its exit code.
    func reportingFailures(_ body: () throws -> Void) throws {
        do {
            try body()
        } catch let failure as CLIFailure {
            FileHandle.standardError.write(Data("mailslot-relay: \(failure.message)\n".utf8))
            throw failure.exitCode
        }
    }
}
