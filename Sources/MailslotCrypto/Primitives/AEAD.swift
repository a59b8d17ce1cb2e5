import CSodium

// XChaCha20-Poly1305 (IETF), libsodium's `crypto_aead_xchacha20poly1305_ietf_*`: the body cipher of
// envelope v2 (spec/ratchet.md §5). Each key is a one-use message key, so the nonce is derived
// with it rather than drawn at random.

/// Encrypts `plaintext` under a 32-byte `key` and 24-byte `nonce`, authenticating `associatedData`
/// too: ciphertext ‖ 16-byte tag.
func aeadSeal(_ plaintext: [UInt8], associatedData: [UInt8], key: SecretBytes, nonce: [UInt8]) -> [UInt8] {
    Sodium.ready()
    precondition(key.count == 32 && nonce.count == 24, "aeadSeal: a 32-byte key and a 24-byte nonce")
    var output = [UInt8](repeating: 0, count: plaintext.count + Int(crypto_aead_xchacha20poly1305_ietf_ABYTES))
    var written: UInt64 = 0
    key.withUnsafeBytes { keyBytes in
        _ = crypto_aead_xchacha20poly1305_ietf_encrypt(&output, &written, plaintext, UInt64(plaintext.count),
                                                        associatedData, UInt64(associatedData.count), nil, nonce,
                                                        keyBytes.baseAddress!.assumingMemoryBound(to: UInt8.self))
    }
    return output
}

/// Decrypts and verifies what ``aeadSeal(_:associatedData:key:nonce:)`` made; nil if anything was
/// altered or the key, nonce or associated data differ.
func aeadOpen(_ ciphertext: [UInt8], associatedData: [UInt8], key: SecretBytes, nonce: [UInt8]) -> [UInt8]? {
    Sodium.ready()
    let tag = Int(crypto_aead_xchacha20poly1305_ietf_ABYTES)
    guard ciphertext.count >= tag, key.count == 32, nonce.count == 24 else { return nil }
    var output = [UInt8](repeating: 0, count: ciphertext.count - tag)
    var written: UInt64 = 0
    let status = key.withUnsafeBytes { keyBytes in
        crypto_aead_xchacha20poly1305_ietf_decrypt(&output, &written, nil, ciphertext, UInt64(ciphertext.count),
                                                   associatedData, UInt64(associatedData.count), nonce,
                                                   keyBytes.baseAddress!.assumingMemoryBound(to: UInt8.self))
    }
    guard status == 0 else { return nil }
    return output
}
