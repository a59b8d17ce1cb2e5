import Foundation
import MailslotTestSupport
import Testing
@testable import MailslotAudit
@testable import MailslotRelay

/// `mailslot-audit` itself: a sound relay passes every check; a relay with a hole in its rules
/// table fails exactly where the hole is — the audit can fail.
@Suite struct AuditTests {
    @Test func aFreshRelayPassesTheWholeAudit() async throws {
        let outcomes = try await withSecurityRelay { relay in await relay.audit() }
        let failed = outcomes.filter { !$0.passed }
        #expect(failed.isEmpty, "\(failed)")
        #expect(outcomes.filter { !$0.skipped }.count >= 40)
        #expect(Set(outcomes.map(\.name)).count == outcomes.count, "every check has its own name")
        // The cells that need a registration ran (the relay has providers on), so they could fail.
        #expect(outcomes.first { $0.name == "rule.push.other-learns-nothing" }?.skipped == false)
    }

    /// The resource checks can fail too: a relay that lets a message arrive in any number of
    /// fragments, or a uid sign in without bound, is caught by the checks made for that.
    @Test func aRelayWithoutItsBoundsFailsTheLimitChecks() async throws {
        let outcomes = try await withSecurityRelay(configure: {
            $0.maxFrameFragments = 1_000_000
            $0.maxSessionFamilies = 1_000_000
        }) { relay in await relay.audit([.limits]) }
        let failed = Set(outcomes.filter { !$0.passed }.map(\.name))
        #expect(failed == ["limit.fragment-flood", "limit.sign-in-flood-evicts-the-oldest"], "failed: \(failed.sorted())")
    }

    /// The claim limits can fail too: a relay whose per-owner or per-claimer bucket never runs
    /// out is caught by the check made for it, and only by that one.
    @Test(arguments: [("owner", "prekey.claims.limited-per-owner"), ("claimer", "prekey.claims.limited-per-claimer")])
    func aRelayWithoutAClaimLimitFailsItsCheck(_ limit: String, _ check: String) async throws {
        let outcomes = try await withSecurityRelay(configure: {
            if limit == "owner" { $0.prekeyMailboxBurst = 1_000_000 } else { $0.prekeyClaimBurst = 1_000_000 }
        }) { relay in await relay.audit([.prekeys]) }
        let failed = Set(outcomes.filter { !$0.passed }.map(\.name))
        #expect(failed == [check], "failed: \(failed.sorted())")
    }

    /// The blob bounds can fail too: a relay that lets an author keep any number of unfinished
    /// uploads and any number of blob bytes does not pass the checks made for them (they fail,
    /// or cannot reach a bound: never a clean pass), and the other blob checks still pass.
    @Test func aRelayWithoutItsBlobBoundsFailsTheBlobLimitChecks() async throws {
        let outcomes = try await withSecurityRelay(configure: {
            $0.maxUploadsPerAuthor = 1_000_000
            $0.maxAuthorBlobBytes = 1 << 50
        }) { relay in await relay.audit([.blobs]) }
        let notClean = Set(outcomes.filter { !$0.passed || $0.skipped }.map(\.name))
        #expect(notClean == ["blob.limit.unfinished-uploads", "blob.limit.author-quota"], "not clean: \(notClean.sorted())")
    }

    /// A relay started with one extra grant in its rules table, and the checks that must notice.
    struct Hole: Sendable, CustomTestStringConvertible {
        let operation: AccessOperation
        let resource: AccessResource
        let role: AccessRole
        let caughtBy: Set<String>
        var testDescription: String { "\(role) may \(operation) \(resource)" }
    }

    static let holes: [Hole] = [
        Hole(operation: .read, resource: .mailbox, role: .signedIn,
             caughtBy: ["rule.mailbox.other-cannot-list", "rule.mailbox.author-cannot-list", "rule.mailbox.other-cannot-subscribe"]),
        Hole(operation: .delete, resource: .message, role: .signedIn, caughtBy: ["rule.message.other-cannot-delete"]),
        Hole(operation: .delete, resource: .blockEntry, role: .signedIn, caughtBy: ["rule.block.other-cannot-unblock"]),
        Hole(operation: .update, resource: .keyBundle, role: .signedIn, caughtBy: ["rule.keys.other-cannot-replace"]),
        Hole(operation: .read, resource: .userDocument, role: .signedIn, caughtBy: ["rule.document.other-cannot-read"]),
        Hole(operation: .create, resource: .prekeys, role: .signedIn, caughtBy: ["rule.prekeys.other-cannot-upload"]),
        Hole(operation: .read, resource: .prekeys, role: .signedIn, caughtBy: ["rule.prekeys.other-cannot-count"]),
        Hole(operation: .delete, resource: .prekeys, role: .signedIn, caughtBy: ["rule.prekeys.other-cannot-delete"]),
        // Reading a blob makes one a party: the outsider's every answer then differs from a missing blob's.
        Hole(operation: .read, resource: .blob, role: .signedIn,
             caughtBy: ["rule.blob.other-cannot-read", "rule.blob.other-cannot-download", "rule.blob.other-cannot-upload",
                        "rule.blob.other-cannot-delete"]),
        Hole(operation: .update, resource: .blob, role: .recipient, caughtBy: ["rule.blob.recipient-cannot-upload"]),
        Hole(operation: .delete, resource: .blob, role: .recipient, caughtBy: ["rule.blob.recipient-cannot-delete"]),
        Hole(operation: .read, resource: .blobList, role: .signedIn,
             caughtBy: ["rule.blob.other-cannot-list", "rule.blob.other-cannot-list-authored"]),
        Hole(operation: .read, resource: .pushRegistration, role: .signedIn, caughtBy: ["rule.push.other-cannot-list"]),
        Hole(operation: .create, resource: .pushRegistration, role: .signedIn, caughtBy: ["rule.push.other-cannot-register"]),
    ]

    @Test(arguments: holes)
    func aHoleInTheRulesFailsTheAudit(_ hole: Hole) async throws {
        let outcomes = try await withSecurityRelay(configure: {
            $0.rules = AccessRules.standard.granting(hole.operation, hole.resource, to: hole.role)
        }) { relay in await relay.audit([.rules]) }
        let failed = Set(outcomes.filter { !$0.passed }.map(\.name))
        #expect(hole.caughtBy.isSubset(of: failed), "failed: \(failed.sorted())")
    }
}
