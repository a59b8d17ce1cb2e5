import Foundation
import MailslotRelay
import MailslotTestSupport
import Testing

/// The README's table of `serve` settings is the relay's: a row for each option `serve` has,
/// with the variable and the default of ``RelayConfiguration/settings``; and each flag reaches
/// that table. A row or an option added, removed or changed on one side only fails here.
@Suite struct SettingsTableTests {
    struct Row: Equatable {
        let flag, variable, defaultValue: String
    }

    /// The README's rows: the flag (`--max-pending`), the variable, and the default as written,
    /// without backticks or the explanation in parentheses (`268435456 (256 MiB)`).
    static func readme() throws -> [Row] {
        let table = try MarkdownTable(in: "README.md", header: ["flag", "variable", "default", "meaning"])
        return try table.rows.map { cells in
            let flag = try #require(cells[0].firstMatch(of: /--[a-z-]+/), "no flag in \(cells[0])").output
            let variable = try #require(cells[1].firstMatch(of: /MAILSLOT_[A-Z_]+/), "no variable in \(cells[1])").output
            var value = cells[2].replacingOccurrences(of: "`", with: "")
            if let parenthesis = value.range(of: " (") { value = String(value[..<parenthesis.lowerBound]) }
            return Row(flag: String(flag.dropFirst(2)), variable: String(variable), defaultValue: value)
        }
    }

    /// `serve`'s options, by name, with their help text (from ArgumentParser's description of the command).
    static func serveOptions() async throws -> [String: String] {
        let dump = try await ProcessRunner.run(ProcessRunner.builtProduct("mailslot-relay"), ["serve", "--experimental-dump-help"])
        let object = try #require(try JSONSerialization.jsonObject(with: Data(dump.stdout.utf8)) as? [String: Any])
        let arguments = try #require((object["command"] as? [String: Any])?["arguments"] as? [[String: Any]])
        var options: [String: String] = [:]
        for argument in arguments {
            for case let name as [String: Any] in argument["names"] as? [Any] ?? [] where name["kind"] as? String == "long" {
                options[name["name"] as? String ?? ""] = argument["abstract"] as? String ?? ""
            }
        }
        options["help"] = nil
        return options
    }

    @Test func theREADMEListsEveryOptionOfServeOnce() async throws {
        let rows = try Self.readme()
        let options = try await Self.serveOptions()
        #expect(Set(rows.map(\.flag)).count == rows.count, "a flag with two rows")
        #expect(Set(rows.map(\.flag)) == Set(options.keys),
                "only in the README: \(Set(rows.map(\.flag)).subtracting(options.keys).sorted()); only in serve: \(Set(options.keys).subtracting(rows.map(\.flag)).sorted())")
        // The help of each option names the README's variable, and the README's default when it gives one.
        for row in rows {
            let help = options[row.flag] ?? ""
            #expect(help.contains("[\(row.variable)"), "--\(row.flag)'s help does not name \(row.variable): \(help)")
            if let given = help.firstMatch(of: /\(default ([^)]+)\)/)?.output.1 {
                #expect(String(given) == row.defaultValue, "--\(row.flag): the help says \(given), the README \(row.defaultValue)")
            }
        }
    }

    @Test func eachRowIsItsSettingsVariableAndDefault() throws {
        let rows = try Self.readme()
        let defaults = RelayConfiguration()
        for setting in RelayConfiguration.settings {
            let row = try #require(rows.first { $0.flag == setting.flag }, "--\(setting.flag) has no row in the README")
            #expect(row.variable == setting.variable, "--\(setting.flag)")
            // Unset by default: the README says what happens instead.
            if let value = setting.value(defaults) {
                #expect(row.defaultValue == value, "--\(setting.flag): the README says \(row.defaultValue), the configuration \(value)")
            } else {
                #expect(["none", "development key"].contains(row.defaultValue), "--\(setting.flag) is unset by default")
            }
        }
        // The one row that is not the configuration's: the log level belongs to `serve` itself.
        let settings = Set(RelayConfiguration.settings.map(\.flag))
        #expect(rows.filter { !settings.contains($0.flag) } == [Row(flag: "log-level", variable: "MAILSLOT_LOG_LEVEL", defaultValue: "info")])
    }

    /// `serve` maps every flag to its setting: given a value the setting refuses, it refuses to
    /// start (exit 64) with that setting's sentence. Each run also carries a contradiction of its
    /// own, so that a flag `serve` dropped refuses too (with another sentence) instead of serving.
    @Test func everyFlagOfServeReachesItsSetting() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("mailslot-settings-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let invalid: [String: (text: String, says: String)] = [
            "data": ("", "the data folder must be named"), "audience": ("", "the audience must not be empty"),
            "metrics-token": ("short", "metrics token must be at least 16 characters"),
        ]
        for setting in RelayConfiguration.settings {
            let (text, says) = invalid[setting.flag] ?? ("x", "--\(setting.flag) (\(setting.variable))")
            var arguments = ["serve", "--listen", "127.0.0.1:0", "--data", folder + "/data", "--\(setting.flag)", text]
            switch setting.flag {
            case "metrics-token": break  // refused by the start-up check, which comes last
            case "message-ttl", "max-message-ttl": arguments += ["--session-ttl", "7200", "--refresh-ttl", "3600"]
            default: arguments += ["--message-ttl", "7200", "--max-message-ttl", "3600"]
            }
            if setting.flag == "listen" { arguments.removeSubrange(1...2) }
            // A switch takes no text: its variable carries the wrong value instead.
            var environment: [String: String]?
            if setting.flag == "push-allow-private-addresses" {
                arguments.removeAll { $0 == "--\(setting.flag)" || $0 == text }
                environment = ProcessInfo.processInfo.environment.merging([setting.variable: text]) { $1 }
            }
            let result = try await ProcessRunner.run(ProcessRunner.builtProduct("mailslot-relay"), arguments, environment: environment)
            #expect(result.status == 64, "--\(setting.flag) \(text): \(result.stderr)")
            #expect(result.stderr.contains(says), "--\(setting.flag) \(text): \(result.stderr)")
        }
    }
}
