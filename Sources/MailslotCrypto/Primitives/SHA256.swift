import CSodium

// SHA-256 and HMAC-SHA-256 from libsodium (`crypto_hash_sha256_*`, `crypto_auth_hmacsha256_*`).
// The relay's object-store client needs them: AWS Signature Version 4 hashes the canonical request
// and payloads with SHA-256 and derives its signing key with HMAC-SHA-256 (docs/architecture.md,
// "Blobs/S3"). Package-level, not public: apps have no use for them (the formats use BLAKE2b).
// The one-shot `hmacSHA256(key:_:)` the ratchets use lives in HKDF.swift and is built on
// `HMACSHA256` below.

/// SHA-256 of `message`, 32 bytes.
package func sha256(_ message: [UInt8]) -> [UInt8] {
    message.withUnsafeBytes { sha256($0) }
}

/// SHA-256 of the bytes in `message`, 32 bytes.
package func sha256(_ message: UnsafeRawBufferPointer) -> [UInt8] {
    Sodium.ready()
    var digest = [UInt8](repeating: 0, count: Int(crypto_hash_sha256_BYTES))
    _ = crypto_hash_sha256(&digest, message.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(message.count))
    return digest
}

/// SHA-256 over bytes that arrive in pieces (a request body streamed to disk), without holding
/// them: `update` with each piece in order, then `finalize` once. A class, not a struct, so the
/// state is never copied; it is wiped when the hasher goes away.
package final class SHA256Hasher {
    private var state = crypto_hash_sha256_state()
    private var finished = false

    /// A hasher with nothing hashed yet.
    package init() {
        Sodium.ready()
        _ = crypto_hash_sha256_init(&state)
    }

    deinit {
        withUnsafeMutableBytes(of: &state) { sodium_memzero($0.baseAddress!, $0.count) }
    }

    /// Adds the next piece of the message.
    package func update(_ bytes: UnsafeRawBufferPointer) {
        precondition(!finished, "SHA256Hasher: update after finalize")
        _ = crypto_hash_sha256_update(&state, bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(bytes.count))
    }

    /// Adds the next piece of the message.
    package func update(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { update($0) }
    }

    /// The digest of everything added, 32 bytes. Called once; the hasher cannot be used afterwards.
    package func finalize() -> [UInt8] {
        precondition(!finished, "SHA256Hasher: finalize called twice")
        finished = true
        var digest = [UInt8](repeating: 0, count: Int(crypto_hash_sha256_BYTES))
        _ = crypto_hash_sha256_final(&state, &digest)
        return digest
    }
}

/// HMAC-SHA-256 (RFC 2104) over a message that arrives in pieces. The key may have any length
/// (libsodium hashes keys longer than the block, as RFC 2104 says), which AWS Signature Version 4
/// needs: its first key is `"AWS4"` followed by the secret access key. The state holds the padded
/// key, so it is wiped after `finalize` and when the authenticator goes away.
package final class HMACSHA256 {
    private var state = crypto_auth_hmacsha256_state()
    private var finished = false

    /// An authenticator keyed with the bytes in `key` (any length, empty included).
    package init(key: UnsafeRawBufferPointer) {
        Sodium.ready()
        Self.start(&state, key: key)
    }

    /// An authenticator keyed with `key` (any length, empty included).
    package init(key: [UInt8]) {
        Sodium.ready()
        key.withUnsafeBytes { Self.start(&state, key: $0) }
    }

    private static func start(_ state: inout crypto_auth_hmacsha256_state, key: UnsafeRawBufferPointer) {
        let empty: [UInt8] = [0]  // an empty key still needs a pointer; its length says 0
        empty.withUnsafeBufferPointer { fallback in
            _ = crypto_auth_hmacsha256_init(&state,
                                            key.baseAddress?.assumingMemoryBound(to: UInt8.self) ?? fallback.baseAddress!,
                                            key.count)
        }
    }

    deinit {
        withUnsafeMutableBytes(of: &state) { sodium_memzero($0.baseAddress!, $0.count) }
    }

    /// Adds the next piece of the message.
    package func update(_ bytes: UnsafeRawBufferPointer) {
        precondition(!finished, "HMACSHA256: update after finalize")
        _ = crypto_auth_hmacsha256_update(&state, bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(bytes.count))
    }

    /// Adds the next piece of the message.
    package func update(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { update($0) }
    }

    /// The 32-byte authentication tag of everything added. Called once; the state is wiped.
    package func finalize() -> [UInt8] {
        precondition(!finished, "HMACSHA256: finalize called twice")
        finished = true
        var mac = [UInt8](repeating: 0, count: Int(crypto_auth_hmacsha256_BYTES))
        _ = crypto_auth_hmacsha256_final(&state, &mac)
        withUnsafeMutableBytes(of: &state) { sodium_memzero($0.baseAddress!, $0.count) }
        return mac
    }
}
