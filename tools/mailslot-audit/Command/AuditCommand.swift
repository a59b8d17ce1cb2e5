import ArgumentParser
import Foundation
import MailslotAudit
import MailslotWire

/// `mailslot-audit`: the black-box security audit of a running relay.
@main
struct AuditCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mailslot-audit",
        abstract: "Audit a running Mailslot relay from outside: rules, tokens, limits, leaks.",
        discussion: """
            Mints throwaway users (uids audit-<random>-…) with the issuer secret key, runs every check, \
            prints one line per check (PASS, FAIL with why, or SKIP) and then `N passed, M failed`, and \
            erases what it created. Exit status: 0 nothing failed, 1 a check failed, 64 usage, 66 the key \
            file is missing or unusable, 69 the relay could not be reached or the users not signed in.
            """
    )

    @Option(help: ArgumentHelp("The relay's base URL, e.g. http://127.0.0.1:8080.", valueName: "URL"))
    var relay: String
    @Option(help: ArgumentHelp("File with an issuer secret key the relay trusts (k4.secret.…, as `mailslot-relay keygen --secret-key-file` writes).", valueName: "FILE"))
    var issuerSecretKey: String
    @Option(help: ArgumentHelp("The relay's audience (default mailslot).", valueName: "ID"))
    var audience: String = Defaults.audience
    @Flag(help: "Skip the rate-limit flood (about burst + 100 creates into the audit's own mailbox).")
    var noFlood = false

    func validate() throws {
        guard let url = URL(string: relay), ["http", "https"].contains(url.scheme ?? ""), url.host != nil else {
            throw ValidationError("--relay takes http://HOST:PORT or https://HOST")
        }
    }

    func run() async throws {
        guard let text = try? String(contentsOfFile: issuerSecretKey, encoding: .utf8) else {
            FileHandle.standardError.write(Data("mailslot-audit: \(issuerSecretKey) cannot be read\n".utf8))
            throw ExitCode(66)
        }
        let issuer: IdentityKeyPair
        do { issuer = try IdentityKeyPair(paserk: text.trimmingCharacters(in: .whitespacesAndNewlines)) } catch {
            FileHandle.standardError.write(Data("mailslot-audit: \(issuerSecretKey) is not a k4.secret key\n".utf8))
            throw ExitCode(66)
        }
        let target = Audit.Target(relay: URL(string: relay)!, issuer: issuer, audience: audience, flood: !noFlood)
        let outcomes = await Audit(target).run { print($0) }
        let failed = outcomes.filter { !$0.passed && !$0.skipped }.count
        let passed = outcomes.filter { $0.passed && !$0.skipped }.count
        print("\(passed) passed, \(failed) failed")
        if outcomes.contains(where: { $0.name == "audit.setup" }) { throw ExitCode(69) }
        if failed > 0 { throw ExitCode(1) }
    }
}
