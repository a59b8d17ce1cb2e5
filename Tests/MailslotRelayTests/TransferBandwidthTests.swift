import Foundation
import MailslotTestSupport
import Synchronization
import Testing
@testable import MailslotRelay

/// A ``TransferClock`` whose time moves only when someone sleeps on it: each sleep is recorded
/// and returns at once with the clock at its deadline, so that pacing is checked exactly and
/// without waiting.
final class SteppedTransferClock: Sendable {
    private let state = Mutex<(now: Int64, waits: [Int64])>((1_000_000_000_000, []))

    /// Now, in nanoseconds.
    var now: Int64 { state.withLock { $0.now } }
    /// Every sleep's length, in nanoseconds, in order (a deadline already past sleeps 0).
    var waits: [Int64] { state.withLock { $0.waits } }
    /// Nanoseconds slept in all.
    var slept: Int64 { waits.reduce(0, +) }

    /// Moves the clock without a sleep (an idle spell).
    func advance(by nanoseconds: Int64) { state.withLock { $0.now += nanoseconds } }

    /// This clock, for ``TransferBandwidth`` and ``RelayConfiguration/transferClock``.
    var clock: TransferClock {
        TransferClock(now: { [self] in now }) { [self] deadline in
            state.withLock { state in
                state.waits.append(max(0, deadline - state.now))
                state.now = max(state.now, deadline)
            }
        }
    }
}

/// The relay-wide transfer bandwidth cap (`--max-transfer-rate`, docs/operations.md "Transfer
/// bandwidth"): the token bucket's pacing, exact on a stepped clock; its setting; and part
/// uploads and downloads through the HTTP routes taking exactly the waits the cap asks for.
@Suite struct TransferBandwidthTests {
    @Test func aFullBucketLetsABurstPassThenChargesEachByteItsTime() {
        let time = SteppedTransferClock()
        let start = time.now
        let bandwidth = TransferBandwidth(rate: 1_000_000, clock: time.clock)
        #expect(bandwidth.burst == 50_000)
        // A whole burst goes at once; the next bytes wait their time at 1 µs a byte.
        #expect(bandwidth.reserve(50_000) == nil)
        #expect(bandwidth.reserve(1000) == start + 1_000_000)
        // A second transfer charging now queues behind the first.
        #expect(bandwidth.reserve(2000) == start + 3_000_000)
        #expect(bandwidth.reserve(0) == nil)
    }

    @Test func pacingIsExactWhateverTheChunks() async throws {
        let time = SteppedTransferClock()
        let start = time.now
        // A rate that divides no chunk: rounding each charge down would lose time at every chunk.
        let rate: Int64 = 3_000_007
        let bandwidth = TransferBandwidth(rate: rate, clock: time.clock)
        var total: Int64 = 0
        // Uneven chunks, 1 to 70,000 bytes, the same every run (a step prime to the modulus visits them all).
        for index in 0..<2000 {
            let chunk = index * 7_919 % 70_000 + 1
            total += Int64(chunk)
            try await bandwidth.pace(chunk)
        }
        // Every byte paid at the rate, but the first burst's.
        let expected = total * 1_000_000_000 / rate - TransferBandwidth.burstMilliseconds * 1_000_000
        #expect(time.now - start == expected)
        #expect(time.slept == expected)
    }

    @Test func anIdleSpellRefillsOneBurstNoMore() {
        let time = SteppedTransferClock()
        let bandwidth = TransferBandwidth(rate: 2_000_000, clock: time.clock)
        #expect(bandwidth.reserve(100_000) == nil)
        #expect(bandwidth.reserve(2) != nil)
        time.advance(by: 10_000_000_000)
        // Ten idle seconds are not banked: one burst passes, then the bytes wait again.
        #expect(bandwidth.reserve(100_000) == nil)
        #expect(bandwidth.reserve(2000) == time.now + 1_000_000)
    }

    @Test func theSettingTakesBytesPerSecondWithUnits() throws {
        #expect(try RelayConfiguration(flags: [:], environment: [:]).maxTransferRate == 0)
        let written: [String: Int64] = ["0": 0, "200MB": 200_000_000, "200000000": 200_000_000, "1.5GB": 1_500_000_000,
                                        "256MiB": 256 << 20, "100MB/s": 100_000_000, "1TB": 1_000_000_000_000]
        for (text, rate) in written {
            #expect(try RelayConfiguration(flags: ["max-transfer-rate": text], environment: [:]).maxTransferRate == rate, "\(text)")
        }
        #expect(try RelayConfiguration(flags: [:], environment: ["MAILSLOT_MAX_TRANSFER_RATE": "50MB"]).maxTransferRate == 50_000_000)
        for text in ["fast", "-1", "999999", "1.5", "MB", "2TB", "1e9MB", "200 MB", "0x10MB"] {
            #expect(throws: RelayConfigurationError.self, "\(text)") {
                try RelayConfiguration(flags: ["max-transfer-rate": text], environment: [:])
            }
        }
    }

    /// An upload's body is charged in runs of ``TransferBandwidth/chargeBytes``, not per buffer
    /// (each wait is a timer and a wake-up the message path pays for); the rest is charged when
    /// the body ends; and the body is asked for more only once the run before is paid.
    @Test func aPacedBodyWaitsOncePerRunAndPaysTheRestAtItsEnd() async throws {
        let time = SteppedTransferClock()
        let rate: Int64 = 200_000_000
        let bandwidth = TransferBandwidth(rate: rate, clock: time.clock)
        #expect(bandwidth.chargeBytes == 500_000)
        // Spend the burst first (it passes without a wait), so that every byte of the body waits
        // its time (5 ns a byte).
        try await bandwidth.pace(Int(bandwidth.burst))
        let before = time.slept
        let piece = 64 << 10
        let perRun = (bandwidth.chargeBytes + piece - 1) / piece
        // Two whole runs and a little more: three charges, three waits.
        let length = 2 * perRun * piece + piece + 1000
        let asked = Mutex<[Int64]>([])
        let body = PatternBody(length: length, piece: piece) { _ in asked.withLock { $0.append(time.now) } }
        var received = 0
        for try await buffer in PacedBody(base: body, bandwidth: bandwidth) { received += buffer.readableBytes }
        #expect(received == length)
        #expect(time.waits.count == 3, "\(time.waits)")
        #expect(time.slept - before == Int64(length) * 5)
        // The first run's pieces are asked for at once; the next piece only once that run is paid.
        let pulls = asked.withLock { $0 }
        #expect(pulls[perRun - 1] == pulls[0])
        #expect(pulls[perRun] == pulls[0] + Int64(perRun * piece) * 5)
    }

    /// The run between two charges is 2.5 ms of the rate, within 64 KiB and 512 KiB: few wake-ups
    /// at high rates, short silences at low ones.
    @Test func theRunBetweenChargesFollowsTheRate() {
        let runs: [Int64: Int] = [1_000_000: 64 << 10, 26_000_000: 65_536, 100_000_000: 250_000, 200_000_000: 500_000,
                                  1_000_000_000: 512 << 10, TransferBandwidth.maxRate: 512 << 10]
        for (rate, run) in runs {
            #expect(TransferBandwidth(rate: rate).chargeBytes == run, "\(rate)")
        }
    }

    /// A capped relay: a blob's parts uploaded through `PUT`, then downloaded, wait exactly the
    /// time the cap gives their bytes (the upload after its first burst; the download, right after
    /// it, all of it) — counted on the stepped clock, so no time is measured.
    @Test func cappedUploadsAndDownloadsWaitForTheBucket() async throws {
        let time = SteppedTransferClock()
        let rate: Int64 = 1_000_000
        try await withTestRelay(configure: {
            BlobTests.smallParts(&$0)
            $0.maxTransferRate = rate
            $0.transferClock = time.clock
        }) { relay in
            let alice = try await relay.signIn("alice").session
            let bob = try await relay.signIn("bob").session
            let blob = TestBlob(plainSize: 1_500_000)
            #expect(blob.parts == 2)
            try await relay.uploadBlob(blob, session: alice, to: ["bob"])
            let nanosecondsPerByte = 1_000_000_000 / rate
            let burst = TransferBandwidth.burstMilliseconds * 1_000_000
            let uploaded = time.slept
            #expect(uploaded == Int64(blob.size) * nanosecondsPerByte - burst, "\(time.waits.count) waits")
            #expect(time.waits.count > 2, "the body was read in paced chunks, not in one go")

            let download = try await relay.call("GET", "/v1/blobs/\(blob.id)/content", session: bob)
            #expect(download.status == 200)
            #expect(download.body == Data(blob.bytes))
            // The last chunk's wait comes after its bytes are written: the client may have them first.
            let expected = uploaded + Int64(blob.size) * nanosecondsPerByte
            for _ in 0..<500 where time.slept < expected { try await Task.sleep(for: .milliseconds(10)) }
            #expect(time.slept == expected)
        }
    }
}
