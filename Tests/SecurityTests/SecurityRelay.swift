import Logging
import MailslotAudit
@testable import MailslotRelay
import MailslotTestSupport
import MailslotWire

/// Runs `body` with a test relay set for the attack catalogue: rate limits small enough that
/// floods are quick, a header timeout short enough that the audit sees silent sockets closed
/// in seconds, small blob limits (files of 1 MiB, a quota of three), and Web Push and the
/// webhook on. `configure` adjusts it
/// further (a broken rules table, say).
func withSecurityRelay<T>(logger: Logger = quietLogger, configure: (inout RelayConfiguration) -> Void = { _ in },
                          _ body: (TestRelay) async throws -> T) async throws -> T {
    try await withTestRelay(logger: logger, configure: { configuration in
        configuration.createRate = 20
        configuration.createBurst = 60
        configuration.headerTimeout = 2
        // Blobs small enough that the audit's blob checks are quick and its quota check reaches
        // the quota with three unfinished uploads of the largest file (1 MiB, parts of 1 MiB).
        configuration.maxFileBytes = RelayConfiguration.minFileBytes
        configuration.blobPartBytes = RelayConfiguration.minPartBytes
        configuration.maxAuthorBlobBytes = 3 * (FileCipher.size(plainSize: RelayConfiguration.minFileBytes) ?? 0)
        // Web Push and the webhook on, so that the push rule cells can register (an unusable key
        // file leaves them off, and AuditTests fails on the skipped cell).
        try? PushTestCredentials.enableWebPushAndWebhook(&configuration)
        configure(&configuration)
    }, body)
}

/// The attacks make the relay log errors by the hundred: only critical ones are shown.
let quietLogger: Logger = {
    var logger = Logger(label: "security-relay")
    logger.logLevel = .critical
    return logger
}()

extension TestRelay {
    /// Runs the black-box audit (or some of its groups) against this relay.
    func audit(_ groups: [Audit.Group] = Audit.Group.allCases) async -> [Audit.Outcome] {
        await Audit(.init(relay: url, issuer: issuer, audience: audience)).run(groups)
    }
}
