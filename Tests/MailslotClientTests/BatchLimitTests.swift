@testable import MailslotClient
import MailslotWire
import Testing

/// The client's send-to-many size (``BatchLimit``): chunks within both bounds, and a refusal as
/// too large halves the bound it names, so that the refused create always goes in at least two.
@Suite struct BatchLimitTests {
    @Test func aRefusedCreateIsChunkedAgainInAtLeastTwo() {
        var limit = BatchLimit()
        let envelopes = Array(repeating: 1_000, count: 11)
        #expect(limit.chunks(envelopes) { $0 }.map(\.count) == [11])
        limit.refused(Problem(.invalidEntries, "at most 5"), count: 11, size: 11 * BatchLimit.cost(envelopeCount: 1_000))
        #expect(limit.chunks(envelopes) { $0 }.map(\.count) == [5, 5, 1])

        // 413: the bytes halve, the entries stay; a body of 40 large envelopes goes as 20 and 20.
        var bytes = BatchLimit()
        let large = Array(repeating: 100_000, count: 40)
        let size = large.reduce(0) { $0 + BatchLimit.cost(envelopeCount: $1) }
        #expect(bytes.chunks(large) { $0 }.count == 1)
        bytes.refused(Problem(.bodyTooLarge, "over"), count: 40, size: size)
        #expect(bytes.chunks(large) { $0 }.map(\.count) == [20, 20])
        #expect(bytes.entries == BatchLimit().entries)

        // Down to one entry a create, never zero; an entry over the bytes goes alone.
        var small = BatchLimit()
        for _ in 0..<20 { small.refused(Problem(.invalidEntries, "no"), count: 1, size: 1) }
        #expect(small.entries == 1 && small.chunks([1, 2, 3]) { $0 }.map(\.count) == [1, 1, 1])
        for _ in 0..<40 { small.refused(Problem(.bodyTooLarge, "no"), count: 1, size: 1) }
        #expect(small.bytes == 1 && small.chunks([5_000, 6_000]) { $0 }.map(\.count) == [1, 1])
    }
}
