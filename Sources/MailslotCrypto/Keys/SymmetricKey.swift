/// A 32-byte secret key for PASETO `v4.local` (symmetric authenticated encryption).
public struct SymmetricKey: Sendable, Equatable {
    /// The key size in bytes.
    public static let byteCount = 32

    /// The secret bytes, wiped on release.
    public let bytes: SecretBytes

    /// Generates a fresh random key.
    public init() { bytes = SecretBytes(randomCount: Self.byteCount) }

    /// Wraps 32 secret bytes, or returns nil for any other length.
    public init?(bytes: SecretBytes) {
        guard bytes.count == Self.byteCount else { return nil }
        self.bytes = bytes
    }
}
