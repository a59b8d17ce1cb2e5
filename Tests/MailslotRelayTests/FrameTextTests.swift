import Foundation
import Testing
@testable import MailslotRelay
import MailslotWire

/// The hand-written frames are exactly what the encoder writes.
@Suite struct FrameTextTests {
    @Test func messageAndAckedFramesMatchTheEncoder() {
        for n in 0..<50 {
            let record = MessageRecord(id: MessageID.generate(), author: "user.\(n)_x-\(n)", createdAt: EpochMilliseconds.format(Int64(n) * 1_234_567),
                                       expiresAt: EpochMilliseconds.format(Int64(n) * 7_654_321 + 1), size: 512 << (n % 4), seq: Int64(n * 977),
                                       envelope: Base64URL.encode(randomBytes(n * 7)))
            let encoded = String(decoding: JSONBody.encode(RelayFrame.message(record)), as: UTF8.self)
            #expect(FrameText.message(record) == encoded)
            let acked = String(decoding: JSONBody.encode(RelayFrame.acked(id: record.id)), as: UTF8.self)
            #expect(FrameText.acked(record.id) == acked)
        }
        for (n, ref) in ["r1", "a.b_c-D9", "x y", "q\"uote", "ünï"].enumerated() {
            let record = MessageRecord(id: MessageID.generate(), author: "alice", createdAt: EpochMilliseconds.format(Int64(n) * 1000),
                                       expiresAt: EpochMilliseconds.format(Int64(n) * 9000), size: 1024, seq: nil)
            for created in [true, false] {
                let encoded = String(decoding: JSONBody.encode(RelayFrame.sent(ref: ref, created: created, message: record)), as: UTF8.self)
                if let fast = FrameText.sent(record, ref: ref, created: created) {
                    #expect(fast == encoded)
                } else {
                    #expect(n >= 2, "only refs with characters to escape take the encoder")
                }
            }
        }
        let leased = MessageRecord(id: "0123456789abcdefgh", author: "a", createdAt: "x", expiresAt: "y", size: 1, seq: 1,
                                   leaseUntil: "z", leaseHolder: "w\"1", envelope: "")
        #expect(FrameText.message(leased) == nil, "free text takes the encoder")
    }
}
