import CSodium

/// Unpadded base64url (RFC 4648 §5), the encoding of PASETO, PASERK and every binary field
/// on Mailslot's wire. Decoding is strict: no padding, no whitespace, no stray bits.
public enum Base64URL {
    /// Encodes `bytes` as unpadded base64url.
    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        Sodium.ready()
        let input = Array(bytes)
        let variant = sodium_base64_VARIANT_URLSAFE_NO_PADDING
        let length = sodium_base64_encoded_len(input.count, variant)  // includes the NUL
        var output = [CChar](repeating: 0, count: length)
        input.withUnsafeBufferPointer { bin in
            _ = sodium_bin2base64(&output, length, bin.baseAddress, bin.count, variant)
        }
        return output.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }

    /// The number of bytes `text` decodes to, or nil when ``decode(_:)`` would refuse it; checks
    /// without decoding. Variable-time: for text that is no secret, such as a sealed envelope
    /// that the relay stores and forwards as it came.
    public static func decodedCount(_ text: String) -> Int? {
        var text = text
        let values = Self.values  // once: a global's every read goes through its lazy initializer
        return text.withUTF8 { utf8 -> Int? in
            var last: UInt8 = 0
            for byte in utf8 {
                last = values[Int(byte)]
                if last == invalid { return nil }
            }
            // A final group of 2 or 3 characters carries 1 or 2 bytes; its unused low bits must
            // be zero, and a group of 1 carries none (as libsodium decides in `decode`).
            let count = utf8.count
            switch count % 4 {
            case 0: return count / 4 * 3
            case 2: return last & 0x0F == 0 ? count / 4 * 3 + 1 : nil
            case 3: return last & 0x03 == 0 ? count / 4 * 3 + 2 : nil
            default: return nil
            }
        }
    }

    private static let invalid: UInt8 = 0xFF
    /// Each byte's 6-bit value in the base64url alphabet, or `invalid`.
    private static let values: [UInt8] = (0...255).map { byte -> UInt8 in
        switch UInt8(byte) {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): UInt8(byte) - UInt8(ascii: "A")
        case UInt8(ascii: "a")...UInt8(ascii: "z"): UInt8(byte) - UInt8(ascii: "a") + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): UInt8(byte) - UInt8(ascii: "0") + 52
        case UInt8(ascii: "-"): 62
        case UInt8(ascii: "_"): 63
        default: invalid
        }
    }

    /// Decodes unpadded base64url, or returns nil for anything that is not its canonical form.
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        Sodium.ready()
        let utf8 = Array(text.utf8)
        // Unused low bits of the last character must be zero (libsodium checks), and a length
        // of 1 mod 4 can never be produced by an encoder.
        guard utf8.count % 4 != 1 else { return nil }
        // libsodium up to 1.0.18 (what Debian and Ubuntu ship) reads every byte ≥ 0x80 as `_`
        // (a signed `char` reaches its constant-time table), so "é" would decode as "__".
        // Only ASCII can be base64url; refuse the rest here (found by tools/fuzz).
        guard utf8.allSatisfy({ $0 < 0x80 }) else { return nil }
        var output = [UInt8](repeating: 0, count: utf8.count * 3 / 4 + 1)
        var written = 0
        let status = utf8.withUnsafeBufferPointer { b64 in
            b64.withMemoryRebound(to: CChar.self) { chars in
                // b64_end == nil: libsodium fails unless it consumed the whole input.
                sodium_base642bin(&output, output.count, chars.baseAddress, chars.count,
                                  nil, &written, nil, sodium_base64_VARIANT_URLSAFE_NO_PADDING)
            }
        }
        guard status == 0 else { return nil }
        output.removeSubrange(written...)
        return output
    }
}
