import Foundation
import MailslotWire
import Testing

@Suite struct DefaultsTests {
    @Test func defaultTokensAreAcceptedByADefaultVerifier() throws {
        let key = IdentityKeyPair()
        let token = try TokenIssuer(key: key, audience: Defaults.audience).mint(uid: "alice", lifetime: Defaults.tokenLifetime)
        let verified = try TokenVerifier(issuerKeys: [key.publicKey], audience: Defaults.audience).verify(token)
        #expect(verified.expiresAt - verified.issuedAt == Double(Defaults.tokenLifetime))
        #expect(Defaults.tokenLifetime <= CustomToken.maxLifetime)
    }
}

@Suite struct MessageIDTests {
    @Test func idsAreValidUniqueAndTimeOrdered() {
        let earlier = MessageID.generate(at: Date(timeIntervalSince1970: 1_800_000_000))
        let later = MessageID.generate(at: Date(timeIntervalSince1970: 1_800_000_000.002))
        #expect(earlier.count == 26)
        #expect(Identifier.isValidMessageID(earlier))
        #expect(earlier < later, "string order is time order")
        #expect(Set((0..<1000).map { _ in MessageID.generate() }).count == 1000)
        // The timestamp is in the first 10 characters: the same millisecond gives the same prefix.
        let a = MessageID.generate(at: Date(timeIntervalSince1970: 1_800_000_000)), b = MessageID.generate(at: Date(timeIntervalSince1970: 1_800_000_000))
        #expect(a.prefix(10) == b.prefix(10))
        #expect(MessageID.generate(at: Date(timeIntervalSince1970: 0)).hasPrefix("0000000000"))
    }
}
