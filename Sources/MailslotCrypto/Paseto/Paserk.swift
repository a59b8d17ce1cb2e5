/// PASERK (Platform-Agnostic Serialized Keys) for version 4: how Mailslot writes keys as text
/// (`k4.public`, `k4.secret`, `k4.local`) and names them (`k4.pid`, `k4.sid`, `k4.lid`).
///
/// An id is `kN.<type>.` followed by base64url(BLAKE2b-264(`kN.<type>.` || the key's PASERK)).
/// Parsing refuses any other version or type, and keys of the wrong length.
public enum PaserkError: Error, Equatable, Sendable {
    /// Not a PASERK string of the expected type (`k4.public`, …): the text says what was expected.
    case wrongType(expected: String)
    /// The key material is not canonical base64url or has the wrong length.
    case malformedKey
    /// A `k4.secret` whose public half does not belong to its seed.
    case inconsistentSecretKey
}

enum Paserk {
    static func encode(type: String, _ bytes: [UInt8]) -> String {
        "k4.\(type)." + Base64URL.encode(bytes)
    }

    static func decode(type: String, _ text: String, byteCount: Int) throws(PaserkError) -> [UInt8] {
        let prefix = "k4.\(type)."
        guard text.hasPrefix(prefix) else { throw .wrongType(expected: prefix) }
        guard let bytes = Base64URL.decode(text.dropFirst(prefix.count)), bytes.count == byteCount else {
            throw .malformedKey
        }
        return bytes
    }

    /// `k4.<type>.` || base64url(BLAKE2b-264(`k4.<type>.` || paserk)).
    static func identifier(type: String, of paserk: String) -> String {
        let header = "k4.\(type)."
        return header + Base64URL.encode(blake2b(Array((header + paserk).utf8), length: 33))
    }
}

extension IdentityPublicKey {
    /// The key as `k4.public.…`.
    public var paserk: String { Paserk.encode(type: "public", bytes) }

    /// The key's id, `k4.pid.…`: what custom tokens name in their footer as `kid`.
    public var paserkID: String { Paserk.identifier(type: "pid", of: paserk) }

    /// Reads a `k4.public.…` string.
    public init(paserk: String) throws(PaserkError) {
        self.init(checkedBytes: try Paserk.decode(type: "public", paserk, byteCount: Self.byteCount))
    }
}

extension IdentityKeyPair {
    /// The secret key as `k4.secret.…`. This string is a secret: write it only to a private file.
    public var paserk: String {
        secretKey.withUnsafeBytes { Paserk.encode(type: "secret", Array($0)) }
    }

    /// The secret key's id, `k4.sid.…`.
    public var paserkSecretID: String { Paserk.identifier(type: "sid", of: paserk) }

    /// Reads a `k4.secret.…` string, refusing one whose public half does not match its seed.
    public init(paserk: String) throws(PaserkError) {
        var bytes = try Paserk.decode(type: "secret", paserk, byteCount: 64)
        defer { wipe(&bytes) }
        guard let pair = IdentityKeyPair(secretKey: SecretBytes(copying: bytes)) else {
            throw .inconsistentSecretKey
        }
        self = pair
    }
}

extension SymmetricKey {
    /// The key as `k4.local.…`. This string is a secret.
    public var paserk: String {
        bytes.withUnsafeBytes { Paserk.encode(type: "local", Array($0)) }
    }

    /// The key's id, `k4.lid.…`.
    public var paserkID: String { Paserk.identifier(type: "lid", of: paserk) }

    /// Reads a `k4.local.…` string.
    public init(paserk: String) throws(PaserkError) {
        var bytes = try Paserk.decode(type: "local", paserk, byteCount: Self.byteCount)
        defer { wipe(&bytes) }
        self.init(bytes: SecretBytes(copying: bytes))!
    }
}
