import CSodium

/// A user's or an issuer's Ed25519 signing key pair (`crypto_sign`).
///
/// Identity keys sign: key bundles, the inner record of every envelope, and custom tokens.
/// The secret half is held in ``SecretBytes`` and wiped when released.
public struct IdentityKeyPair: Sendable {
    /// The 64-byte libsodium secret key (32-byte seed followed by the public key).
    public let secretKey: SecretBytes
    /// The public half, safe to publish.
    public let publicKey: IdentityPublicKey

    /// Generates a fresh key pair.
    public init() {
        self.init(seed: SecretBytes(randomCount: Int(crypto_sign_SEEDBYTES)))
    }

    /// Derives the key pair from a 32-byte seed (deterministic; for tests and vectors).
    package init(seed: SecretBytes) {
        precondition(seed.count == Int(crypto_sign_SEEDBYTES), "IdentityKeyPair: the seed must be 32 bytes")
        var publicBytes = [UInt8](repeating: 0, count: Int(crypto_sign_PUBLICKEYBYTES))
        secretKey = SecretBytes(count: Int(crypto_sign_SECRETKEYBYTES)) { secret in
            seed.withUnsafeBytes { seedBytes in
                _ = crypto_sign_seed_keypair(&publicBytes, secret.baseAddress!, seedBytes.baseAddress!)
            }
        }
        publicKey = IdentityPublicKey(checkedBytes: publicBytes)
    }

    /// Takes a 64-byte libsodium secret key, refusing one whose public half does not match its seed.
    public init?(secretKey: SecretBytes) {
        guard secretKey.count == Int(crypto_sign_SECRETKEYBYTES) else { return nil }
        let seed = secretKey.withUnsafeBytes { SecretBytes(copying: $0.prefix(Int(crypto_sign_SEEDBYTES))) }
        let derived = IdentityKeyPair(seed: seed)
        guard derived.secretKey == secretKey else { return nil }
        self = derived
    }

    /// Signs `message` (detached Ed25519 signature, 64 bytes).
    public func sign(_ message: [UInt8]) -> [UInt8] {
        var signature = [UInt8](repeating: 0, count: Int(crypto_sign_BYTES))
        secretKey.withUnsafeBytes { secret in
            _ = crypto_sign_detached(&signature, nil, message, UInt64(message.count),
                                     secret.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        return signature
    }

    /// The X25519 form of this key pair (`crypto_sign_ed25519_sk_to_curve25519`), which X3DH uses
    /// as the identity key in its key agreements (spec/ratchet.md), so that the identity a contact
    /// pinned is the one that authenticates a ratchet.
    public var agreementKeyPair: X25519KeyPair {
        let converted = SecretBytes(count: Int(crypto_scalarmult_curve25519_BYTES)) { output in
            secretKey.withUnsafeBytes { secret in
                _ = crypto_sign_ed25519_sk_to_curve25519(output.baseAddress!.assumingMemoryBound(to: UInt8.self),
                                                         secret.baseAddress!.assumingMemoryBound(to: UInt8.self))
            }
        }
        // A clamped scalar from a valid Ed25519 secret: its public half always exists.
        return X25519KeyPair(secretKey: converted)!
    }
}

/// An Ed25519 public key (32 bytes).
public struct IdentityPublicKey: Sendable, Hashable, CustomStringConvertible {
    /// The raw 32 bytes.
    public let bytes: [UInt8]

    /// The key size in bytes.
    public static let byteCount = Int(crypto_sign_PUBLICKEYBYTES)

    /// Wraps 32 raw bytes, or returns nil for any other length.
    public init?(bytes: some Collection<UInt8>) {
        guard bytes.count == Self.byteCount else { return nil }
        self.bytes = Array(bytes)
    }

    init(checkedBytes: [UInt8]) { bytes = checkedBytes }

    /// True when `signature` is a valid Ed25519 signature of `message` by this key.
    public func verify(signature: [UInt8], of message: [UInt8]) -> Bool {
        Sodium.ready()
        guard signature.count == Int(crypto_sign_BYTES) else { return false }
        return crypto_sign_verify_detached(signature, message, UInt64(message.count), bytes) == 0
    }

    /// The X25519 form of this public key (`crypto_sign_ed25519_pk_to_curve25519`), or nil when
    /// it is not a valid Ed25519 point or has small order.
    public var agreementKey: X25519PublicKey? {
        Sodium.ready()
        var converted = [UInt8](repeating: 0, count: Int(crypto_scalarmult_curve25519_BYTES))
        guard crypto_sign_ed25519_pk_to_curve25519(&converted, bytes) == 0 else { return nil }
        return X25519PublicKey(checkedBytes: converted)
    }

    /// The key in unpadded base64url.
    public var description: String { Base64URL.encode(bytes) }
}
