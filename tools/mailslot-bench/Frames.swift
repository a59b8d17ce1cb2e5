import Foundation
import MailslotWire

/// The bench's message ids carry what the recipient needs to measure: which sender, which of its
/// messages, and when it was (meant to be) sent. `b` + 4 hex digits of the sender + 10 of its
/// sequence number + 16 of the monotonic send time in nanoseconds: 31 characters of the message-id
/// grammar. No lookup table is shared between senders and recipients, so nothing distorts the clock.
enum BenchID {
    static let length = 31
    private static let hex = Array("0123456789abcdef".utf8)

    /// The id of message `sequence` of sender `sender`, stamped with `time` (a ``Monotonic`` value).
    static func make(sender: Int, sequence: Int, time: UInt64) -> String {
        String(unsafeUninitializedCapacity: length) { buffer in
            buffer[0] = UInt8(ascii: "b")
            func put(_ value: UInt64, digits: Int, at offset: Int) {
                var value = value
                for position in stride(from: offset + digits - 1, through: offset, by: -1) {
                    buffer[position] = hex[Int(value & 0xF)]
                    value >>= 4
                }
            }
            put(UInt64(sender), digits: 4, at: 1)
            put(UInt64(sequence), digits: 10, at: 5)
            put(time, digits: 16, at: 15)
            return length
        }
    }

    /// The parts of a bench id, or nil for any other id.
    static func parse(_ bytes: UnsafeRawBufferPointer) -> (sender: Int, sequence: Int, time: UInt64)? {
        guard bytes.count == length, bytes[0] == UInt8(ascii: "b") else { return nil }
        func read(_ offset: Int, _ digits: Int) -> UInt64? {
            var value: UInt64 = 0
            for position in offset..<offset + digits {
                let byte = bytes[position]
                let digit: UInt8
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
                default: return nil
                }
                value = value << 4 | UInt64(digit)
            }
            return value
        }
        guard let sender = read(1, 4), let sequence = read(5, 10), let time = read(15, 16) else { return nil }
        return (Int(sender), Int(sequence), time)
    }

    /// One number per message of the run, for sets: the sender in the high bits, the sequence below.
    @inline(__always)
    static func key(sender: Int, sequence: Int) -> UInt64 { UInt64(sender) << 40 | UInt64(sequence) }

    /// The sender and sequence of a ``key(sender:sequence:)``.
    static func split(_ key: UInt64) -> (sender: Int, sequence: Int) { (Int(key >> 40), Int(key & (1 << 40 - 1))) }
}

/// A relay frame read straight from its bytes, without a JSON decoder: the bench reads one of
/// these per message and per acknowledgement, on the same two cores as the relay. It finds members
/// by their `"name":` pattern, which is sound for the frames it reads here: their string values
/// (ids, uids, base64url, RFC 3339 times) never hold a quote, and no nested record repeats the
/// names looked up. Anything else (`ready`, `error`) goes to `JSONDecoder` instead.
struct FrameBytes {
    enum Kind { case message, acked, sent, other }

    let raw: UnsafeRawBufferPointer

    /// Which frame this is, from its `"type":"…"` member.
    var kind: Kind {
        guard let start = find("\"type\":\"") else { return .other }
        let rest = UnsafeRawBufferPointer(rebasing: raw[start...])
        if Self.hasPrefix(rest, "message\"") { return .message }
        if Self.hasPrefix(rest, "acked\"") { return .acked }
        if Self.hasPrefix(rest, "sent\"") { return .sent }
        return .other
    }

    /// The bytes of the string member `pattern` introduces (`"name":"`), without the quotes.
    func string(_ pattern: StaticString) -> UnsafeRawBufferPointer? {
        guard let start = find(pattern), let base = raw.baseAddress, start <= raw.count,
              let end = memchr(base + start, Int32(UInt8(ascii: "\"")), raw.count - start) else { return nil }
        return UnsafeRawBufferPointer(start: base + start, count: base.distance(to: UnsafeRawPointer(end)) - start)
    }

    /// The non-negative integer member `pattern` introduces (`"name":`).
    func integer(_ pattern: StaticString) -> Int64? {
        guard var index = find(pattern) else { return nil }
        var value: Int64 = 0
        let start = index
        while index < raw.count, raw[index] >= UInt8(ascii: "0"), raw[index] <= UInt8(ascii: "9"), index - start < 18 {
            value = value * 10 + Int64(raw[index] - UInt8(ascii: "0"))
            index += 1
        }
        return index > start ? value : nil
    }

    /// The boolean member `pattern` introduces (`"name":`).
    func bool(_ pattern: StaticString) -> Bool? {
        guard let start = find(pattern), start < raw.count else { return nil }
        switch raw[start] {
        case UInt8(ascii: "t"): return true
        case UInt8(ascii: "f"): return false
        default: return nil
        }
    }

    /// The offset just after the first occurrence of `pattern`.
    private func find(_ pattern: StaticString) -> Int? {
        let length = pattern.utf8CodeUnitCount
        guard let base = raw.baseAddress, length > 0, raw.count >= length else { return nil }
        let first = Int32(pattern.utf8Start.pointee)
        var offset = 0
        // memchr for the first byte, memcmp for the rest (Glibc's memmem is not visible to Swift).
        while offset <= raw.count - length, let hit = memchr(base + offset, first, raw.count - length + 1 - offset) {
            let position = base.distance(to: UnsafeRawPointer(hit))
            if memcmp(hit, pattern.utf8Start, length) == 0 { return position + length }
            offset = position + 1
        }
        return nil
    }

    private static func hasPrefix(_ bytes: UnsafeRawBufferPointer, _ prefix: StaticString) -> Bool {
        guard bytes.count >= prefix.utf8CodeUnitCount, let base = bytes.baseAddress else { return false }
        return memcmp(base, prefix.utf8Start, prefix.utf8CodeUnitCount) == 0
    }
}

/// Client frames, written by hand: the values are ids, uids and base64url, which need no escaping.
enum ClientFrames {
    /// `{"type":"send","ref":ID,"to":UID,"id":ID,"envelope":B64}`; the ref is the id, so the answer names the message.
    static func send(to recipient: String, id: String, envelope: String) -> String {
        var frame = ""
        frame.reserveCapacity(64 + recipient.utf8.count + 2 * id.utf8.count + envelope.utf8.count)
        frame += "{\"type\":\"send\",\"ref\":\""
        frame += id
        frame += "\",\"to\":\""
        frame += recipient
        frame += "\",\"id\":\""
        frame += id
        frame += "\",\"envelope\":\""
        frame += envelope
        frame += "\"}"
        return frame
    }

    /// `{"type":"ack","id":ID}` for the id in `bytes`.
    static func ack(_ bytes: UnsafeRawBufferPointer) -> String {
        let prefix = "{\"type\":\"ack\",\"id\":\""
        return String(unsafeUninitializedCapacity: prefix.utf8.count + bytes.count + 2) { buffer in
            var offset = 0
            for byte in prefix.utf8 { buffer[offset] = byte; offset += 1 }
            for byte in bytes { buffer[offset] = byte; offset += 1 }
            buffer[offset] = UInt8(ascii: "\""); buffer[offset + 1] = UInt8(ascii: "}")
            return offset + 2
        }
    }
}

/// What one frame on a sender's socket says, read once for both kinds of sender (`run` and
/// `crash`), which then keep their own books.
enum SenderAnswer {
    /// A `sent` frame for one of this sender's messages.
    case sent(sequence: Int, time: UInt64, created: Bool)
    /// An `error` frame refusing one of this sender's messages.
    case refused(sequence: Int, code: String)
    /// The socket's `ready` frame.
    case ready
    /// Anything else: what to note about it.
    case unexpected(String)

    /// Reads `raw` as an answer to sender `sender`.
    static func read(_ raw: UnsafeRawBufferPointer, sender: Int) -> SenderAnswer {
        let bytes = FrameBytes(raw: raw)
        switch bytes.kind {
        case .sent:
            guard let ref = bytes.string("\"ref\":\""), let id = BenchID.parse(ref), id.sender == sender,
                  let created = bytes.bool("\"created\":") else { return .unexpected("a sent frame without a ref this sender wrote") }
            return .sent(sequence: id.sequence, time: id.time, created: created)
        case .message, .acked:
            return .unexpected("a delivery or ack on a sender's socket")
        case .other:
            guard let decoded = try? JSONDecoder().decode(RelayFrame.self, from: Data(raw)) else { return .unexpected("a frame that is not JSON") }
            switch decoded {
            case .ready:
                return .ready
            case .error(let problem, let ref, _):
                let code = problem.code.rawValue
                guard let ref, let id = ref.utf8.withContiguousStorageIfAvailable({ BenchID.parse(UnsafeRawBufferPointer($0)) }) ?? nil,
                      id.sender == sender else { return .unexpected("an error frame without a ref: \(code)") }
                return .refused(sequence: id.sequence, code: code)
            default:
                return .unexpected("a \(decoded.type) frame")
            }
        }
    }
}

/// A frame on a receiving socket that is neither a delivery nor an ack: the socket's `ready`, or
/// what to note about anything else. Read once for both kinds of receiver (`run`'s recipients and
/// `group`'s members), which then keep their own books.
enum ReceiverOther {
    /// The socket's `ready` frame.
    case ready
    /// Anything else: what to note about it.
    case unexpected(String)

    /// Reads `raw`, a frame ``FrameBytes`` classed as other.
    static func read(_ raw: UnsafeRawBufferPointer) -> ReceiverOther {
        guard let decoded = try? JSONDecoder().decode(RelayFrame.self, from: Data(raw)) else { return .unexpected("a frame that is not JSON") }
        if case .ready = decoded { return .ready }
        return .unexpected("a \(decoded.type) frame (\(decoded.problem?.code.rawValue ?? "-"))")
    }
}
