import CSodium

/// Process-wide libsodium initialisation. Every entry point into MailslotCrypto calls
/// `Sodium.ready()` first; `sodium_init` is itself thread-safe and idempotent, and this global
/// `let` makes sure it runs exactly once.
enum Sodium {
    private static let initialised: Bool = sodium_init() >= 0

    /// Makes sure libsodium is initialised. A failure here means the process has no usable
    /// randomness source, and no cryptography may continue.
    static func ready() {
        precondition(initialised, "libsodium could not be initialised (sodium_init failed)")
    }
}
