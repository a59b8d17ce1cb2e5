import CSodium

/// PASETO `v4.local`: XChaCha20 encryption with a keyed-BLAKE2b MAC, keys split per token
/// from a random 32-byte nonce.
public enum PasetoV4Local {
    static let header = "v4.local."
    static let nonceBytes = 32
    static let tagBytes = 32

    /// Encrypts `message` into a `v4.local` token under `key`.
    public static func encrypt(_ message: [UInt8], with key: SymmetricKey,
                               footer: [UInt8] = [], implicit: [UInt8] = []) -> String {
        encrypt(message, with: key, footer: footer, implicit: implicit, nonce: randomBytes(nonceBytes))
    }

    /// As above with a caller-chosen nonce. Internal: a repeated nonce would be catastrophic,
    /// so only the official test vectors use it.
    static func encrypt(_ message: [UInt8], with key: SymmetricKey,
                        footer: [UInt8], implicit: [UInt8], nonce: [UInt8]) -> String {
        precondition(nonce.count == nonceBytes)
        let keys = splitKeys(key, nonce: nonce)
        let ciphertext = xchacha20(message, nonce: keys.counterNonce, key: keys.encryptionKey)
        let tag = mac(nonce: nonce, ciphertext: ciphertext, footer: footer, implicit: implicit,
                      key: keys.authenticationKey)
        return PasetoToken.serialise(header: header, payload: nonce + ciphertext + tag, footer: footer)
    }

    /// Authenticates and decrypts `token` under `key`. When `footer` is given, the token's footer
    /// must equal it.
    public static func decrypt(_ token: String, with key: SymmetricKey,
                               footer: [UInt8]? = nil, implicit: [UInt8] = []) throws(PasetoError) -> [UInt8] {
        let parsed = try PasetoToken(parsing: token)
        try parsed.require(purpose: "local")
        try parsed.require(footer: footer)
        guard parsed.payload.count >= nonceBytes + tagBytes else {
            throw .malformed("the payload is shorter than a nonce and a tag")
        }
        let nonce = Array(parsed.payload.prefix(nonceBytes))
        let ciphertext = Array(parsed.payload.dropFirst(nonceBytes).dropLast(tagBytes))
        let tag = Array(parsed.payload.suffix(tagBytes))
        let keys = splitKeys(key, nonce: nonce)
        let expected = mac(nonce: nonce, ciphertext: ciphertext, footer: parsed.footer,
                           implicit: implicit, key: keys.authenticationKey)
        // Authenticate before decrypting anything.
        guard constantTimeEquals(expected, tag) else { throw .invalid }
        return xchacha20(ciphertext, nonce: keys.counterNonce, key: keys.encryptionKey)
    }

    private struct DerivedKeys {
        let encryptionKey: SecretBytes
        let counterNonce: [UInt8]
        let authenticationKey: SecretBytes
    }

    /// `Ek || n2 = BLAKE2b-448("paseto-encryption-key" || n; key)`, `Ak = BLAKE2b-256("paseto-auth-key-for-aead" || n; key)`.
    private static func splitKeys(_ key: SymmetricKey, nonce: [UInt8]) -> DerivedKeys {
        var encryption = blake2b(Array("paseto-encryption-key".utf8) + nonce, key: key.bytes, length: 56)
        let authentication = blake2b(Array("paseto-auth-key-for-aead".utf8) + nonce, key: key.bytes, length: 32)
        defer { wipe(&encryption) }
        return DerivedKeys(
            encryptionKey: SecretBytes(copying: encryption.prefix(32)),
            counterNonce: Array(encryption.suffix(24)),
            authenticationKey: SecretBytes(copying: authentication))
    }

    private static func mac(nonce: [UInt8], ciphertext: [UInt8], footer: [UInt8], implicit: [UInt8],
                            key: SecretBytes) -> [UInt8] {
        let authenticated = preAuthenticationEncoding([Array(header.utf8), nonce, ciphertext, footer, implicit])
        return blake2b(authenticated, key: key, length: tagBytes)
    }

    private static func xchacha20(_ input: [UInt8], nonce: [UInt8], key: SecretBytes) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: input.count)
        guard !input.isEmpty else { return output }
        key.withUnsafeBytes { keyBytes in
            _ = crypto_stream_xchacha20_xor(&output, input, UInt64(input.count), nonce,
                                            keyBytes.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        return output
    }
}
