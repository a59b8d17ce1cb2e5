import MailslotCrypto
import Testing

/// ``StrictJSON/numberText(ofMember:in:maxDepth:)``: a top-level member's number literal as
/// written, which a decoder's integer no longer tells (`4e9` and `4000000000` decode alike).
@Suite struct StrictJSONNumberTextTests {
    @Test func aMembersNumberIsReadAsWritten() {
        func text(_ json: String, _ name: String = "n") -> String? { StrictJSON.numberText(ofMember: name, in: Array(json.utf8)) }
        #expect(text(#"{"n":4e9}"#) == "4e9")
        #expect(text(#"{ "a" : [1, {"n": 2}], "n" : -0.50E+3 }"#) == "-0.50E+3", "its own member, not a nested one")
        #expect(text(#"{"a":{"n":2}}"#) == nil, "a nested member is not the object's")
        #expect(text(#"{"\u006e":7}"#) == "7", "names compared unescaped")
        #expect(text(#"{"n":"7"}"#) == nil && text(#"{"n":null}"#) == nil, "not a number")
        #expect(text(#"{"m":7}"#) == nil && text("[7]") == nil && text("7") == nil)
        #expect(text(#"{"n":7,"n":8}"#) == nil && text(#"{"n":07}"#) == nil && text(#"{"n":7} x"#) == nil, "not strict JSON")
    }
}
