import Foundation
import MailslotTestSupport
import Testing

/// Runs the built `mailslot-bench` with `arguments` (which include `--json`) and, if given, these
/// variables added to the environment; expects it to exit 0, and returns its summary: the JSON
/// object on the last line of stdout.
func benchSummary(_ arguments: [String], environment: [String: String] = [:]) async throws -> [String: Any] {
    let result = try await ProcessRunner.run(ProcessRunner.builtProduct("mailslot-bench"), arguments,
                                             environment: environment.isEmpty ? nil : ProcessInfo.processInfo.environment.merging(environment) { $1 })
    #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
    let summary = try #require(result.stdout.split(separator: "\n").last.map { Data($0.utf8) })
    let json = try #require(try JSONSerialization.jsonObject(with: summary) as? [String: Any])
    // Whatever the run, these must hold: the bench fails a run itself otherwise.
    #expect(json["lost"] as? Int == 0)
    #expect(json["duplicated"] as? Int == 0)
    #expect(json["relay_remaining"] as? Int == 0)
    return json
}
