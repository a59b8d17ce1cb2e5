// Fuzz target `envelope-open`: Envelope.open (Sources/MailslotCrypto/Formats/Envelope.swift) as
// `bob` with the fixed mailbox key pair, for the fixed message id. The first byte picks what the
// rest of the input is:
//
//   0  the envelope itself. Mutated sealed boxes never decrypt, so this mode covers the size and
//      decryption checks; the spec's vectors seed it.
//   1  the inner record: the harness pads it and seals it to bob's key (any sender can), so the
//      padding check, the record reader and everything after it see the fuzzer's bytes.
//   2  the padded plaintext: zero-extended to the smallest size class and sealed, for the
//      padding-stripping code.
//   3  the chat-message body: the harness builds a record around it signed by alice, so the
//      body parser (ChatMessage.decode) is reached past the signature check.

import Foundation
import MailslotWire

@_cdecl("LLVMFuzzerTestOneInput")
public func envelopeOpenOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = bytes(data, size)
    guard let mode = input.first else { return 0 }
    let rest = Array(input.dropFirst())
    switch mode % 4 {
    case 0: openAndCheck(rest)
    case 1: if let envelope = sealPaddedToRecipient(rest) { openAndCheck(envelope) }
    case 2: openPadded(rest)
    default: openSignedBody(rest)
    }
    return 0
}

/// Opens `envelope` and checks what any successful open promises.
@discardableResult
private func openAndCheck(_ envelope: [UInt8]) -> Result<OpenedEnvelope, EnvelopeError> {
    let result = Result { () throws(EnvelopeError) in
        try Envelope.open(envelope, id: Fixed.messageID, recipient: Fixed.recipient, keys: Fixed.recipientKeys)
    }
    if case .success(let opened) = result {
        expect(opened.messageID == Fixed.messageID, "an envelope opened under another message id")
        expect(Identifier.isValidUID(opened.sender), "an envelope opened with an invalid sender uid")
        expect(opened.message.sender.id == opened.sender, "an envelope opened whose body names another sender")
        expect(envelope.count >= Envelope.minimumSize && envelope.count.nonzeroBitCount == 1,
               "an envelope of \(envelope.count) bytes, not a size class, opened")
    }
    return result
}

/// The fuzzer's bytes as the padded plaintext, zero-extended to the smallest size class.
private func openPadded(_ plaintext: [UInt8]) {
    var size = Envelope.minimumSize
    while size - 48 < plaintext.count { size <<= 1 }
    guard size <= Envelope.maximumSize,
          let envelope = Fixed.recipientKeys.publicKey.seal(plaintext + [UInt8](repeating: 0, count: size - 48 - plaintext.count))
    else { return }
    openAndCheck(envelope)
}

/// The fuzzer's bytes as the body of a record alice signed for bob: every check before the body
/// passes, so the outcome depends on the body alone.
private func openSignedBody(_ body: [UInt8]) {
    let sender = Array(Fixed.sender.utf8), recipient = Array(Fixed.recipient.utf8), id = Array(Fixed.messageID.utf8)
    let senderKey = Fixed.senderIdentity.publicKey.bytes
    let signature = Fixed.senderIdentity.sign(preAuthenticationEncoding([
        Array("mailslot-envelope-v1".utf8), sender, senderKey, recipient, Fixed.recipientKeys.publicKey.bytes, id, body,
    ]))
    let length = UInt32(body.count)
    var record: [UInt8] = [Envelope.version, UInt8(sender.count)] + sender + senderKey
    record += [UInt8(recipient.count)] + recipient + [UInt8(id.count)] + id
    record += [UInt8(length >> 24), UInt8(length >> 16 & 0xFF), UInt8(length >> 8 & 0xFF), UInt8(length & 0xFF)]
    record += body + signature
    guard let envelope = sealPaddedToRecipient(record) else { return }

    switch openAndCheck(envelope) {
    case .success(let opened):
        expect(opened.body == body, "the opened body differs from the signed one")
        expect(opened.sender == Fixed.sender && opened.senderKey == Fixed.senderIdentity.publicKey,
               "the opened envelope names another signer")
        // The body must survive the client's own re-encoding unchanged (unknown fields included).
        do {
            let again = try ChatMessage.decode(try opened.message.encoded())
            expect(again == opened.message, "a chat message changed in a decode-encode-decode round trip")
        } catch {
            expect(false, "a chat message that opened does not decode after re-encoding: \(error.code)")
        }
    case .failure(let error):
        switch error {
        case .invalidBody, .senderMismatch: break
        default: expect(false, "a well-formed signed record was refused with \(error.code)")
        }
    }
}

/// The spec's envelope vectors (mode 0), their bodies (mode 3), records built from them (mode 1)
/// and a few hand-made bodies for the message types and the unknown-field paths.
func fuzzSeeds(root: String) -> [(name: String, bytes: [UInt8])] {
    var seeds: [(name: String, bytes: [UInt8])] = []
    let vectors = Seeds.json(root, "spec/vectors/envelopes.json")
    for (index, vector) in Seeds.list(vectors, "cases").enumerated() {
        guard let text = vector["envelope"] as? String, let envelope = Base64URL.decode(text) else { continue }
        // The harness's key must open the vectors as the spec says, or the seeds would stop at the seal.
        if let id = vector["id"] as? String, let recipient = vector["recipient"] as? String, let expected = vector["expect"] as? String {
            let outcome: String
            do { _ = try Envelope.open(envelope, id: id, recipient: recipient, keys: Fixed.recipientKeys); outcome = "ok" } catch {
                outcome = error.code
            }
            expect(outcome == expected, "envelopes.json case \(index): the harness got \(outcome), the vector says \(expected)")
        }
        seeds.append(("vector-\(index)", Seeds.mode(0, envelope)))
        if let body = vector["body"] as? String { seeds.append(("vector-body-\(index)", Seeds.mode(3, Array(body.utf8)))) }
        // The vector's own padded plaintext, when this key opens it: a record signed by its sender.
        if let padded = Fixed.recipientKeys.open(sealed: envelope) {
            seeds.append(("vector-padded-\(index)", Seeds.mode(2, padded)))
            if let marker = padded.lastIndex(where: { $0 != 0 }) {
                seeds.append(("vector-record-\(index)", Seeds.mode(1, padded[..<marker])))
            }
        }
    }
    let bodies = [
        #"{"payload":{"text":"hi"},"sender":{"id":"alice","name":"A","profile_image":"https://x/y.png"},"timestamp":1,"type":"text"}"#,
        #"{"payload":{"attachments":[{"data":"AAEC","media_type":"image/png","name":"a.png"}],"text":"c"},"sender":{"id":"alice"},"timestamp":2,"type":"picture"}"#,
        #"{"payload":{"location":{"latitude":-90,"longitude":180.5e-1}},"sender":{"id":"alice"},"timestamp":3,"type":"location"}"#,
        #"{"payload":{"receipt":{"kind":"read","message_ids":["01KF0000000000000000000000"]}},"sender":{"id":"alice"},"timestamp":4,"type":"receipt"}"#,
        #"{"payload":{"typing":{"active":true}},"sender":{"id":"alice"},"timestamp":5,"type":"typing"}"#,
        #"{"extra":[null,true,1.5,"s",{"k":[]}],"payload":{"more":{"a":-0.0}},"sender":{"id":"alice"},"timestamp":6,"type":"poll"}"#,
        #"{"payload":{"text":"\u00e9\ud83d\ude00"},"sender":{"id":"alice"},"timestamp":-7,"type":"text","\u00e9":1,"e\u0301":2}"#,
    ]
    for (index, body) in bodies.enumerated() { seeds.append(("body-\(index)", Seeds.mode(3, Array(body.utf8)))) }
    return seeds
}
