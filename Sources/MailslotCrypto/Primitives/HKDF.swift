import CSodium

// HKDF (RFC 5869) over HMAC-SHA-256, built from libsodium's `crypto_auth_hmacsha256`: libsodium
// 1.0.18 has no HKDF of its own. Ratchets (spec/ratchet.md) derive every key with it, as the
// X3DH and Double Ratchet specifications recommend. Checked against RFC 5869's SHA-256 vectors.

/// HMAC-SHA-256 of `message` under `key` (any length, as RFC 2104 allows), 32 bytes.
public func hmacSHA256(key: [UInt8], _ message: [UInt8]) -> [UInt8] {
    key.withUnsafeBytes { hmacSHA256(keyBytes: $0, message) }
}

/// HMAC-SHA-256 under a secret key (a chain key of the ratchet), 32 bytes.
func hmacSHA256(key: SecretBytes, _ message: [UInt8]) -> [UInt8] {
    key.withUnsafeBytes { hmacSHA256(keyBytes: $0, message) }
}

private func hmacSHA256(keyBytes: UnsafeRawBufferPointer, _ message: [UInt8]) -> [UInt8] {
    let mac = HMACSHA256(key: keyBytes)  // wipes its state (it holds the padded key) in finalize
    mac.update(message)
    return mac.finalize()
}

/// HKDF-SHA-256 (RFC 5869): extract with `salt` (32 zero bytes when empty, as §2.2 says), then
/// expand with `info` to `length` bytes (at most 255 × 32). The intermediate PRK is wiped.
public func hkdfSHA256(salt: [UInt8], inputKeyMaterial: [UInt8], info: [UInt8], length: Int) -> [UInt8] {
    precondition(length > 0 && length <= 255 * 32, "hkdfSHA256: length must be 1…8160 bytes")
    var prk = hmacSHA256(key: salt.isEmpty ? [UInt8](repeating: 0, count: 32) : salt, inputKeyMaterial)
    defer { wipe(&prk) }
    var output: [UInt8] = []
    output.reserveCapacity(length + 32)
    var block: [UInt8] = []
    var counter: UInt8 = 1
    while output.count < length {
        // T(i) = HMAC(PRK, T(i−1) ‖ info ‖ i), every intermediate wiped before it is let go.
        var input: [UInt8] = []
        input.reserveCapacity(block.count + info.count + 1)
        input += block
        input += info
        input.append(counter)
        wipe(&block)
        block = hmacSHA256(key: prk, input)
        wipe(&input)
        output += block
        counter &+= 1
    }
    wipe(&block)
    // Drop the surplus in place (wiping it first), so no unwiped copy of the tail is left.
    for index in length..<output.count { output[index] = 0 }
    output.removeLast(output.count - length)
    return output
}
