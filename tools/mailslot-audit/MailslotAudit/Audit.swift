import Foundation
import MailslotWire

/// A black-box security audit of a running relay: every rule cell, token class, limit and leak
/// probe that can be tested from outside, as throwaway users minted with the issuer's secret key.
/// `mailslot-audit` runs it against any URL; the security tests run it against in-process relays,
/// one of them deliberately broken, to show that it can fail.
public struct Audit: Sendable {
    /// Where the relay is and how to mint users for it.
    public struct Target: Sendable {
        /// The relay's base URL, `http://host:port` (no path).
        public var relay: URL
        /// An issuer key the relay trusts: the audit mints tokens for throwaway users with it.
        public var issuer: IdentityKeyPair
        /// The relay's audience (`aud`).
        public var audience: String
        /// Whether to flood the rate limit (about burst + 100 creates into the audit's own mailbox).
        public var flood: Bool

        /// A target; `flood` defaults to on.
        public init(relay: URL, issuer: IdentityKeyPair, audience: String = Defaults.audience, flood: Bool = true) {
            self.relay = relay
            self.issuer = issuer
            self.audience = audience
            self.flood = flood
        }
    }

    /// The outcome of one check.
    public struct Outcome: Sendable, CustomStringConvertible {
        /// The check's name, `group.what-is-attempted`.
        public let name: String
        /// Whether the relay resisted.
        public let passed: Bool
        /// Why it failed (or what was seen).
        public let detail: String
        /// Not run against this target (e.g. a raw-socket probe through TLS); counts neither way.
        public var skipped = false

        /// `PASS name`, `FAIL name: why` or `SKIP name: why`.
        public var description: String {
            skipped ? "SKIP \(name): \(detail)" : passed ? "PASS \(name)" : "FAIL \(name): \(detail)"
        }
    }

    let target: Target

    /// An audit of `target`.
    public init(_ target: Target) { self.target = target }

    /// The checks, by concern.
    public enum Group: String, Sendable, CaseIterable {
        case tokens, sessions, rules, bypass, envelopes, limits, prekeys, blobs, leaks

        var checks: @Sendable (AuditContext) async -> Void {
            switch self {
            case .tokens: TokenChecks.run
            case .sessions: SessionChecks.run
            case .rules: RuleChecks.run
            case .bypass: BypassChecks.run
            case .envelopes: EnvelopeChecks.run
            case .limits: LimitChecks.run
            case .prekeys: PrekeyChecks.run
            case .blobs: BlobChecks.run
            case .leaks: LeakChecks.run
            }
        }
    }

    /// Runs the checks of `groups` (all by default) in order, reporting each outcome as it is
    /// known, and cleans up after itself (messages, documents, bundles, block entries, sessions
    /// of its users, blobs).
    public func run(_ groups: [Group] = Group.allCases, report: @escaping @Sendable (Outcome) -> Void = { _ in }) async -> [Outcome] {
        let context = AuditContext(target: target, report: report)
        do {
            try await context.prepare()
            for group in groups { await group.checks(context) }
        } catch {
            context.record("audit.setup", false, "could not set up the audit users: \(error)")
        }
        await context.cleanUp()
        return context.outcomes
    }
}
