import Foundation
import MailslotWire
import Testing

/// Client and relay frames as types: each case reads and writes the JSON spec/protocol.md §8
/// shows, members a type needs are required, and unknown types are kept as such.
@Suite struct FrameTests {
    let id = "01KF0000000000000000000042"

    func text(_ frame: some Encodable) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(frame), as: UTF8.self)
    }

    func client(_ text: String) -> ClientFrame? {
        try? WireDecoding.decode(ClientFrame.self, from: Data(text.utf8), maxDepth: 16)
    }

    @Test func clientFramesReadAndWriteTheirMembers() throws {
        #expect(try text(ClientFrame.ack(id)) == #"{"id":"\#(id)","type":"ack"}"#)
        let send = ClientFrame.send(SendFrame(ref: "r1", to: "bob", id: id, envelope: "AAAA", ttlSeconds: 60, keyID: "k"))
        #expect(try text(send) == #"{"envelope":"AAAA","id":"\#(id)","key_id":"k","ref":"r1","to":"bob","ttl_seconds":60,"type":"send"}"#)
        #expect(client(try text(send)) == send)
        #expect(client(#"{"type":"send","to":"bob","id":"\#(id)","envelope":"AAAA","key_id":"k"}"#)
            == .send(SendFrame(ref: nil, to: "bob", id: id, envelope: "AAAA", keyID: "k")), "a send without a ref is answered without one")
        #expect(client(#"{"type":"ping","x":[1]}"#) == .unknown(type: "ping"))
        #expect(client(#"{"type":"ack","id":"\#(id)","extra":"ignored"}"#) == .ack(id))
    }

    /// `wake` (spec/protocol.md §8.3): a boolean or null, written only when set; the flat fast
    /// path leaves it to JSONDecoder, so both read it the same.
    @Test func sendFramesCarryWake() throws {
        let quiet = ClientFrame.send(SendFrame(ref: "r1", to: "bob", id: id, envelope: "AAAA", wake: false))
        #expect(try text(quiet) == #"{"envelope":"AAAA","id":"\#(id)","ref":"r1","to":"bob","type":"send","wake":false}"#)
        #expect(client(try text(quiet)) == quiet)
        #expect(client(#"{"type":"send","ref":"r1","to":"bob","id":"\#(id)","envelope":"AAAA","wake":null}"#)
            == .send(SendFrame(ref: "r1", to: "bob", id: id, envelope: "AAAA")))
        #expect(try text(ClientFrame.send(SendFrame(ref: "r1", to: "bob", id: id, envelope: "AAAA"))).contains("wake") == false)
        for wrong in [#""no""#, "0", "[]"] {
            #expect(client(#"{"type":"send","ref":"r1","to":"bob","id":"\#(id)","envelope":"AAAA","wake":\#(wrong)}"#) == nil, "\(wrong)")
        }
        let request = try JSONDecoder().decode(SendRequest.self, from: Data(#"{"envelope":"AAAA","wake":false}"#.utf8))
        #expect(request.wake == false)
        #expect(try JSONDecoder().decode(SendRequest.self, from: Data(#"{"envelope":"AAAA"}"#.utf8)).wake == nil)
    }

    @Test func aMemberATypeNeedsIsRequiredAndKnownMembersKeepTheirTypes() {
        for text in [#"{"type":"ack"}"#, #"{"type":"ack","id":null}"#, #"{"type":"send","id":"x","envelope":"AAAA"}"#,
                     #"{"type":"send","to":"bob","id":"x"}"#, #"{"type":"ack","id":"x","ttl_seconds":"60"}"#,
                     #"{"type":"ack","id":7}"#, #"{"id":"x"}"#, #"{"type":null,"id":"x"}"#] {
            #expect(client(text) == nil, "\(text)")
            #expect((try? JSONDecoder().decode(ClientFrame.self, from: Data(text.utf8))) == nil, "\(text)")
        }
    }

    @Test func relayFramesReadAndWriteTheirMembers() throws {
        // An envelope of its size: a record whose size is not its envelope's is refused (RelayAnswersTests).
        let envelope = Base64URL.encode([UInt8](repeating: 0, count: 512))
        let record = MessageRecord(id: id, author: "alice", createdAt: "2027-01-15T08:00:00+00:00", expiresAt: "2027-01-22T08:00:00+00:00",
                                   size: 512, seq: 7, envelope: envelope)
        let frames: [(RelayFrame, String)] = [
            (.ready(pending: 3, prekeys: 0), #"{"pending":3,"prekeys":0,"type":"ready"}"#),
            // A relay older than prekeys says nothing of them: read as unknown, not as none.
            (.ready(pending: 3), #"{"pending":3,"type":"ready"}"#),
            (.acked(id: id), #"{"id":"\#(id)","type":"acked"}"#),
            (.error(Problem(.staleKeys, "d"), ref: "r"),
             #"{"problem":{"code":"stale_keys","detail":"d","status":409,"title":"stale keys"},"ref":"r","type":"error"}"#),
            (.error(Problem(.notFound), id: id), #"{"id":"\#(id)","problem":{"code":"not_found","status":404,"title":"not found"},"type":"error"}"#),
            (.message(record), #"{"message":{"author":"alice","created_at":"2027-01-15T08:00:00+00:00","envelope":"\#(envelope)","expires_at":"2027-01-22T08:00:00+00:00","id":"\#(id)","seq":7,"size":512},"type":"message"}"#),
        ]
        for (frame, json) in frames {
            #expect(try text(frame) == json)
            #expect(try JSONDecoder().decode(RelayFrame.self, from: Data(json.utf8)) == frame)
        }
        let sent = RelayFrame.sent(ref: "r", created: false, message: record)
        #expect(try JSONDecoder().decode(RelayFrame.self, from: Data(try text(sent).utf8)) == sent)
        #expect(sent.created == false && sent.ref == "r" && sent.message == record && sent.type == "sent")
        #expect(try JSONDecoder().decode(RelayFrame.self, from: Data(#"{"type":"typing","who":"x"}"#.utf8)) == .unknown(type: "typing"),
                "a newer relay's frame is kept as unknown, for clients to skip")
        #expect((try? JSONDecoder().decode(RelayFrame.self, from: Data(#"{"type":"ready"}"#.utf8))) == nil)
        let ready = try JSONDecoder().decode(RelayFrame.self, from: Data(#"{"type":"ready","pending":2,"prekeys":17}"#.utf8))
        #expect(ready.pending == 2 && ready.prekeys == 17)
        #expect(RelayFrame.ready(pending: 2).prekeys == nil)
        #expect((try? JSONDecoder().decode(RelayFrame.self, from: Data(#"{"type":"ready","pending":2,"prekeys":"x"}"#.utf8))) == nil)
    }
}
