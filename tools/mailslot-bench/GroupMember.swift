import Foundation
import MailslotWire
import NIOCore

/// What one group member's sockets saw: each group message it received (once), when, and the
/// envelopes kept for the checks after the clock.
struct GroupMemberLedger: Sendable {
    /// One first delivery: the group message's number, and when it arrived on the bench's wall
    /// clock (Unix milliseconds, for the relay's commit time) and monotonic clock.
    struct Arrival: Sendable {
        let message: Int
        let wallMilliseconds: Double
        let monotonic: UInt64
    }

    var arrivals: [Arrival] = []
    /// Message numbers delivered, to recognise a redelivery.
    var seen = Bitset()
    /// Envelopes (base64url) of the messages numbered below the run's verification bound, by number.
    var kept: [Int: String] = [:]
    /// Deliveries of a message already delivered.
    var repeats = 0
    /// `acked` answers.
    var acked = 0
    /// Whether the socket's `ready` frame came.
    var ready = false
    /// Frames that are not what the protocol says.
    var unexpected: [String] = []

    mutating func note(_ text: String) { if unexpected.count < 20 { unexpected.append(text) } }
}

/// A member's subscription: it records and acks every group message delivered.
enum GroupMemberSocket {
    /// Connects `user`; deliveries go to `ledger`.
    static func start(user: BenchUser, http: RelayHTTP, keepBelow: Int, ledger: Locked<GroupMemberLedger>) -> Socket {
        Socket(url: http.subscribeURL(user.uid), session: user.session, logger: Socket.logger) { frames, outbound in
            for try await frame in frames {
                if let ack = read(frame, keepBelow: keepBelow, ledger: ledger) {
                    try await outbound.write(ack)
                }
            }
        }
    }

    /// Reads one frame; returns the ack to write, if any. Only the message's id and envelope are
    /// read here (no decryption): the bench shares the relay's cores during the clock.
    private static func read(_ frame: ByteBuffer, keepBelow: Int, ledger: Locked<GroupMemberLedger>) -> String? {
        let monotonic = Monotonic.now()
        let wall = WallClock.milliseconds()
        return frame.withUnsafeReadableBytes { raw -> String? in
            let bytes = FrameBytes(raw: raw)
            switch bytes.kind {
            case .message:
                guard let idBytes = bytes.string("\"id\":\"") else {
                    ledger.withLock { $0.note("a message frame without an id") }
                    return nil
                }
                let ack = ClientFrames.ack(idBytes)
                guard let id = BenchID.parse(idBytes) else {
                    ledger.withLock { $0.note("a message this run did not send") }
                    return ack
                }
                let envelope = id.sequence < keepBelow ? bytes.string("\"envelope\":\"").map { String(decoding: $0, as: UTF8.self) } : nil
                ledger.withLock { ledger in
                    guard ledger.seen.insert(id.sequence) else {
                        ledger.repeats += 1
                        return
                    }
                    ledger.arrivals.append(.init(message: id.sequence, wallMilliseconds: wall, monotonic: monotonic))
                    if let envelope { ledger.kept[id.sequence] = envelope }
                }
                return ack
            case .acked:
                ledger.withLock { $0.acked += 1 }
                return nil
            case .sent:
                ledger.withLock { $0.note("a sent frame on a group member's socket") }
                return nil
            case .other:
                switch ReceiverOther.read(raw) {
                case .ready: ledger.withLock { $0.ready = true }
                case .unexpected(let what): ledger.withLock { $0.note(what) }
                }
                return nil
            }
        }
    }
}

/// The wall clock in Unix milliseconds (fractional): the relay stamps `created_at` from the same
/// machine's clock, so on loopback the two compare.
enum WallClock {
    static func milliseconds() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        return Double(time.tv_sec) * 1000 + Double(time.tv_nsec) / 1e6
    }

    /// `YYYY-MM-DDTHH:MM:SS.mmmZ` (the relay's `created_at`, spec/protocol.md) as Unix milliseconds.
    static func parse(_ text: String) -> Int64? {
        let bytes = Array(text.utf8)
        guard bytes.count == 24, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"), bytes[10] == UInt8(ascii: "T"),
              bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"), bytes[19] == UInt8(ascii: "."),
              bytes[23] == UInt8(ascii: "Z") else { return nil }
        func number(_ from: Int, _ count: Int) -> Int64? {
            var value: Int64 = 0
            for byte in bytes[from..<from + count] {
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
                value = value * 10 + Int64(byte - UInt8(ascii: "0"))
            }
            return value
        }
        guard let year = number(0, 4), let month = number(5, 2), let day = number(8, 2), let hour = number(11, 2),
              let minute = number(14, 2), let second = number(17, 2), let millisecond = number(20, 3),
              (1...12).contains(month), (1...31).contains(day) else { return nil }
        // Days from the civil date (Howard Hinnant's algorithm), proleptic Gregorian.
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        return ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millisecond
    }
}
