import Foundation

/// Time-ordered message ids (ULID: 48 bits of milliseconds, 80 random bits, Crockford base32,
/// 26 characters). The sender chooses the id, so the same id lives in its store and on the relay,
/// and retries are idempotent.
public enum MessageID {
    private static let alphabet = Array("0123456789ABCDEFGHJKMNPQRSTVWXYZ".utf8)

    /// A new id for a message composed at `date`.
    public static func generate(at date: Date = Date()) -> String {
        let milliseconds = UInt64(max(0, date.timeIntervalSince1970 * 1000))
        var bytes = [UInt8](repeating: 0, count: 16)
        for index in 0..<6 { bytes[index] = UInt8(truncatingIfNeeded: milliseconds >> (8 * (5 - UInt64(index)))) }
        bytes.replaceSubrange(6..<16, with: randomBytes(10))
        // 128 bits as 26 base32 digits, most significant first (the first digit carries 3 bits).
        var value = bytes.reduce((high: UInt64(0), low: UInt64(0))) { acc, byte in
            ((acc.high << 8) | (acc.low >> 56), (acc.low << 8) | UInt64(byte))
        }
        var digits = [UInt8](repeating: 0, count: 26)
        for index in stride(from: 25, through: 0, by: -1) {
            digits[index] = alphabet[Int(value.low & 31)]
            value.low = (value.low >> 5) | (value.high << 59)
            value.high >>= 5
        }
        return String(decoding: digits, as: UTF8.self)
    }
}
