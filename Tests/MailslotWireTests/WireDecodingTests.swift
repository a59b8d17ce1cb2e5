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
}
