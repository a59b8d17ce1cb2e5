import ArgumentParser
import Foundation
import MailslotClient
import MailslotWire

/// The options every command shares.
struct GlobalOptions: ParsableArguments {
    @Option(help: "The profile: one identity, its contacts and messages.")
    var profile = "default"

    @Flag(help: "Print one JSON object per line.")
    var json = false

    /// `arguments` with the global options that stand before the subcommand moved to just after
    /// it, where each subcommand parses them. Anything else before the subcommand (`--help`, an
    /// unknown option) ends the move, so that the parser reports it as it stands.
    static func movedAfterSubcommand(_ arguments: [String]) -> [String] {
        var global: [String] = []
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            if argument == "--json" || argument.hasPrefix("--profile=") {
                global.append(argument)
                index += 1
            } else if argument == "--profile", index + 1 < arguments.count {
                global += arguments[index...index + 1]
                index += 2
            } else {
                break
            }
        }
        // Only when a subcommand follows: `mailslot --json` alone is left to the parser to refuse.
        guard !global.isEmpty, index < arguments.count, !arguments[index].hasPrefix("-") else { return arguments }
        // A group's options go after its leaf command (`push add webpush`), the one that parses them.
        var end = index + 1
        var path = arguments[index]
        while Self.groups.contains(path), end < arguments.count, !arguments[end].hasPrefix("-") {
            path += " " + arguments[end]
            end += 1
        }
        return Array(arguments[index..<end]) + global + arguments[end...]
    }

    /// Commands whose subcommands, not themselves, take the global options.
    static let groups: Set<String> = ["push", "push add", "group"]
}

/// A profile's folder: `client.sqlite` (keys, contacts, messages) and `profile.json` (relay URL, uid).
struct Profile {
    let folder: String
    let name: String

    init(_ options: GlobalOptions) throws {
        guard Identifier.isValidUID(options.profile) else {
            throw ValidationError("a profile name is 1 to 128 of A-Z a-z 0-9 . _ -")
        }
        let home = ProcessInfo.processInfo.environment["MAILSLOT_HOME"].flatMap { $0.isEmpty ? nil : $0 }
            ?? (NSHomeDirectory() as NSString).appendingPathComponent(".mailslot")
        folder = (home as NSString).appendingPathComponent(options.profile)
        name = options.profile
    }

    var settingsPath: String { (folder as NSString).appendingPathComponent("profile.json") }
    var databasePath: String { (folder as NSString).appendingPathComponent("client.sqlite") }

    struct Settings: Codable {
        var relay: String
        var uid: String
    }

    func settings() throws -> Settings {
        guard let data = FileManager.default.contents(atPath: settingsPath),
              let settings = try? JSONDecoder().decode(Settings.self, from: data) else {
            throw CLIError.notLoggedIn("profile '\(name)' is not logged in: run `mailslot login --relay URL --token TOKEN`")
        }
        return settings
    }

    func save(_ settings: Settings) throws {
        umask(0o077)
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        try encoder.encode(settings).write(to: URL(fileURLWithPath: settingsPath))
        chmod(settingsPath, 0o600)
    }

    /// A client for this profile. `token` signs in once; without one, a session that cannot be
    /// refreshed any more asks the user to log in again.
    func client(token: String? = nil, relay: String? = nil, attachments: AttachmentPolicy = AttachmentPolicy()) throws -> MailslotClient {
        umask(0o077)
        let relayText = try relay ?? settings().relay
        guard let url = URL(string: relayText), url.scheme == "http" || url.scheme == "https", url.host != nil else {
            throw ValidationError("--relay takes an http:// or https:// URL")
        }
        let name = self.name
        return try MailslotClient(relay: url, databasePath: databasePath, attachments: attachments) {
            if let token { return token }
            if let fromEnvironment = ProcessInfo.processInfo.environment["MAILSLOT_TOKEN"], !fromEnvironment.isEmpty { return fromEnvironment }
            throw CLIError.notLoggedIn("the session of profile '\(name)' cannot be renewed: run `mailslot login` with a new token")
        }
    }
}
