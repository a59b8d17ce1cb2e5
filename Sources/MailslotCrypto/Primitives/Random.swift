import CSodium

/// Cryptographically secure random bytes from libsodium (`randombytes_buf`).
public func randomBytes(_ count: Int) -> [UInt8] {
    Sodium.ready()
    precondition(count >= 0, "randomBytes: negative count")
    var bytes = [UInt8](repeating: 0, count: count)
    bytes.withUnsafeMutableBytes { buffer in
        if let base = buffer.baseAddress { randombytes_buf(base, buffer.count) }
    }
    return bytes
}

/// A uniformly random integer in `0..<upperBound` (`randombytes_uniform`, no modulo bias).
public func randomUniform(_ upperBound: UInt32) -> UInt32 {
    Sodium.ready()
    return randombytes_uniform(upperBound)
}
