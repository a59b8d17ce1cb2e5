import Testing
@testable import MailslotCrypto

@Suite struct PrimitivesTests {
    @Test func base64urlIsStrict() {
        #expect(Base64URL.encode([0xFB, 0xFF]) == "-_8")
        #expect(Base64URL.decode("-_8") == [0xFB, 0xFF])
        #expect(Base64URL.decode("") == [])
        #expect(Base64URL.decode("-_8=") == nil, "padding")
        #expect(Base64URL.decode("+/8") == nil, "standard alphabet")
        #expect(Base64URL.decode("-_9") == nil, "non-zero trailing bits")
        #expect(Base64URL.decode("A") == nil, "impossible length")
        #expect(Base64URL.decode("AA AA") == nil, "whitespace")
        // libsodium 1.0.18 reads bytes ≥ 0x80 as `_`: "AA\u{E9}" decoded as "AA__" (found by tools/fuzz).
        #expect(Base64URL.decode("AA\u{E9}") == nil, "non-ASCII")
        #expect(Base64URL.decode("kjo\u{EB}Wc3R1dnd4") == nil, "non-ASCII inside")
        for count in 0..<40 {
            let bytes = randomBytes(count)
            #expect(Base64URL.decode(Base64URL.encode(bytes)) == bytes)
        }
    }

    /// `decodedCount` (the relay's check of an envelope it stores as text) accepts exactly what
    /// `decode` accepts, and counts what it would give.
    @Test func decodedCountAgreesWithDecode() {
        let alphabet = Array("ABCZaz09-_+/=. \u{E9}")
        var texts = ["", "-_8", "-_8=", "+/8", "-_9", "A", "AA", "AB", "AAA", "AAB", "AA AA", "AA\u{E9}", "kjo\u{EB}Wc3R1dnd4"]
        for count in 0..<40 { texts.append(Base64URL.encode(randomBytes(count))) }
        for _ in 0..<2000 {
            let length = Int.random(in: 0...9)
            texts.append(String((0..<length).map { _ in alphabet.randomElement()! }))
        }
        for text in texts {
            #expect(Base64URL.decodedCount(text) == Base64URL.decode(text)?.count, "\(text)")
        }
    }

    @Test func constantTimeComparison() {
        #expect(constantTimeEquals([1, 2, 3], [1, 2, 3]))
        #expect(!constantTimeEquals([1, 2, 3], [1, 2, 4]))
        #expect(!constantTimeEquals([1, 2, 3], [1, 2]))
        #expect(constantTimeEquals([], []))
        #expect(SecretBytes(copying: [9, 9]) == SecretBytes(copying: [9, 9]))
        #expect(SecretBytes(copying: [9, 9]) != SecretBytes(copying: [9, 8]))
    }

    @Test func wipeZeroes() {
        var secret: [UInt8] = [1, 2, 3, 4]
        wipe(&secret)
        #expect(secret == [0, 0, 0, 0])
    }

    @Test func randomnessIsFreshAndUniformIsInRange() {
        #expect(randomBytes(32) != randomBytes(32))
        #expect(randomBytes(0).isEmpty)
        #expect((0..<1000).allSatisfy { _ in randomUniform(10) < 10 })
        #expect(SecretBytes(randomCount: 32) != SecretBytes(randomCount: 32))
    }

    @Test func signaturesAndSealedBoxes() throws {
        let identity = IdentityKeyPair()
        let message: [UInt8] = Array("hello".utf8)
        let signature = identity.sign(message)
        #expect(identity.publicKey.verify(signature: signature, of: message))
        #expect(!identity.publicKey.verify(signature: signature, of: message + [0]))
        #expect(!IdentityKeyPair().publicKey.verify(signature: signature, of: message))
        #expect(!identity.publicKey.verify(signature: Array(signature.dropLast()), of: message))

        let mailbox = MailboxKeyPair()
        let box = mailbox.publicKey.testSeal(message)
        #expect(box.count == message.count + 48)
        #expect(mailbox.open(sealed: box) == message)
        #expect(MailboxKeyPair().open(sealed: box) == nil)
        #expect(mailbox.open(sealed: Array(box.dropLast())) == nil)
        #expect(mailbox.open(sealed: []) == nil)
        let restored = try #require(MailboxKeyPair(secretKey: mailbox.secretKey))
        #expect(restored.publicKey == mailbox.publicKey)
    }

    @Test func identityKeyFromSecretChecksConsistency() {
        let pair = IdentityKeyPair()
        #expect(IdentityKeyPair(secretKey: pair.secretKey)?.publicKey == pair.publicKey)
        #expect(IdentityKeyPair(secretKey: SecretBytes(copying: [UInt8](repeating: 1, count: 63))) == nil)
    }

    @Test func paeMatchesThePasetoExamples() {
        // PASETO spec §2.2.1 examples.
        #expect(preAuthenticationEncoding([]) == [0, 0, 0, 0, 0, 0, 0, 0])
        #expect(preAuthenticationEncoding([[]]) == [1, 0, 0, 0, 0, 0, 0, 0] + [0, 0, 0, 0, 0, 0, 0, 0])
        #expect(preAuthenticationEncoding([Array("test".utf8)])
                == [1, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0] + Array("test".utf8))
    }

    @Test func identifiers() {
        for uid in ["a", "alice", "A.b_c-9", String(repeating: "x", count: 128), "..."] { #expect(Identifier.isValidUID(uid), "\(uid)") }
        for uid in ["", ".", "..", "a/b", "a b", "é", "a\u{0}", String(repeating: "x", count: 129), "a%2Fb"] {
            #expect(!Identifier.isValidUID(uid), "\(uid)")
        }
        for id in ["01JD0000000000000000000000", String(repeating: "a", count: 16), String(repeating: "-", count: 64)] {
            #expect(Identifier.isValidMessageID(id))
        }
        for id in [String(repeating: "a", count: 15), String(repeating: "a", count: 65), "0123456789abcde.", "0123456789abcdeé"] {
            #expect(!Identifier.isValidMessageID(id))
        }
    }
}
