import CSodium

/// BLAKE2b (`crypto_generichash`) with an output of `length` bytes (16...64).
public func blake2b(_ message: [UInt8], length: Int = 32) -> [UInt8] {
    Sodium.ready()
    precondition((16...64).contains(length), "blake2b: the output length must be 16...64 bytes")
    var output = [UInt8](repeating: 0, count: length)
    _ = crypto_generichash(&output, length, message, UInt64(message.count), nil, 0)
    return output
}

/// Keyed BLAKE2b, a MAC and a key-derivation function. Internal: only PASETO `v4.local` uses it.
func blake2b(_ message: [UInt8], key: SecretBytes, length: Int) -> [UInt8] {
    Sodium.ready()
    var output = [UInt8](repeating: 0, count: length)
    key.withUnsafeBytes { keyBytes in
        _ = crypto_generichash(&output, length, message, UInt64(message.count),
                               keyBytes.baseAddress!.assumingMemoryBound(to: UInt8.self), keyBytes.count)
    }
    return output
}
