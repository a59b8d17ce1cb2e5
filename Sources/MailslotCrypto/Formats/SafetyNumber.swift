// Safety numbers: what two people compare out of band to know they hold each other's real
// identity keys. Specified in spec/envelope.md §Safety numbers.
//
//   h_0 = BLAKE2b-512(PAE("mailslot-fingerprint-v1", uid, identity key))
//   h_i = BLAKE2b-512(h_{i-1} || identity key)      for i = 1 … 5200
//   digits(uid, key) = for each of the first six 5-byte chunks c of h_5200:
//                      (big-endian integer of c) mod 100000, as 5 decimal digits
//   safety number    = the two users' 30 digits, the smaller string first (so both sides agree)

/// A user's fingerprint and the safety number of a pair of users, in groups of five digits.
public enum SafetyNumber {
    static let label = Array("mailslot-fingerprint-v1".utf8)
    static let iterations = 5200

    /// The 30-digit fingerprint of `uid`'s identity key, as six groups of five digits.
    public static func fingerprint(uid: String, identityKey: IdentityPublicKey) -> [String] {
        var hash = blake2b(preAuthenticationEncoding([label, Array(uid.utf8), identityKey.bytes]), length: 64)
        // Iterating makes finding a second key with the same digits cost 5200 hashes per try.
        for _ in 0..<iterations { hash = blake2b(hash + identityKey.bytes, length: 64) }
        return (0..<6).map { chunk in
            let value = hash[chunk * 5..<chunk * 5 + 5].reduce(UInt64(0)) { $0 << 8 | UInt64($1) } % 100_000
            let digits = String(value)
            return String(repeating: "0", count: 5 - digits.count) + digits
        }
    }

    /// The 60-digit safety number of two users, as twelve groups of five digits, identical on both
    /// sides whichever is "local".
    public static func of(_ a: (uid: String, identityKey: IdentityPublicKey),
                          _ b: (uid: String, identityKey: IdentityPublicKey)) -> [String] {
        let first = fingerprint(uid: a.uid, identityKey: a.identityKey)
        let second = fingerprint(uid: b.uid, identityKey: b.identityKey)
        return first.joined() <= second.joined() ? first + second : second + first
    }

    /// A safety number formatted for reading aloud: groups of five, four groups per line.
    public static func display(_ groups: [String]) -> String {
        stride(from: 0, to: groups.count, by: 4)
            .map { groups[$0..<min($0 + 4, groups.count)].joined(separator: " ") }
            .joined(separator: "\n")
    }
}
