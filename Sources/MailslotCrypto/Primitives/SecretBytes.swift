import CSodium

/// Secret key material that is wiped (`sodium_memzero`) when the last reference goes away.
///
/// The bytes live in one private allocation that is never copied by Swift's copy-on-write
/// machinery, which is why this is a class and not an array. Compare with `==`, which is
/// constant-time.
public final class SecretBytes: @unchecked Sendable, Equatable {
    // Immutable after `init`, so sharing across threads is safe: this is the reason for
    // `@unchecked Sendable`.
    private let storage: UnsafeMutableRawBufferPointer

    /// The number of secret bytes.
    public var count: Int { logicalCount }

    /// Takes `count` fresh random bytes from libsodium.
    public convenience init(randomCount count: Int) {
        self.init(count: count) { buffer in
            if let base = buffer.baseAddress { randombytes_buf(base, buffer.count) }
        }
    }

    /// Copies `bytes` into wiped-on-release storage. The caller should wipe its own copy.
    public convenience init(copying bytes: some Collection<UInt8>) {
        self.init(count: bytes.count) { buffer in buffer.copyBytes(from: bytes) }
    }

    /// Creates `count` bytes and lets `fill` write them (for libsodium calls that output keys).
    init(count: Int, fill: (UnsafeMutableRawBufferPointer) -> Void) {
        Sodium.ready()
        precondition(count >= 0, "SecretBytes: negative count")
        // One spare byte so that a zero-length secret still has a base address to wipe.
        let allocation = UnsafeMutableRawBufferPointer.allocate(byteCount: count + 1, alignment: 16)
        allocation.initializeMemory(as: UInt8.self, repeating: 0)
        storage = allocation
        logicalCount = count
        fill(UnsafeMutableRawBufferPointer(rebasing: allocation[0..<count]))
    }

    private let logicalCount: Int

    deinit {
        sodium_memzero(storage.baseAddress!, storage.count)
        storage.deallocate()
    }

    /// Lends the secret bytes to `body`. Do not let them escape.
    public func withUnsafeBytes<R, E: Error>(_ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R {
        try body(UnsafeRawBufferPointer(rebasing: storage[0..<logicalCount]))
    }

    /// Constant-time comparison (`sodium_memcmp`); only the lengths are compared in variable time.
    public static func == (lhs: SecretBytes, rhs: SecretBytes) -> Bool {
        lhs.withUnsafeBytes { a in rhs.withUnsafeBytes { b in constantTimeEquals(a, b) } }
    }
}

/// Compares two byte strings in time that depends only on their lengths (`sodium_memcmp`).
/// Use it for every comparison that involves a secret: MACs, ratchet ids, tokens.
public func constantTimeEquals(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Bool {
    Sodium.ready()
    guard a.count == b.count else { return false }
    guard a.count > 0 else { return true }
    return sodium_memcmp(a.baseAddress!, b.baseAddress!, a.count) == 0
}

/// Constant-time comparison of two byte arrays; see ``constantTimeEquals(_:_:)-(UnsafeRawBufferPointer,_)``.
public func constantTimeEquals(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    a.withUnsafeBytes { pa in b.withUnsafeBytes { pb in constantTimeEquals(pa, pb) } }
}

/// Overwrites `bytes` with zeros in a way the optimiser may not remove (`sodium_memzero`).
public func wipe(_ bytes: inout [UInt8]) {
    Sodium.ready()
    bytes.withUnsafeMutableBytes { buffer in
        if let base = buffer.baseAddress { sodium_memzero(base, buffer.count) }
    }
}
