import Crypto
import Foundation
import MailslotCrypto
import Testing
@testable import MailslotRelay

/// The Web Push payload encryption against RFC 8291 Appendix A, byte for byte, and the wake-up
/// body's fixed shape (spec/push.md §5.1).
@Suite struct WebPushCipherTests {
    // RFC 8291 Appendix A ("Intermediate Values for Encryption").
    static let plaintext = "When I grow up, I want to be a watermelon"
    static let asPrivate = "yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"
    static let asPublic = "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8"
    static let uaPrivate = "q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94"
    static let uaPublic = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
    static let salt = "DGv6ra1nlYgDCS1FRnbzlw"
    static let auth = "BTBZMqHH6r4Tts7J_aSIgg"
    static let body = "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN"

    static func bytes(_ text: String) -> [UInt8] { Base64URL.decode(text)! }

    static var cipher: WebPushCipher { try! WebPushCipher(p256dh: bytes(uaPublic), auth: bytes(auth)) }
    static var ephemeral: P256.KeyAgreement.PrivateKey { try! .init(rawRepresentation: bytes(asPrivate)) }
    static var userAgent: P256.KeyAgreement.PrivateKey { try! .init(rawRepresentation: bytes(uaPrivate)) }

    @Test func reproducesAppendixA() {
        #expect(Base64URL.encode(Self.ephemeral.publicKey.x963Representation) == Self.asPublic)
        // The RFC's single record: the plaintext, then the last-record delimiter, no padding.
        let sealed = Self.cipher.seal(record: Array(Self.plaintext.utf8) + [0x02], ephemeralKey: Self.ephemeral, salt: Self.bytes(Self.salt))
        #expect(Base64URL.encode(sealed) == Self.body)
    }

    @Test func appendixABodyOpensWithTheTestOpener() throws {
        let opened = try WebPushTestOpener.open(Self.bytes(Self.body), privateKey: Self.userAgent, auth: Self.bytes(Self.auth))
        #expect(String(decoding: opened, as: UTF8.self) == Self.plaintext)
    }

    @Test(arguments: ["", "aB3_-x", String(repeating: "Z", count: 48)])
    func wakeBodyIsAlways166BytesAndOpensToTheTag(tag: String) throws {
        let body = try Self.cipher.wakeBody(tag: tag)
        #expect(body.count == WebPushCipher.wakeBodyBytes)
        #expect(Array(body[16..<21]) == [0, 0, 0x10, 0, 65])  // rs = 4096, idlen = 65
        let opened = try WebPushTestOpener.open(body, privateKey: Self.userAgent, auth: Self.bytes(Self.auth))
        #expect(String(decoding: opened, as: UTF8.self) == tag)
    }

    @Test func freshKeyAndSaltEachTime() throws {
        let one = try Self.cipher.wakeBody(tag: "same"), two = try Self.cipher.wakeBody(tag: "same")
        #expect(one[0..<16] != two[0..<16])
        #expect(one[21..<86] != two[21..<86])
    }

    @Test func wrongAuthDoesNotOpen() throws {
        let body = try Self.cipher.wakeBody(tag: "aB3_-x")
        var wrong = Self.bytes(Self.auth)
        wrong[0] ^= 1
        #expect(throws: WebPushTestOpener.Failure.decrypt) {
            try WebPushTestOpener.open(body, privateKey: Self.userAgent, auth: wrong)
        }
    }

    @Test func refusesBadKeysAndLongTags() {
        var offCurve = Self.bytes(Self.uaPublic)
        offCurve[64] ^= 1
        #expect(throws: WebPushCipher.Failure.invalidPublicKey) { try WebPushCipher(p256dh: offCurve, auth: Self.bytes(Self.auth)) }
        #expect(throws: WebPushCipher.Failure.invalidPublicKey) { try WebPushCipher(p256dh: Array(Self.bytes(Self.uaPublic).prefix(33)), auth: Self.bytes(Self.auth)) }
        #expect(throws: WebPushCipher.Failure.invalidAuthSecret) { try WebPushCipher(p256dh: Self.bytes(Self.uaPublic), auth: [1, 2, 3]) }
        #expect(throws: WebPushCipher.Failure.tagTooLong) { try Self.cipher.wakeBody(tag: String(repeating: "Z", count: 49)) }
    }
}
