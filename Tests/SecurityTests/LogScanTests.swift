import Foundation
import MailslotTestSupport
import Testing
@testable import MailslotAudit

/// The relay's own log, captured at trace level while the whole audit runs against it, holds
/// none of the secrets and identifiers the audit used.
@Suite struct LogScanTests {
    @Test func aFullAuditLeavesNoSecretOrIdentifierInTheLog() async throws {
        let log = CapturedLog()
        let outcomes = try await withSecurityRelay(logger: log.logger) { relay in await relay.audit() }
        #expect(outcomes.count >= 40)
        let text = log.text
        #expect(!text.isEmpty, "the capture works")
        // Sessions (mss_), refresh tokens (msr_), custom tokens (v4.*), keys, the audit's uids
        // (audit-…) and the markers it hides in bodies; and no Authorization header at all.
        for needle in ["mss_", "msr_", "v4.public.", "v4.local.", "k4.secret.", "audit-", "AUDITMARKER", "Bearer"] {
            #expect(!text.contains(needle), "the log contains \(needle)")
        }
    }
}
