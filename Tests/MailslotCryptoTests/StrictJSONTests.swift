import Testing
@testable import MailslotCrypto

@Suite struct StrictJSONTests {
    @Test(arguments: [#"{}"#, #"[]"#, #" {"a":[1,-2.5e+3,0,true,false,null,"x\u00e9\ud83d\ude00\n"]} "#, #""s""#, "0", "-0.0",
                      #"{"a":{"b":{"c":[]}}}"#, #"{"a":1,"A":2}"#, "\u{1F600}".isEmpty ? "" : #"["é😀"]"#])
    func accepts(text: String) throws {
        try StrictJSON.validate(Array(text.utf8))
    }

    @Test(arguments: [#"{"a":1,}"#, #"[1,]"#, "\u{FEFF}{}", #"{"a":1}{"#, "01", "1.", ".5", "+1", "NaN", "Infinity", #"'a'"#,
                      #"{a:1}"#, #"["\x"]"#, #"["\ud800"]"#, #"["\udc00x"]"#, "[\"\u{01}\"]", "", " ", #"{"a" 1}"#, "tru", "[1 2]",
                      #"// x"#, #"{"a":1 /* */}"#])
    func refusesSyntax(text: String) {
        #expect(throws: StrictJSON.Failure.self) { try StrictJSON.validate(Array(text.utf8)) }
    }

    @Test func refusesDuplicateMembersHoweverEscaped() {
        #expect(throws: StrictJSON.Failure.duplicateMember("a")) { try StrictJSON.validate(Array(#"{"a":1,"a":2}"#.utf8)) }
        #expect(throws: StrictJSON.Failure.duplicateMember("a")) { try StrictJSON.validate(Array(#"{"a":1,"\u0061":2}"#.utf8)) }
        // The same name in different objects is fine.
        #expect(throws: Never.self) { try StrictJSON.validate(Array(#"[{"a":1},{"a":2}]"#.utf8)) }
    }

    @Test func refusesDepthBeyondTheLimit() {
        let deep = String(repeating: "[", count: 65) + String(repeating: "]", count: 65)
        #expect(throws: StrictJSON.Failure.tooDeep) { try StrictJSON.validate(Array(deep.utf8)) }
        let ok = String(repeating: "[", count: 64) + String(repeating: "]", count: 64)
        #expect(throws: Never.self) { try StrictJSON.validate(Array(ok.utf8)) }
        // Far deeper than any parser's stack would survive: refused without recursion trouble.
        let hostile = String(repeating: "[", count: 1_000_000)
        #expect(throws: StrictJSON.Failure.tooDeep) { try StrictJSON.validate(Array(hostile.utf8)) }
    }

    /// Foundation's JSONDecoder traps (SIGILL) decoding an integer from some very long literals;
    /// the check refuses them first, so no input can crash a client or the relay.
    static let crashingNumber = "90071992547409930" + String(repeating: "0", count: 150) + "e-151"

    @Test func refusesNumberLiteralsLongerThan64Characters() throws {
        try StrictJSON.validate(Array(("[" + String(repeating: "1", count: 64) + "]").utf8))
        #expect(throws: StrictJSON.Failure.self) { try StrictJSON.validate(Array(("[" + String(repeating: "1", count: 65) + "]").utf8)) }
        #expect(throws: StrictJSON.Failure.self) { try StrictJSON.validate(Array(Self.crashingNumber.utf8)) }
        let body = #"{"payload":{"text":"hi"},"sender":{"id":"a"},"timestamp":\#(Self.crashingNumber),"type":"text"}"#
        #expect(throws: EnvelopeError.self) { try ChatMessage.decode(Array(body.utf8)) }
    }

    @Test func refusesInvalidUTF8() {
        #expect(throws: StrictJSON.Failure.self) { try StrictJSON.validate([0x22, 0xFF, 0x22]) }
        #expect(throws: StrictJSON.Failure.self) { try StrictJSON.validate([0x22, 0xC3, 0x22]) }
    }

    @Test func formatsUseIt() throws {
        let key = IdentityKeyPair()
        let footer = Array(#"{"kid":"\#(key.publicKey.paserkID)",}"#.utf8)
        let token = PasetoV4Public.sign(Array(#"{"sub":"a","aud":"x","iat":"2030-01-01T00:00:00Z","exp":"2030-01-01T00:01:00Z"}"#.utf8),
                                        with: key, footer: footer)
        #expect { try TokenVerifier(issuerKeys: [key.publicKey], audience: "x").verify(token) } throws: { ($0 as? TokenError)?.code == "token_malformed" }
        let duplicateSub = PasetoV4Public.sign(Array(#"{"sub":"a","sub":"b","aud":"x","iat":"2030-01-01T00:00:00Z","exp":"2030-01-01T00:01:00Z"}"#.utf8),
                                               with: key, footer: Array(#"{"kid":"\#(key.publicKey.paserkID)"}"#.utf8))
        #expect { try TokenVerifier(issuerKeys: [key.publicKey], audience: "x").verify(duplicateSub) } throws: { ($0 as? TokenError)?.code == "token_malformed" }
        #expect(throws: EnvelopeError.self) {
            try ChatMessage.decode(Array(#"{"payload":{"text":"hi"},"sender":{"id":"a"},"timestamp":1,"type":"text",}"#.utf8))
        }
    }
}
