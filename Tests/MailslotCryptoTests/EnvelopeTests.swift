import Foundation
import Testing
@testable import MailslotCrypto

/// Sealed envelopes: round trips, and every way an envelope can be refused.
@Suite struct EnvelopeTests {
    let alice = IdentityKeyPair()
    let bobMailbox = MailboxKeyPair()
    let id = "01JD5Z6Q8M3V2K7R9T4W1X0Y2Z"

    func text(_ words: String, from sender: String = "alice") -> ChatMessage {
        ChatMessage(type: .text, sender: Sender(id: sender, name: "Alice"), payload: Payload(text: words),
                    timestamp: 1_800_000_000_000)
    }

    func sealed(_ message: ChatMessage? = nil, id: String? = nil, to recipient: String = "bob") throws -> [UInt8] {
        try Envelope.seal(message ?? text("hello"), id: id ?? self.id, from: "alice", identity: alice,
                          to: recipient, mailboxKey: bobMailbox.publicKey)
    }

    func open(_ envelope: [UInt8], id: String? = nil, as recipient: String = "bob") throws(EnvelopeError) -> OpenedEnvelope {
        try Envelope.open(envelope, id: id ?? self.id, recipient: recipient, keys: bobMailbox)
    }

    /// Seals a hand-made record, to reach the checks behind the sealed box.
    func craft(version: UInt8 = 1, sender: String = "alice", senderKey: IdentityKeyPair? = nil, recipient: String = "bob",
               id: String? = nil, body: [UInt8]? = nil, signature: [UInt8]? = nil, trailing: [UInt8] = []) throws -> [UInt8] {
        try EnvelopeCrafter(senderUID: "alice", identity: alice, mailbox: bobMailbox.publicKey)
            .craft(version: version, sender: sender, key: senderKey, recipient: recipient, id: id ?? self.id,
                   body: body ?? text("hello").testBody, signature: signature, trailing: trailing)
    }

    @Test func roundTripOfEveryKnownType() throws {
        let sender = Sender(id: "alice", name: "Alice", profileImage: "https://example.com/a.png")
        let messages = [
            ChatMessage(type: .text, sender: sender, payload: Payload(text: "héllo 👋"), timestamp: 1),
            ChatMessage(type: .picture, sender: sender,
                        payload: Payload(text: "caption", attachments: [Attachment(mediaType: "image/png", data: randomBytes(3000), name: "p.png")]),
                        timestamp: 2),
            ChatMessage(type: .location, sender: sender, payload: Payload(location: Location(latitude: 48.8584, longitude: 2.2945)), timestamp: 3),
            ChatMessage(type: .receipt, sender: sender, payload: Payload(receipt: Receipt(kind: .read, messageIDs: [id])), timestamp: 4),
            ChatMessage(type: .typing, sender: sender, payload: Payload(typing: Typing(active: true)), timestamp: 5),
        ]
        for message in messages {
            let envelope = try sealed(message)
            let opened = try open(envelope)
            #expect(opened.message == message)
            #expect(opened.sender == "alice")
            #expect(opened.senderKey == alice.publicKey)
            #expect(opened.messageID == id)
            #expect(opened.body == message.testBody)
        }
    }

    @Test func unknownTypesAndFieldsSurviveARoundTrip() throws {
        let body = #"{"extra":{"nested":[1,true,null]},"payload":{"poll":{"options":["a","b"]},"text":"vote"},"# +
            #""sender":{"id":"alice","mood":"fine"},"timestamp":5,"type":"poll"}"#
        let message = try ChatMessage.decode(Array(body.utf8))
        #expect(message.type == "poll")
        #expect(message.payload.unknownFields["poll"] == .object(["options": .array([.string("a"), .string("b")])]))
        #expect(message.unknownFields["extra"] != nil)
        let opened = try open(try sealed(message))
        #expect(opened.message == message)
        // Re-encoding keeps every field the sender wrote (sender's unknown fields are not kept).
        let again = try JSONSerialization.jsonObject(with: Data(opened.message.testBody)) as! [String: Any]
        #expect((again["payload"] as! [String: Any])["poll"] != nil)
        #expect(again["extra"] != nil)
    }

    @Test func sizesAreClasses() throws {
        #expect(try sealed().count == 512)
        #expect(try sealed(text(String(repeating: "x", count: 300))).count == 1024)
        #expect(try sealed(text(String(repeating: "x", count: 40_000))).count == 65_536)
        #expect(Envelope.sizeClass(forRecordLength: 0) == 512)
        #expect(Envelope.sizeClass(forRecordLength: 463) == 512)
        #expect(Envelope.sizeClass(forRecordLength: 464) == 1024)
        #expect(Envelope.sizeClass(forRecordLength: (1 << 20) - 49) == 1 << 20)
        #expect(Envelope.sizeClass(forRecordLength: (1 << 20) - 48) == nil)
        #expect(throws: EnvelopeError.tooLarge) { try sealed(text(String(repeating: "x", count: 1 << 20))) }
    }

    @Test func everyFlippedByteIsRefused() throws {
        let envelope = try sealed()
        for index in envelope.indices {
            var tampered = envelope
            tampered[index] ^= 0x01
            #expect(throws: EnvelopeError.cannotDecrypt, "byte \(index)") { try open(tampered) }
        }
    }

    @Test func truncatedOrOversizedOrOddSizesAreRefused() throws {
        let envelope = try sealed()
        for cut in [1, 48, 256, 511] {
            #expect(throws: EnvelopeError.invalidSize) { try open(Array(envelope.dropLast(cut))) }
        }
        #expect(throws: EnvelopeError.invalidSize) { try open(envelope + [0]) }
        #expect(throws: EnvelopeError.invalidSize) { try open([]) }
        #expect(throws: EnvelopeError.invalidSize) { try open([UInt8](repeating: 0, count: 2 << 20)) }
        // A power of two, but the box was cut: the sealed box refuses it.
        #expect(throws: EnvelopeError.cannotDecrypt) { try open(Array(try sealed(text(String(repeating: "x", count: 300))).prefix(512))) }
    }

    @Test func movedToAnotherRecipientIsRefused() throws {
        // Another mailbox key cannot open it at all…
        let envelope = try sealed()
        #expect(throws: EnvelopeError.cannotDecrypt) {
            try Envelope.open(envelope, id: id, recipient: "carol", keys: MailboxKeyPair())
        }
        // …and a holder of the same mailbox key under another uid sees it is not theirs.
        #expect(throws: EnvelopeError.wrongRecipient) { try open(envelope, as: "bob2") }
        // A record signed for carol, re-addressed to bob and sealed to bob's key: the signature
        // covers the recipient, so it fails.
        let signedForCarol = preAuthenticationEncoding([Array("mailslot-envelope-v1".utf8), Array("alice".utf8),
                                                        alice.publicKey.bytes, Array("carol".utf8), bobMailbox.publicKey.bytes,
                                                        Array(id.utf8), text("hello").testBody])
        #expect(throws: EnvelopeError.badSignature) { try open(try craft(signature: alice.sign(signedForCarol))) }
    }

    @Test func replayedUnderAnotherIDIsRefused() throws {
        let envelope = try sealed()
        #expect(throws: EnvelopeError.wrongMessageID) { try open(envelope, id: "01JD5Z6Q8M3V2K7R9T4W1X0Y3A") }
    }

    @Test func recordFieldsSwappedUnderAValidBoxAreRefused() throws {
        // The relay (or anyone with bob's public key) can seal a new box: the signature must
        // catch every altered field.
        let signedForOtherID = preAuthenticationEncoding([Array("mailslot-envelope-v1".utf8), Array("alice".utf8),
                                                          alice.publicKey.bytes, Array("bob".utf8), bobMailbox.publicKey.bytes,
                                                          Array("AAAAAAAAAAAAAAAAAAAA".utf8), text("hello").testBody])
        #expect(throws: EnvelopeError.badSignature) { try open(try craft(signature: alice.sign(signedForOtherID))) }
        #expect(throws: EnvelopeError.badSignature) { try open(try craft(body: text("hullo").testBody, signature: alice.sign([1]))) }
        // A stranger signing in alice's name with their own key is detected by the caller's pin
        // check; the envelope itself is consistent and says who signed.
        let mallory = IdentityKeyPair()
        let opened = try open(try craft(senderKey: mallory))
        #expect(opened.senderKey == mallory.publicKey && opened.senderKey != alice.publicKey)
    }

    @Test func unknownVersionsAreRefused() throws {
        #expect(throws: EnvelopeError.unsupportedVersion(0)) { try open(try craft(version: 0)) }
        #expect(throws: EnvelopeError.unsupportedVersion(3)) { try open(try craft(version: 3)) }
        // Version 2 is read as a ratchet record (spec/ratchet.md), which a version 1 layout is not.
        #expect(throws: EnvelopeError.self) { try open(try craft(version: 2)) }
    }

    @Test func malformedRecordsAreRefused() throws {
        #expect(throws: EnvelopeError.malformedRecord("bytes follow the signature")) { try open(try craft(trailing: [1])) }
        #expect(throws: EnvelopeError.malformedRecord("the sender is not a valid uid")) { try open(try craft(sender: "al/ice")) }
        #expect(throws: EnvelopeError.malformedRecord("the recipient is not a valid uid")) { try open(try craft(recipient: "")) }
        #expect(throws: EnvelopeError.malformedRecord("the message id is not valid")) { try open(try craft(id: "short")) }
        // A body length that runs past the end.
        var record = Envelope.record(version: 1, sender: Array("alice".utf8), senderKey: alice.publicKey.bytes,
                                     recipient: Array("bob".utf8), messageID: Array(id.utf8), body: [1, 2], signature: [])
        record = Array(record.prefix(record.count - 2))
        let truncated = bobMailbox.publicKey.testSeal(try Envelope.pad(record))
        #expect(throws: EnvelopeError.malformedRecord("the record is truncated")) { try open(truncated) }
    }

    @Test func badPaddingIsRefused() {
        let noMarker = bobMailbox.publicKey.testSeal([UInt8](repeating: 0, count: 464))
        #expect(throws: EnvelopeError.badPadding) { try open(noMarker) }
        let wrongMarker = bobMailbox.publicKey.testSeal([1] + [UInt8](repeating: 0x7F, count: 463))
        #expect(throws: EnvelopeError.badPadding) { try open(wrongMarker) }
    }

    @Test func paddingBeyondTheSmallestClassIsRefused() throws {
        var padded = try Envelope.pad(Envelope.record(version: 1, sender: Array("alice".utf8), senderKey: alice.publicKey.bytes,
                                                      recipient: Array("bob".utf8), messageID: Array(id.utf8),
                                                      body: text("hello").testBody, signature: [UInt8](repeating: 0, count: 64)))
        padded += [UInt8](repeating: 0, count: 512)  // a valid 1 KiB size, but not the smallest class
        #expect(throws: EnvelopeError.badPadding) { try open(bobMailbox.publicKey.testSeal(padded)) }
    }

    @Test func unusableMailboxKeysAndUnencodableMessagesAreRefusedWhenSealing() throws {
        let zero = try #require(MailboxPublicKey(bytes: [UInt8](repeating: 0, count: 32)))
        #expect(!zero.isUsable)
        #expect(bobMailbox.publicKey.isUsable)
        #expect(throws: EnvelopeError.unusableMailboxKey) {
            try Envelope.seal(text("hi"), id: id, from: "alice", identity: alice, to: "bob", mailboxKey: zero)
        }
        var odd = text("hi")
        odd.payload.unknownFields["score"] = .number(.infinity)
        #expect { try sealed(odd) } throws: { ($0 as? EnvelopeError)?.code == "envelope_invalid_body" }
    }

    @Test func invalidBodiesAreRefused() throws {
        #expect { try open(try craft(body: Array("not json".utf8))) } throws: { ($0 as? EnvelopeError)?.code == "envelope_invalid_body" }
        #expect { try open(try craft(body: text("").testBody)) } throws: { ($0 as? EnvelopeError)?.code == "envelope_invalid_body" }
        let farAway = ChatMessage(type: .location, sender: Sender(id: "alice"), payload: Payload(location: Location(latitude: 91, longitude: 0)), timestamp: 1)
        #expect { try open(try craft(body: farAway.testBody)) } throws: { ($0 as? EnvelopeError)?.code == "envelope_invalid_body" }
        let receipt = ChatMessage(type: .receipt, sender: Sender(id: "alice"), payload: Payload(receipt: Receipt(kind: .read, messageIDs: ["x"])), timestamp: 1)
        #expect { try open(try craft(body: receipt.testBody)) } throws: { ($0 as? EnvelopeError)?.code == "envelope_invalid_body" }
        let notAPicture = ChatMessage(type: .picture, sender: Sender(id: "alice"),
                                      payload: Payload(attachments: [Attachment(mediaType: "text/html", data: [1])]), timestamp: 1)
        #expect { try open(try craft(body: notAPicture.testBody)) } throws: { ($0 as? EnvelopeError)?.code == "envelope_invalid_body" }
    }

    @Test func bodySenderMustBeTheSigner() throws {
        #expect(throws: EnvelopeError.senderMismatch) { try open(try craft(body: text("hi", from: "carol").testBody)) }
        #expect(throws: EnvelopeError.senderMismatch) {
            try Envelope.seal(text("hi", from: "carol"), id: id, from: "alice", identity: alice, to: "bob", mailboxKey: bobMailbox.publicKey)
        }
    }

    @Test func sealingRefusesInvalidIdentifiersAndMessages() {
        #expect(throws: EnvelopeError.malformedRecord("the message id is not valid")) { try sealed(id: "x") }
        #expect(throws: EnvelopeError.malformedRecord("the recipient is not a valid uid")) { try sealed(to: "b/ob") }
        #expect { try sealed(text("")) } throws: { ($0 as? EnvelopeError)?.code == "envelope_invalid_body" }
        let nan = ChatMessage(type: .location, sender: Sender(id: "alice"), payload: Payload(location: Location(latitude: .nan, longitude: 0)), timestamp: 1)
        #expect { try sealed(nan) } throws: { ($0 as? EnvelopeError)?.code == "envelope_invalid_body" }
    }

    @Test func otherLibsodiumBindingsSeeAStandardSealedBox() throws {
        // The outer layer is exactly crypto_box_seal: the generic opener yields the padded record.
        let padded = try #require(bobMailbox.open(sealed: try sealed()))
        #expect(padded.count == 512 - 48)
        #expect(padded[0] == 1)
        #expect(Array(padded[2..<7]) == Array("alice".utf8))
    }

    @Test func everyErrorHasADistinctCode() {
        let errors: [EnvelopeError] = [.invalidSize, .cannotDecrypt, .badPadding, .unsupportedVersion(0), .malformedRecord(""),
                                       .wrongRecipient, .wrongMessageID, .badSignature, .invalidBody(""), .senderMismatch, .tooLarge]
        #expect(Set(errors.map(\.code)).count == errors.count)
    }
}
