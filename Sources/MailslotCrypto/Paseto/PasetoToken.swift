/// Why a PASETO token was refused. Each case names one class of failure, so callers can map
/// them to precise error codes.
public enum PasetoError: Error, Equatable, Sendable {
    /// Not of the form `version.purpose.payload[.footer]`, or the payload is not canonical base64url.
    case malformed(String)
    /// A version other than `v4` (for example `v2` or `v3`).
    case unsupportedVersion(String)
    /// A purpose other than the one the operation expects (`local` where `public` is needed, or the reverse).
    case wrongPurpose(String)
    /// The footer differs from the one the caller required.
    case footerMismatch
    /// The signature (`public`) or the authentication tag (`local`) does not verify.
    case invalid
}

/// The parts of a PASETO token string, split and decoded but not yet verified.
public struct PasetoToken: Sendable, Equatable {
    /// `"v4"`, `"v3"`, …
    public let version: String
    /// `"public"` or `"local"`.
    public let purpose: String
    /// The decoded payload (for `v4.public`: message then signature; for `v4.local`: nonce, ciphertext, tag).
    public let payload: [UInt8]
    /// The decoded footer; empty when the token has none. Unauthenticated until the token is verified.
    public let footer: [UInt8]

    /// The header the payload was bound to, e.g. `"v4.public."`.
    public var header: String { "\(version).\(purpose)." }

    /// Splits `token` into its parts. Checks the shape and the encoding only.
    public init(parsing token: String) throws(PasetoError) {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 || parts.count == 4 else {
            throw .malformed("a token has 3 or 4 dot-separated parts")
        }
        guard let payload = Base64URL.decode(parts[2]) else {
            throw .malformed("the payload is not unpadded base64url")
        }
        var footer: [UInt8] = []
        if parts.count == 4 {
            // An empty footer must be written without the trailing dot.
            guard !parts[3].isEmpty, let decoded = Base64URL.decode(parts[3]) else {
                throw .malformed("the footer is not unpadded base64url")
            }
            footer = decoded
        }
        self.version = String(parts[0])
        self.purpose = String(parts[1])
        self.payload = payload
        self.footer = footer
    }

    /// Throws unless the token is `v4` with the given purpose.
    func require(purpose expected: String) throws(PasetoError) {
        guard version == "v4" else { throw .unsupportedVersion(version) }
        guard purpose == expected else { throw .wrongPurpose(purpose) }
    }

    /// Throws when the caller named a footer and the token carries another (constant-time).
    func require(footer expected: [UInt8]?) throws(PasetoError) {
        if let expected, !constantTimeEquals(expected, footer) { throw .footerMismatch }
    }

    /// Serialises `header || base64url(payload) [|| "." || base64url(footer)]`.
    static func serialise(header: String, payload: [UInt8], footer: [UInt8]) -> String {
        footer.isEmpty
            ? header + Base64URL.encode(payload)
            : header + Base64URL.encode(payload) + "." + Base64URL.encode(footer)
    }
}
