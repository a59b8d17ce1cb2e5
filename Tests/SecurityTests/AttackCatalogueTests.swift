import Foundation
import MailslotTestSupport
import Testing
@testable import MailslotAudit
import MailslotWire

/// The attack catalogue: every attack Mailslot must resist, one test case each, named for the
/// attack. Each family runs once against its own fresh relay (through the audit's probes, so the
/// same attacks can be aimed at any deployment with `mailslot-audit`); each case then checks
/// the relay's answer to its attack.
@Suite struct AttackCatalogueTests {
    /// One audit run per family, shared by that family's cases.
    actor Runs {
        static let shared = Runs()
        private var runs: [Audit.Group: Task<[Audit.Outcome], Never>] = [:]

        func outcome(_ attack: String, in group: Audit.Group) async -> Audit.Outcome? {
            let run = runs[group] ?? Task {
                // A relay that cannot start leaves no outcome: every case of the family then fails.
                (try? await withSecurityRelay { relay in await relay.audit([group]) }) ?? []
            }
            runs[group] = run
            return await run.value.first { $0.name == attack }
        }
    }

    func expectResisted(_ attack: String, _ group: Audit.Group) async {
        let outcome = await Runs.shared.outcome(attack, in: group)
        #expect(outcome != nil, "the audit has no check \(attack)")
        // A skipped check resisted nothing: against an in-process relay every check must run.
        #expect(outcome?.skipped == false, "skipped: \(outcome?.detail ?? "")")
        #expect(outcome?.passed == true, "\(outcome?.detail ?? "")")
    }

    @Test(arguments: [
        "token.signed-by-a-foreign-key", "token.foreign-key-with-its-own-kid", "token.tampered-payload", "token.tampered-footer",
        "token.footer-removed", "token.purpose-confusion-v4-local", "token.version-confusion-v3", "token.version-confusion-v2",
        "token.expired", "token.issued-in-the-future", "token.lifetime-over-an-hour", "token.wrong-audience",
        "token.invalid-subject", "token.missing-subject", "token.over-long", "token.garbage", "token.not-utf8",
    ])
    func tokenForgery(_ attack: String) async { await expectResisted(attack, .tokens) }

    @Test(arguments: [
        "session.garbage-bearer", "session.refresh-token-as-bearer", "session.not-bearer-scheme",
        "session.used-after-sign-out", "session.refresh-reuse-revokes-the-family",
    ])
    func sessionAbuse(_ attack: String) async { await expectResisted(attack, .sessions) }

    @Test(arguments: [
        "bypass.dot-dot-segments", "bypass.dot-dot-as-uid", "bypass.percent-encoded-slash", "bypass.percent-encoded-dot-dot",
        "bypass.upper-case-variant-is-another-user", "bypass.unicode-fullwidth-variant", "bypass.nul-byte-in-uid",
        "bypass.nul-byte-in-uid-other", "bypass.space-in-uid", "bypass.over-long-uid", "bypass.over-long-message-id",
        "bypass.too-short-message-id", "bypass.duplicate-json-members", "bypass.claimed-author-is-ignored",
    ])
    func ruleBypass(_ attack: String) async { await expectResisted(attack, .bypass) }

    /// One-time prekeys: only their owner uploads, counts or withdraws them; a claim needs a
    /// session, and what it takes is gone (never handed out again).
    @Test(arguments: [
        "rule.prekeys.owner-uploads", "rule.prekeys.other-cannot-upload", "rule.prekeys.other-cannot-count",
        "rule.prekeys.other-cannot-delete", "rule.prekeys.anonymous-cannot-claim", "rule.prekeys.claim-consumes",
        "rule.prekeys.owner-withdraws",
    ])
    func prekeyAbuse(_ attack: String) async { await expectResisted(attack, .rules) }

    /// Blobs (spec/protocol.md §4.15–§4.21): only their author uploads and deletes them, only
    /// their author and unacknowledged recipients read them, only a recipient acknowledges; to
    /// anyone else every blob is a blob that does not exist, byte for byte; the last
    /// acknowledgement erases it.
    @Test(arguments: [
        "rule.blob.signed-in-user-creates", "rule.blob.anonymous-cannot-create", "rule.blob.author-reads", "rule.blob.recipient-reads",
        "rule.blob.other-cannot-read", "rule.blob.anonymous-cannot-read", "rule.blob.recipient-cannot-upload", "rule.blob.other-cannot-upload",
        "rule.blob.author-uploads", "rule.blob.recipient-downloads", "rule.blob.other-cannot-download", "rule.blob.other-cannot-acknowledge",
        "rule.blob.author-cannot-acknowledge-for-the-recipient", "rule.blob.recipient-cannot-delete", "rule.blob.other-cannot-delete",
        "rule.blob.owner-lists", "rule.blob.other-cannot-list", "rule.blob.other-cannot-list-authored", "rule.blob.anonymous-cannot-list",
        "rule.blob.recipient-acknowledges", "rule.blob.acknowledged-recipient-cannot-read", "rule.blob.erased-after-the-last-acknowledgement",
        "rule.blob.author-deletes",
    ])
    func blobAccess(_ attack: String) async { await expectResisted(attack, .rules) }

    /// What a blob create, a part and a download may carry; a stored part never changes; the
    /// bounds on unfinished uploads and on an author's blob bytes.
    @Test(arguments: [
        "blob.create.size-of-no-file-refused", "blob.create.size-off-by-one-refused", "blob.create.oversize-refused",
        "blob.create.no-recipients-refused", "blob.create.repeated-recipient-refused", "blob.create.invalid-recipient-refused",
        "blob.create.too-many-recipients-refused", "blob.create.ttl-over-the-maximum-refused", "blob.create.negative-size-refused",
        "blob.create.invalid-id-refused", "blob.create.retry-is-idempotent", "blob.recipient-learns-no-other-recipient",
        "blob.part.digest-mismatch-refused", "blob.part.beyond-the-declared-size-refused", "blob.part.zero-refused",
        "blob.part.short-refused", "blob.part.long-refused", "blob.part.missing-digest-refused", "blob.part.padded-digest-refused",
        "blob.part.short-digest-refused", "blob.part.json-content-type-refused", "blob.part.chunked-refused",
        "blob.part.stored-part-never-changes", "blob.download.incomplete-refused", "blob.ack.incomplete-refused",
        "blob.part.last-completes", "blob.part.complete-blob-never-changes", "blob.download.range-across-parts",
        "blob.download.resume-from-an-offset", "blob.download.suffix", "blob.download.range-past-the-end-refused",
        "blob.download.several-ranges-refused", "blob.download.backward-range-refused", "blob.erased-after-the-last-acknowledgement",
        "blob.limit.unfinished-uploads", "blob.limit.author-quota",
    ])
    func blobAbuse(_ attack: String) async { await expectResisted(attack, .blobs) }

    @Test(arguments: [
        "envelope.odd-size-refused", "envelope.below-smallest-class-refused", "envelope.not-base64url-refused",
        "envelope.oversized-refused", "envelope.kept-byte-for-byte", "envelope.id-cannot-be-reused-with-another-envelope",
        "envelope.id-cannot-be-taken-by-another-author", "envelope.replayed-into-another-mailbox-does-not-open",
        "envelope.replayed-under-another-id-is-detected",
    ])
    func envelopeAbuse(_ attack: String) async { await expectResisted(attack, .envelopes) }

    @Test(arguments: [
        "limit.huge-body", "limit.deep-json", "limit.non-json-content-type", "limit.huge-header", "limit.half-open-connections",
        "limit.huge-websocket-frame", "limit.garbage-frames-close-the-socket", "limit.empty-continuation-frames",
        "limit.fragment-flood", "limit.fragmented-message-over-the-size-limit", "limit.silent-and-slow-connections-are-closed",
        "limit.sign-in-flood-evicts-the-oldest", "limit.page-bounded-in-bytes", "limit.flood-of-creates",
    ])
    func resourceExhaustion(_ attack: String) async { await expectResisted(attack, .limits) }

    @Test(arguments: [
        "leak.no-existence-oracle-get", "leak.no-existence-oracle-delete", "leak.no-existence-oracle-patch",
        "leak.author-unsend-of-missing-is-403", "leak.sender-learns-nothing-of-the-mailbox", "leak.error-does-not-echo-the-token",
        "leak.error-does-not-echo-the-refresh-token", "leak.error-does-not-echo-the-body", "leak.error-does-not-echo-the-session",
        "leak.errors-are-problem-json", "leak.no-version-banner",
    ])
    func informationLeak(_ attack: String) async { await expectResisted(attack, .leaks) }
}
