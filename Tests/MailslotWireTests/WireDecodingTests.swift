import Foundation
import MailslotWire
import Testing

/// WireDecoding reads flat client frames without JSONDecoder; whatever the text, the frame (or
/// the refusal) must be the one JSONDecoder gives.
@Suite struct WireDecodingTests {
    static let frames: [String] = [
        #"{"type":"ack","id":"01KF0000000000000000000001"}"#,
        #"{"type":"send","ref":"r1","to":"bob","id":"01KF0000000000000000000001","envelope":"AAAA"}"#,
        #" { "type" : "send" , "ref" : "a\"b\\c\/d\u00e9\ud83d\ude00" , "to" : null } "#,
        #"{"type":"ack","id":"x","unknown":"ignored","other":null}"#,
        #"{"type":"send","ttl_seconds":60,"to":"bob"}"#,
        #"{"type":"send","ttl_seconds":6e1}"#,
        #"{"type":"send","ttl_seconds":60.5}"#,
        #"{"type":"ack","extra":{"nested":[1,2]}}"#,
        #"{"type":null,"id":"x"}"#,
        #"{"id":"x"}"#,
        #"{"type":1}"#,
        #"{}"#,
        #"["type"]"#,
        #""ack""#,
        "{\"type\":\"ack\",\"id\":\"\u{00E9}\u{0301}\"}",
    ]

    @Test(arguments: frames)
    func aFrameDecodesAsJSONDecoderDecodesIt(_ text: String) {
        let data = Data(text.utf8)
        let direct = try? WireDecoding.decode(ClientFrame.self, from: data, maxDepth: 16)
        let general = try? JSONDecoder().decode(ClientFrame.self, from: data)
        #expect(direct == general)
        if text.hasPrefix(#"{"type":"send","ref""#) {
            #expect(direct == .send(ref: "r1", to: "bob", id: "01KF0000000000000000000001", envelope: [0, 0, 0]))
        }
    }

    @Test func strictnessStillComesFirst() {
        for text in [#"{"type":"ack","type":"send"}"#, #"{"type":"ack",}"#, "\u{FEFF}{\"type\":\"ack\"}", #"{"type":"a\u0000"#] {
            #expect(throws: WireDecodingError.self) { try WireDecoding.decode(ClientFrame.self, from: Data(text.utf8), maxDepth: 16) }
        }
    }

    /// Texts the strict check refuses; the one-pass reading of flat frames must refuse them too.
    static let refused: [String] = [
        #"{"type":"ack","type":"send"}"#,
        #"{"type":"ack","\u0074ype":"send"}"#,
        #"{"type":"ack",}"#,
        #"{"type":"ack"} x"#,
        #"{"type":"ack"}{"type":"ack"}"#,
        "\u{FEFF}{\"type\":\"ack\"}",
        "{\"type\":\"a\u{0001}\"}",
        #"{"type":"ack","id":"\ud800"}"#,
        #"{"type":"ack","id":"\udc00\ud800"}"#,
        #"{"type":"ack","id":"\x"}"#,
        #"{"type":"ack","id":"x"#,
        #"{"type":'ack'}"#,
        #"{type:"ack"}"#,
        #"{"type":"ack" "id":"x"}"#,
        #"{"type":nul}"#,
    ]

    @Test(arguments: frames + refused)
    func theTextPathAndTheDataPathAgree(_ text: String) {
        let fromText = Result { () throws(WireDecodingError) in try WireDecoding.clientFrame(text, maxDepth: 16) }
        let fromData = Result { () throws(WireDecodingError) in try WireDecoding.decode(ClientFrame.self, from: Data(text.utf8), maxDepth: 16) }
        #expect(fromText == fromData)
    }

    @Test(arguments: refused)
    func theOnePassReadingRefusesWhatTheStrictCheckRefuses(_ text: String) {
        #expect(throws: WireDecodingError.self) { try WireDecoding.validate(Data(text.utf8), maxDepth: 16) }
        #expect(Array(text.utf8).withUnsafeBufferPointer { StrictJSON.flatStringObject($0) } == nil)
    }

    @Test func theOnePassReadingRefusesBytesThatAreNotUTF8() {
        let bytes: [UInt8] = Array(#"{"type":"ack","id":""#.utf8) + [0xC3, 0x28] + Array(#""}"#.utf8)
        #expect(bytes.withUnsafeBufferPointer { StrictJSON.flatStringObject($0) } == nil)
        #expect(throws: WireDecodingError.syntax) { try WireDecoding.decode(ClientFrame.self, from: Data(bytes), maxDepth: 16) }
    }

    @Test func theDepthLimitStillApplies() {
        #expect(throws: WireDecodingError.tooDeep(limit: 0)) { try WireDecoding.clientFrame(#"{"type":"ack","id":"x"}"#, maxDepth: 0) }
    }
}
