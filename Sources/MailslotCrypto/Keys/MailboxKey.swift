import CSodium

/// A user's X25519 key pair for receiving sealed boxes (`crypto_box_seal`).
///
/// Anyone may seal to the public half; only the holder of the secret half opens.
public struct MailboxKeyPair: Sendable {
    /// The 32-byte X25519 secret key.
    public let secretKey: SecretBytes
    /// The public half, published in the user's key bundle.
    public let publicKey: MailboxPublicKey

    /// Generates a fresh key pair.
    public init() {
        self.init(seed: SecretBytes(randomCount: Int(crypto_box_SEEDBYTES)))
    }

    /// Derives the key pair from a 32-byte seed (deterministic; for tests and vectors).
    package init(seed: SecretBytes) {
        precondition(seed.count == Int(crypto_box_SEEDBYTES), "MailboxKeyPair: the seed must be 32 bytes")
        var publicBytes = [UInt8](repeating: 0, count: Int(crypto_box_PUBLICKEYBYTES))
        secretKey = SecretBytes(count: Int(crypto_box_SECRETKEYBYTES)) { secret in
            seed.withUnsafeBytes { seedBytes in
                _ = crypto_box_seed_keypair(&publicBytes, secret.baseAddress!, seedBytes.baseAddress!)
            }
        }
        publicKey = MailboxPublicKey(checkedBytes: publicBytes)
    }

    /// Takes a 32-byte X25519 secret key and computes its public half.
    public init?(secretKey: SecretBytes) {
        guard secretKey.count == Int(crypto_box_SECRETKEYBYTES) else { return nil }
        var publicBytes = [UInt8](repeating: 0, count: Int(crypto_box_PUBLICKEYBYTES))
        let status = secretKey.withUnsafeBytes { secret in
            crypto_scalarmult_base(&publicBytes, secret.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        guard status == 0 else { return nil }
        self.secretKey = secretKey
        self.publicKey = MailboxPublicKey(checkedBytes: publicBytes)
    }

    /// X25519 with `peer` (`crypto_scalarmult`): the 32-byte shared secret, or nil when it is all
    /// zeros (a low-order `peer` key), which every key agreement of spec/ratchet.md refuses.
    /// The caller wipes the result.
    public func agree(with peer: MailboxPublicKey) -> [UInt8]? {
        var shared = [UInt8](repeating: 0, count: Int(crypto_scalarmult_BYTES))
        let status = secretKey.withUnsafeBytes { secret in
            crypto_scalarmult(&shared, secret.baseAddress!.assumingMemoryBound(to: UInt8.self), peer.bytes)
        }
        // libsodium already fails on an all-zero result; the explicit check does not rely on it.
        guard status == 0, sodium_is_zero(shared, shared.count) == 0 else {
            wipe(&shared)
            return nil
        }
        return shared
    }

    /// Opens a sealed box addressed to this key pair, or returns nil if it was not sealed to
    /// this key or was altered in any way.
    public func open(sealed box: [UInt8]) -> [UInt8]? {
        let overhead = crypto_box_sealbytes()
        guard box.count >= overhead else { return nil }
        var plaintext = [UInt8](repeating: 0, count: box.count - overhead)
        let status = secretKey.withUnsafeBytes { secret in
            crypto_box_seal_open(&plaintext, box, UInt64(box.count), publicKey.bytes,
                                 secret.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        guard status == 0 else { return nil }
        return plaintext
    }
}

/// An X25519 key pair of any role: mailbox key, signed or one-time prekey, ratchet key.
public typealias X25519KeyPair = MailboxKeyPair
/// An X25519 public key of any role (see ``X25519KeyPair``).
public typealias X25519PublicKey = MailboxPublicKey

/// An X25519 public key (32 bytes) that messages are sealed to.
public struct MailboxPublicKey: Sendable, Hashable, CustomStringConvertible {
    /// The raw 32 bytes.
    public let bytes: [UInt8]

    /// The key size in bytes.
    public static let byteCount = Int(crypto_box_PUBLICKEYBYTES)

    /// Wraps 32 raw bytes, or returns nil for any other length.
    public init?(bytes: some Collection<UInt8>) {
        guard bytes.count == Self.byteCount else { return nil }
        self.bytes = Array(bytes)
    }

    init(checkedBytes: [UInt8]) { bytes = checkedBytes }

    /// Seals `plaintext` to this key (`crypto_box_seal`): an anonymous sender, a fresh ephemeral
    /// key per box, 48 bytes of overhead. Nil when the key is unusable (see ``isUsable``).
    public func seal(_ plaintext: [UInt8]) -> [UInt8]? {
        Sodium.ready()
        var box = [UInt8](repeating: 0, count: plaintext.count + crypto_box_sealbytes())
        guard crypto_box_seal(&box, plaintext, UInt64(plaintext.count), bytes) == 0 else { return nil }
        return box
    }

    /// False for a low-order point (such as all zeros): every shared secret with it is zero, so
    /// nothing can be sealed to it. Key bundles carrying one are refused.
    public var isUsable: Bool {
        Sodium.ready()
        var shared = [UInt8](repeating: 0, count: Int(crypto_scalarmult_BYTES))
        let scalar = SecretBytes(randomCount: Int(crypto_scalarmult_SCALARBYTES))
        let status = scalar.withUnsafeBytes { scalarBytes in
            crypto_scalarmult(&shared, scalarBytes.baseAddress!.assumingMemoryBound(to: UInt8.self), bytes)
        }
        wipe(&shared)
        return status == 0
    }

    /// The key in unpadded base64url.
    public var description: String { Base64URL.encode(bytes) }
}
