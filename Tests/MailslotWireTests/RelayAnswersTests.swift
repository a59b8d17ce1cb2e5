import Foundation
import MailslotWire
import Testing

/// The client's decoding of what a relay sends (``RelayAnswers``): what a relay writes decodes;
/// every number and identifier outside the range spec/protocol.md gives it is refused as
/// ``RelayAnswerError/outOfRange(_:)``, naming the member — never passed on to be computed with.
@Suite struct RelayAnswersTests {
    let id = "01KF0000000000000000000042"
    let record = #"{"author":"alice","created_at":"2027-01-15T08:00:00.000Z","envelope":"\#(Base64URL.encode([UInt8](repeating: 0, count: 512)))","expires_at":"2027-01-22T08:00:00.000Z","id":"01KF0000000000000000000042","seq":7,"size":512}"#

    func refusal<T: Decodable>(_ type: T.Type, _ text: String) -> RelayAnswerError? {
        do {
            _ = try RelayAnswers.decode(type, from: Data(text.utf8))
            return nil
        } catch { return error }
    }

    func member(_ error: RelayAnswerError?) -> String? {
        if case .outOfRange(let outOfRange) = error { outOfRange.member } else { nil }
    }

    @Test func whatARelayWritesDecodes() throws {
        #expect(try RelayAnswers.decode(PrekeyCount.self, from: Data(#"{"count":0}"#.utf8)) == PrekeyCount(count: 0))
        #expect(try RelayAnswers.decode(PrekeyCount.self, from: Data(#"{"count":4294967295}"#.utf8)).count == 4_294_967_295)
        let page = try RelayAnswers.decode(MessagePage.self, from: Data(#"{"messages":[\#(record)],"next":"7"}"#.utf8))
        #expect(page.messages.map(\.seq) == [7] && page.next == "7")
        #expect(try RelayAnswers.decode(MessagePage.self, from: Data(#"{"messages":[],"next":null}"#.utf8)).messages.isEmpty)
        #expect(try RelayAnswers.frame(#"{"type":"ready","pending":0,"prekeys":100}"#) == .ready(pending: 0, prekeys: 100))
        #expect(try RelayAnswers.frame(#"{"type":"message","message":\#(record)}"#).message?.id == id)
        let problem = try RelayAnswers.decode(Problem.self, from: Data(#"{"code":"rate_limited","status":429,"title":"rate limited","retry_after":2}"#.utf8))
        #expect(problem.retryAfter == 2)
        // The relay's own encodings round-trip.
        let encoded = try JSONEncoder().encode(RelayFrame.sent(ref: "r", created: true, message: try RelayAnswers.decode(MessageRecord.self, from: Data(record.utf8))))
        #expect(try RelayAnswers.decode(RelayFrame.self, from: encoded).created == true)
    }

    @Test(arguments: ["-9223372036854775808", "-5000000", "-1", "4294967296", "9223372036854775807"])
    func aPrekeyCountNoRelayHoldsIsRefused(_ count: String) {
        #expect(member(refusal(PrekeyCount.self, #"{"count":\#(count)}"#)) == "count")
        #expect(member(refusal(RelayFrame.self, #"{"type":"ready","pending":0,"prekeys":\#(count)}"#)) == "prekeys")
    }

    @Test func numbersAndIdsOutOfRangeAreRefusedByMember() {
        let lies: [(String, String, String)] = [
            (#""size":512"#, #""size":-1"#, "size"), (#""size":512"#, #""size":2097152"#, "size"), (#""size":512"#, #""size":768"#, "size"),
            (#""seq":7"#, #""seq":0"#, "seq"), (#""seq":7"#, #""seq":-9223372036854775808"#, "seq"),
            (#""envelope":"AAAA"#, #""envelope":"AA"#, "size"),
            (id, "../../sessions/current", "id"), (#""author":"alice""#, #""author":"a b""#, "author"),
            (#""created_at":"2027-01-15T08:00:00.000Z""#, #""created_at":"yesterday""#, "created_at"),
        ]
        for (truth, lie, name) in lies {
            #expect(member(refusal(MessageRecord.self, record.replacingOccurrences(of: truth, with: lie))) == name, "\(lie)")
            #expect(member(refusal(RelayFrame.self, #"{"type":"message","message":\#(record.replacingOccurrences(of: truth, with: lie))}"#)) == name)
        }
        #expect(member(refusal(RelayFrame.self, #"{"type":"ready","pending":-1}"#)) == "pending")
        #expect(member(refusal(RelayFrame.self, #"{"type":"acked","id":"x/y"}"#)) == "id")
        #expect(member(refusal(Problem.self, #"{"code":"unavailable","status":503,"title":"u","retry_after":-1}"#)) == "retry_after")
        #expect(member(refusal(Problem.self, #"{"code":"unavailable","status":5030,"title":"u"}"#)) == "status")
        #expect(member(refusal(PrekeyClaim.self, #"{"prekey":{"id":0,"key":"GNZZkhNkvsEHS3R2KRNIzA7V8F-LcxrTFjWpCAmBLQM"}}"#)) == "id")
        #expect(refusal(PrekeyClaim.self, #"{"prekey":{"id":4294967296,"key":"GNZZkhNkvsEHS3R2KRNIzA7V8F-LcxrTFjWpCAmBLQM"}}"#) == .shape(type: "PrekeyClaim"))
    }

    @Test func aPageMustEndOrMoveOn() {
        #expect(member(refusal(MessagePage.self, #"{"messages":[],"next":"7"}"#)) == "next", "more, after nothing")
        for cursor in ["-1", "07", "+7", "1e3", "9223372036854775808", ""] {
            #expect(member(refusal(MessagePage.self, #"{"messages":[\#(record)],"next":"\#(cursor)"}"#)) == "next", "\(cursor)")
        }
        let tooMany = Array(repeating: record, count: Defaults.maxPageSize + 1).joined(separator: ",")
        #expect(member(refusal(MessagePage.self, #"{"messages":[\#(tooMany)],"next":null}"#)) == "messages")
    }

    @Test func aGrantMustBeUsableInAHeaderAndNeverEchoesItsTokens() {
        let secret = Base64URL.encode([UInt8](repeating: 7, count: 32))
        let grant = #"{"uid":"bob","session":"mss_\#(secret)","refresh":"msr_\#(secret)","expires_at":"2027-01-15T08:00:00.000Z","refresh_expires_at":"2027-01-22T08:00:00.000Z"}"#
        #expect(refusal(SessionGrant.self, grant) == nil)
        let smuggled = grant.replacingOccurrences(of: "mss_\(secret)", with: #"mss_x\r\nX-Evil: 1"#)
        let error = refusal(SessionGrant.self, smuggled)
        #expect(member(error) == "session")
        #expect(!"\(String(describing: error))".contains("Evil"), "a refused token is not echoed")
        #expect(member(refusal(SessionGrant.self, grant.replacingOccurrences(of: #""uid":"bob""#, with: #""uid":"..""#))) == "uid")
    }

    @Test func notJSONAndTheWrongShapeAreTheirOwnErrors() {
        #expect(refusal(PrekeyCount.self, #"{"count":1,"count":2}"#) == .notJSON(.duplicateMember))
        #expect(refusal(PrekeyCount.self, #"{"count":"1"}"#) == .shape(type: "PrekeyCount"))
        #expect(refusal(PrekeyCount.self, String(repeating: "[", count: 40)) != nil)
    }
}
