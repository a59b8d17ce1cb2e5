import Foundation
import MailslotWire

/// Envelopes through the relay: it keeps them byte for byte, enforces the size classes, never
/// lets another author or envelope take an id, and what it hands out cannot be replayed into
/// another mailbox or under another id without the recipient noticing (spec/envelope.md).
enum EnvelopeChecks {
    @Sendable static func run(_ context: AuditContext) async {
        let bob = context.bob!, alice = context.alice!, mallory = context.mallory!
        let mailbox = "/v1/users/\(bob.uid)/messages"

        await context.check("envelope.odd-size-refused") {
            context.expect("envelope.odd-size-refused", try await context.send(alice, to: bob.uid, envelope: randomBytes(700)), 400, "invalid_envelope")
        }
        await context.check("envelope.below-smallest-class-refused") {
            context.expect("envelope.below-smallest-class-refused", try await context.send(alice, to: bob.uid, envelope: randomBytes(256)),
                           400, "invalid_envelope")
        }
        await context.check("envelope.not-base64url-refused") {
            let answer = try await context.http.call("PUT", "\(mailbox)/\(MessageID.generate())", session: alice.session,
                                                     body: ["envelope": "not base64 !!!"])
            context.expect("envelope.not-base64url-refused", answer, 400, "invalid_envelope")
        }
        await context.check("envelope.oversized-refused") {
            let answer = try await context.send(alice, to: bob.uid, envelope: randomBytes(2 << 20))
            context.record("envelope.oversized-refused", answer.status == 413, "expected 413, got \(answer.summary)")
        }

        // Real envelopes, sealed to keys only this audit holds.
        let bobKeys = MailboxKeyPair(), malloryKeys = MailboxKeyPair(), aliceIdentity = IdentityKeyPair()
        let id = MessageID.generate()
        let message = ChatMessage(type: "text", sender: Sender(id: alice.uid), payload: Payload(text: "audit"),
                                  timestamp: Int64(Date().timeIntervalSince1970 * 1000))
        guard let sealed = try? Envelope.seal(message, id: id, from: alice.uid, identity: aliceIdentity, to: bob.uid,
                                              mailboxKey: bobKeys.publicKey) else {
            return context.record("envelope.seal", false, "could not seal a test envelope")
        }
        await context.check("envelope.kept-byte-for-byte") {
            _ = try await context.send(alice, to: bob.uid, id: id, envelope: sealed)
            let read = try await context.http.call("GET", "\(mailbox)/\(id)", session: bob.session)
            let stored = (read.json["envelope"] as? String).flatMap(Base64URL.decode)
            let opened = stored.flatMap { try? Envelope.open($0, id: id, recipient: bob.uid, keys: bobKeys) }
            context.record("envelope.kept-byte-for-byte", stored == sealed && opened?.sender == alice.uid,
                           "the owner read back \(read.summary), \(stored == sealed ? "same bytes" : "different bytes")")
        }
        await context.check("envelope.id-cannot-be-reused-with-another-envelope") {
            let answer = try await context.send(alice, to: bob.uid, id: id, envelope: randomBytes(512))
            context.expect("envelope.id-cannot-be-reused-with-another-envelope", answer, 409, "conflict")
        }
        await context.check("envelope.id-cannot-be-taken-by-another-author") {
            let answer = try await context.send(mallory, to: bob.uid, id: id, envelope: sealed)
            context.expect("envelope.id-cannot-be-taken-by-another-author", answer, 409, "conflict")
        }
        await context.check("envelope.replayed-into-another-mailbox-does-not-open") {
            // The relay cannot tell; the recipient must. Alice (or anyone holding the bytes) drops
            // bob's envelope into mallory's mailbox.
            _ = try await context.send(alice, to: mallory.uid, id: id, envelope: sealed)
            let read = try await context.http.call("GET", "/v1/users/\(mallory.uid)/messages/\(id)", session: mallory.session)
            let bytes = (read.json["envelope"] as? String).flatMap(Base64URL.decode) ?? []
            let opened = try? Envelope.open(bytes, id: id, recipient: mallory.uid, keys: malloryKeys)
            context.record("envelope.replayed-into-another-mailbox-does-not-open", read.status == 200 && opened == nil,
                           "read \(read.summary); \(opened == nil ? "refused" : "opened!")")
        }
        await context.check("envelope.replayed-under-another-id-is-detected") {
            let otherID = MessageID.generate()
            _ = try await context.send(alice, to: bob.uid, id: otherID, envelope: sealed)
            let read = try await context.http.call("GET", "\(mailbox)/\(otherID)", session: bob.session)
            let bytes = (read.json["envelope"] as? String).flatMap(Base64URL.decode) ?? []
            var refusal: EnvelopeError?
            do { _ = try Envelope.open(bytes, id: otherID, recipient: bob.uid, keys: bobKeys) } catch let error as EnvelopeError { refusal = error } catch {}
            context.record("envelope.replayed-under-another-id-is-detected", read.status == 200 && refusal != nil,
                           "read \(read.summary); \(refusal.map { "refused: \($0.code)" } ?? "opened!")")
        }
    }
}
