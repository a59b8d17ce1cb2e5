import Foundation
import MailslotWire
import Testing
@testable import mailslot_bench

/// The bench writes its frames by hand, for speed: each must be the frame MailslotWire's typed
/// ClientFrame decodes it as (the bench's sends and acks are what the relay is measured with).
@Suite struct FrameWriterTests {
    @Test func theHandWrittenFramesAreTheTypedOnes() throws {
        let id = "01KF0000000000000000000042", envelope = Base64URL.encode([UInt8](repeating: 3, count: 512))
        let send = Data(ClientFrames.send(to: "bob", id: id, envelope: envelope).utf8)
        #expect(try JSONDecoder().decode(ClientFrame.self, from: send) == .send(SendFrame(ref: id, to: "bob", id: id, envelope: envelope)))
        #expect(try WireDecoding.decode(ClientFrame.self, from: send, maxDepth: 16) == .send(SendFrame(ref: id, to: "bob", id: id, envelope: envelope)))
        let ack = Array(id.utf8).withUnsafeBytes { ClientFrames.ack($0) }
        #expect(try JSONDecoder().decode(ClientFrame.self, from: Data(ack.utf8)) == .ack(id))
    }
}
