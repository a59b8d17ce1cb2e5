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

/// Unkeyed BLAKE2b (`crypto_generichash_init/update/final`) over data that arrives in pieces:
/// the digest of a file or an upload part without holding it whole. The same bytes as
/// ``blake2b(_:length:)`` over the concatenation of every `update`.
///
/// One hasher makes one digest: after ``finalize()`` it refuses further use (a precondition), as
/// libsodium's state may not be reused. Its state is wiped when it is released.
public final class BLAKE2bHasher {
    /// The libsodium state, in an allocation aligned as libsodium asks (64 bytes).
    private let state: UnsafeMutableRawPointer
    private let length: Int
    private var finished = false

    /// Starts a digest of `length` bytes (16...64; 32 for BLAKE2b-256).
    public init(length: Int = 32) {
        Sodium.ready()
        precondition((16...64).contains(length), "BLAKE2bHasher: the output length must be 16...64 bytes")
        self.length = length
        state = UnsafeMutableRawPointer.allocate(byteCount: crypto_generichash_blake2b_statebytes(), alignment: 64)
        _ = crypto_generichash_init(opaqueState, nil, 0, length)
    }

    deinit {
        sodium_memzero(state, crypto_generichash_blake2b_statebytes())
        state.deallocate()
    }

    /// libsodium's state type is over-aligned, which Swift imports as an opaque pointer.
    private var opaqueState: OpaquePointer { OpaquePointer(state) }

    /// Adds `bytes` to the digest.
    public func update(_ bytes: UnsafeRawBufferPointer) {
        precondition(!finished, "BLAKE2bHasher: update after finalize")
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        _ = crypto_generichash_update(opaqueState, base.assumingMemoryBound(to: UInt8.self), UInt64(bytes.count))
    }

    /// Adds `bytes` to the digest.
    public func update(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { update($0) }
    }

    /// The digest of everything added. Call once.
    public func finalize() -> [UInt8] {
        precondition(!finished, "BLAKE2bHasher: finalize called twice")
        finished = true
        var output = [UInt8](repeating: 0, count: length)
        _ = crypto_generichash_final(opaqueState, &output, length)
        return output
    }
}
