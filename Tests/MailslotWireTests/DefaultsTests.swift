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
