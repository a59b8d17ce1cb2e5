import CSodium

/// The 32-byte key of one encrypted file (spec/attachments.md §1.2): fresh and random for every
/// file, carried to the recipients only inside the sealed chat message (§3).
public struct FileKey: Sendable, Equatable {
    /// The key size in bytes (`crypto_secretstream_xchacha20poly1305_KEYBYTES`).
    public static let byteCount = 32

    /// The secret bytes, wiped on release.
    public let bytes: SecretBytes

    /// A fresh random key (`crypto_secretstream_xchacha20poly1305_keygen`).
    public init() {
        bytes = SecretBytes(count: Self.byteCount) { buffer in
            crypto_secretstream_xchacha20poly1305_keygen(buffer.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
    }

    /// Wraps 32 secret bytes, or returns nil for any other length.
    public init?(bytes: SecretBytes) {
        guard bytes.count == Self.byteCount else { return nil }
        self.bytes = bytes
    }
}
