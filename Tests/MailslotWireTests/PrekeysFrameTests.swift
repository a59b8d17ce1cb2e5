import Foundation
import MailslotWire
import Testing

/// The relay's `prekeys` frame (spec/protocol.md §8.4): the count of the owner's one-time
/// prekeys after a claim crossed the low-water mark.
@Suite struct PrekeysFrameTests {
    @Test func thePrekeysFrameReadsAndWritesItsCount() throws {
        let frame = RelayFrame.prekeys(24)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        #expect(String(decoding: try encoder.encode(frame), as: UTF8.self) == #"{"prekeys":24,"type":"prekeys"}"#)
        let decoded = try JSONDecoder().decode(RelayFrame.self, from: Data(#"{"type":"prekeys","prekeys":24}"#.utf8))
        #expect(decoded == frame && decoded.type == "prekeys" && decoded.prekeys == 24, "read as ready's count is")
        #expect(PrekeyCount.lowWater == 25)
        for bad in [#"{"type":"prekeys"}"#, #"{"type":"prekeys","prekeys":-1}"#, #"{"type":"prekeys","prekeys":"3"}"#] {
            #expect((try? JSONDecoder().decode(RelayFrame.self, from: Data(bad.utf8))) == nil, "\(bad)")
        }
    }
}
