@testable import MailslotCrypto

/// Builds envelopes field by field, including wrong ones, to reach the checks that sit behind
/// the sealed box. Shared by the envelope tests and the spec-vector generator.
struct EnvelopeCrafter {
    let senderUID: String
    let identity: IdentityKeyPair
    let mailbox: MailboxPublicKey

    func signature(sender: String? = nil, recipient: String, id: String, body: [UInt8], key: IdentityKeyPair? = nil) -> [UInt8] {
        let key = key ?? identity
        return key.sign(preAuthenticationEncoding([
            Array("mailslot-envelope-v1".utf8), Array((sender ?? senderUID).utf8), key.publicKey.bytes,
            Array(recipient.utf8), mailbox.bytes, Array(id.utf8), body,
        ]))
    }

    func craft(version: UInt8 = 1, sender: String? = nil, key: IdentityKeyPair? = nil, recipient: String, id: String,
               body: [UInt8], signature: [UInt8]? = nil, trailing: [UInt8] = []) throws -> [UInt8] {
        let key = key ?? identity
        let record = Envelope.record(
            version: version, sender: Array((sender ?? senderUID).utf8), senderKey: key.publicKey.bytes,
            recipient: Array(recipient.utf8), messageID: Array(id.utf8), body: body,
            signature: signature ?? self.signature(sender: sender, recipient: recipient, id: id, body: body, key: key))
        return mailbox.testSeal(try Envelope.pad(record + trailing))
    }
}

extension ChatMessage {
    /// The encoded body of a message the test knows to be encodable.
    var testBody: [UInt8] { try! encoded() }
}

extension MailboxPublicKey {
    /// Seals to a key the test knows to be usable.
    func testSeal(_ plaintext: [UInt8]) -> [UInt8] { seal(plaintext)! }
}
