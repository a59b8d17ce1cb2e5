@_exported import MailslotCrypto

/// The defaults of DESIGN.md that several parts must agree on: the relay applies them, the
/// token minter and the clients assume them.
public enum Defaults {
    /// The audience (`aud`) a relay accepts when none is configured, and tokens are minted for.
    /// Operators set their own, so that a token for one relay is useless at another.
    public static let audience = "mailslot"
    /// The lifetime of a minted custom token when none is given, in seconds.
    public static let tokenLifetime: Int64 = 300
}
