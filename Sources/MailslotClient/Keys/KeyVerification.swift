import Foundation
import MailslotWire

/// What a user compares with a contact before trusting their keys (spec/envelope.md §5), and what
/// ``MailslotClient/trust(_:safetyNumber:)`` will install if the number matches.
///
/// While the contact's identity key changed (``Contact/Trust/changed``), the number is the one of
/// the **offered** identity key — the key that trusting installs — and ``isNewKey`` is true; the
/// number of the pinned (old) key is in ``previousSafetyNumber``. Comparing the old number would
/// check a key that is about to be replaced: a relay that forged the change would pass.
public struct SafetyNumberCheck: Sendable, Equatable {
    /// The contact's uid.
    public let uid: String
    /// The safety number to compare now, for the identity key that trusting installs: twelve
    /// groups of five digits, four groups per line (`SafetyNumber.display(_:)`).
    public let safetyNumber: String
    /// Whether this number is for a new identity key the contact offers (not trusted yet), rather
    /// than the pinned one.
    public let isNewKey: Bool
    /// While ``isNewKey``: the safety number with the pinned (old) identity key, for reference
    /// only — it is not the one to compare. Nil otherwise.
    public let previousSafetyNumber: String?
    /// The contact's fingerprint (30 digits in groups of five) of the identity key the number is for.
    public let fingerprint: String
    /// The key id (`KeyBundle.keyID`) of the keys trusting installs: the offered bundle's while
    /// ``isNewKey``, the pinned ones otherwise.
    public let keyID: String
    /// How far the contact's keys are trusted now.
    public let trust: Contact.Trust
}

extension SafetyNumberCheck {
    /// The 60 digits of a safety number as the user typed or pasted it: spaces, tabs and line
    /// breaks are dropped (the display groups digits by five, four groups a line); anything else
    /// than exactly 60 ASCII digits is nil.
    static func digits(of text: String) -> [UInt8]? {
        let digits = Array(text.utf8.filter { $0 != 0x20 && $0 != 0x09 && $0 != 0x0A && $0 != 0x0D })
        guard digits.count == 60, digits.allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
        return digits
    }

    /// The safety number of `me` and `uid` holding `identityKey`, as its 60 digits.
    static func digits(_ me: Identity, _ uid: String, _ identityKey: IdentityPublicKey) -> [UInt8] {
        Array(SafetyNumber.of((me.uid, me.signing.publicKey), (uid, identityKey)).joined().utf8)
    }
}

extension MailslotClient {
    /// What to compare with `uid` before trusting their keys: the safety number of the identity
    /// key that ``trust(_:safetyNumber:)`` would install, whether it is a new key, and the old
    /// number. A contact never seen before is fetched and pinned first (trust on first use).
    public func safetyNumberCheck(with uid: String) async throws -> SafetyNumberCheck {
        guard Identifier.isValidUID(uid) else { throw ClientError.invalidUID(text: uid) }
        let me = try await identity()
        if try await store.contact(uid) == nil { _ = try await contact(uid) }
        guard var candidate = try await store.trustCandidate(uid) else { throw ClientError.noKeys(uid: uid) }
        if candidate.offerMissing {
            // Changed, with no offer kept to show: the relay's keys are fetched again, which puts
            // a new identity key on offer (or withdraws the change when it serves the pinned one).
            _ = try? await refreshKeys(of: uid)
            guard let fetched = try await store.trustCandidate(uid), !fetched.offerMissing else { throw ClientError.keyChanged(uid: uid) }
            candidate = fetched
        }
        let shown = SafetyNumber.of((me.uid, me.signing.publicKey), (uid, candidate.identityKey))
        let isNewKey = candidate.identityKey != candidate.pinned.identityKey
        return SafetyNumberCheck(
            uid: uid, safetyNumber: SafetyNumber.display(shown), isNewKey: isNewKey,
            previousSafetyNumber: isNewKey
                ? SafetyNumber.display(SafetyNumber.of((me.uid, me.signing.publicKey), (uid, candidate.pinned.identityKey))) : nil,
            fingerprint: SafetyNumber.fingerprint(uid: uid, identityKey: candidate.identityKey).joined(separator: " "),
            keyID: candidate.keyID, trust: candidate.pinned.trust)
    }

    /// The safety number to compare with `uid` now, in twelve groups of five digits: while their
    /// identity key changed, the number of the **new** key (the one trusting installs).
    /// ``safetyNumberCheck(with:)`` says whether it is a new key and what the old number was.
    public func safetyNumber(with uid: String) async throws -> String {
        try await safetyNumberCheck(with: uid).safetyNumber
    }

    /// Trusts `uid`'s keys after the user compared the safety number with them out of band.
    /// `safetyNumber` is the number the user compared (60 digits; spaces and line breaks are
    /// ignored): it must be the number of the identity key that trusting installs — a changed
    /// contact's offered key, otherwise the pinned one — or nothing changes and
    /// ``ClientError/safetyNumberMismatch(uid:)`` is thrown — and a contact pinned on first use
    /// becomes ``Contact/Trust/disputed``: nothing more is sealed to it, nor accepted from it,
    /// until a comparison matches. The check and the install are one
    /// store transaction, so a bundle the relay offers in between is never trusted unseen.
    /// Messages held for the change are then sealed to the trusted keys and sent (or queued,
    /// when the relay cannot be reached). There is no way to trust without a number.
    @discardableResult
    public func trust(_ uid: String, safetyNumber: String) async throws -> Contact {
        guard Identifier.isValidUID(uid) else { throw ClientError.invalidUID(text: uid) }
        guard let expected = SafetyNumberCheck.digits(of: safetyNumber) else { throw ClientError.invalidSafetyNumber }
        let me = try await identity()
        if try await store.contact(uid) == nil { _ = try await contact(uid) }
        let trusted: Contact
        switch try await store.trust(uid, expecting: expected, as: me) {
        case .trusted(let contact): trusted = contact
        case .unknown: throw ClientError.noKeys(uid: uid)
        case .mismatch: throw ClientError.safetyNumberMismatch(uid: uid)
        // Nothing was shown for a change whose offer is gone: `safetyNumberCheck` fetches it.
        case .offerMissing: throw ClientError.keyChanged(uid: uid)
        }
        for id in try await store.outgoingIDs(to: uid, state: .held) { _ = try? await resend(id) }
        await releaseHeldCopies(to: uid)  // its copies of group messages, unless the group no longer has it
        return trusted
    }
}
