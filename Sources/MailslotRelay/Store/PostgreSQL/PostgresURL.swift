import Foundation
import PostgresNIO

/// A `postgres://user:password@host:port/database?sslmode=…` URL, read into a client
/// configuration. The URL carries a password: it is never logged, and every error about it shows
/// it with the password replaced (``redacted(_:)``).
///
/// `sslmode` as libpq reads it, but deny by default: `disable` (plain), `prefer` (the default:
/// TLS when the server offers it, with full certificate verification), `require`, `verify-ca`
/// and `verify-full` (TLS or no connection; `verify-ca` skips only the host name check — unlike
/// libpq's `require`, the certificate is always verified).
enum PostgresURL {
    /// The client configuration for `text`; throws a sentence for the operator, without the password.
    static func configuration(_ text: String) throws -> PostgresClient.Configuration {
        let shown = redacted(text)
        guard let components = URLComponents(string: text), ["postgres", "postgresql"].contains(components.scheme?.lowercased() ?? ""),
              let host = components.host, !host.isEmpty else {
            throw RelayConfigurationError("--database-url (MAILSLOT_DATABASE_URL) takes postgres://USER:PASSWORD@HOST:PORT/DATABASE, not '\(shown)'")
        }
        guard let user = components.user?.removingPercentEncoding, !user.isEmpty else {
            throw RelayConfigurationError("--database-url (MAILSLOT_DATABASE_URL) names no user: '\(shown)'")
        }
        let database = String(components.path.drop(while: { $0 == "/" })).removingPercentEncoding
        guard let database, !database.isEmpty, !database.contains("/") else {
            throw RelayConfigurationError("--database-url (MAILSLOT_DATABASE_URL) names no database: '\(shown)'")
        }
        let port = components.port ?? 5432
        guard (1...65535).contains(port) else {
            throw RelayConfigurationError("--database-url (MAILSLOT_DATABASE_URL) has no valid port: '\(shown)'")
        }
        var tls = TLSConfiguration.makeClientConfiguration()
        let mode = components.queryItems?.last(where: { $0.name == "sslmode" })?.value ?? "prefer"
        let choice: PostgresClient.Configuration.TLS
        switch mode {
        case "disable": choice = .disable
        case "prefer": choice = .prefer(tls)
        case "require", "verify-full": choice = .require(tls)
        case "verify-ca":
            tls.certificateVerification = .noHostnameVerification
            choice = .require(tls)
        default:
            throw RelayConfigurationError("--database-url (MAILSLOT_DATABASE_URL): sslmode is disable, prefer, require, verify-ca or verify-full, not '\(mode)'")
        }
        if let other = components.queryItems?.first(where: { $0.name != "sslmode" }) {
            throw RelayConfigurationError("--database-url (MAILSLOT_DATABASE_URL): unknown parameter '\(other.name)' (only sslmode is read)")
        }
        // Brackets around an IPv6 literal are the URL's, not the address's.
        let address = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        return PostgresClient.Configuration(host: address, port: port, username: user,
                                            password: components.password?.removingPercentEncoding, database: database, tls: choice)
    }

    /// `text` with its password, if any, replaced by `***`: the only form of the URL that may be
    /// shown or logged.
    static func redacted(_ text: String) -> String {
        // By hand rather than through URLComponents, so that even a URL it cannot read is redacted.
        guard let scheme = text.range(of: "://") else { return text.contains("@") ? "***" : text }
        let rest = text[scheme.upperBound...]
        guard let at = rest.lastIndex(of: "@") else { return text }
        let credentials = rest[..<at]
        guard let colon = credentials.firstIndex(of: ":") else { return text }
        return String(text[..<scheme.upperBound]) + credentials[..<colon] + ":***" + rest[at...]
    }
}
