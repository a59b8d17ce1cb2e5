import Foundation
import MailslotWire

/// The start-up check of a configuration: combinations that would run, but unsafely, are refused
/// with a sentence that says what to change. `mailslot-relay serve` runs it before anything else.
/// (Values that cannot run at all are ``RelayConfiguration/problems``, which every relay refuses.)
public enum ConfigurationCheck {
    /// Every unsafe setting of `configuration`, for the operator; empty when it may start.
    /// `developmentKey` is the development issuer key when it is among the trusted ones.
    public static func problems(_ configuration: RelayConfiguration, developmentKeyTrusted: Bool,
                                logLevel: String = "info") -> [String] {
        var problems: [String] = []
        let exposed = !configuration.listensOnLoopbackOnly
        if exposed && developmentKeyTrusted {
            problems.append("""
                the development issuer key (in the data folder) is trusted, and the relay listens on \
                \(configuration.host): anyone who reads that file can sign in as anyone. Run `mailslot-relay keygen`, \
                trust its public key with --issuer-public-key, and delete dev-issuer.key.
                """)
        }
        if exposed && (logLevel == "trace" || logLevel == "debug") {
            problems.append("""
                log level \(logLevel) writes frame bytes (uids, message ids) on a relay listening on \(configuration.host); \
                use info or above outside local development.
                """)
        }
        // A send to many takes a token per entry: with a burst below the most entries, a full
        // batch could never pass whole, and its tail would be refused `rate_limited` for ever.
        if configuration.createBurst < Double(configuration.maxBatchEntries) {
            problems.append("""
                the create burst (\(configuration.createBurst)) is below the entries of one send to many \
                (\(configuration.maxBatchEntries)): a full send to many could never be stored whole. Raise --create-burst \
                or lower --max-batch-entries.
                """)
        }
        if let token = configuration.metricsToken, token.utf8.count < 16 {
            problems.append("the metrics token must be at least 16 characters (e.g. `openssl rand -hex 32`).")
        }
        // The folder itself, not a link to it (systemd's StateDirectory with DynamicUser is a link).
        let folder = URL(fileURLWithPath: configuration.dataDirectory).resolvingSymlinksInPath().path
        if let mode = try? FileManager.default.attributesOfItem(atPath: folder)[.posixPermissions] as? Int,
           mode & 0o077 != 0 {
            problems.append("""
                the data folder \(configuration.dataDirectory) is open to other users (mode \(String(mode, radix: 8))): \
                it holds the database of every mailbox. Run `chmod 700 \(configuration.dataDirectory)`.
                """)
        }
        return problems
    }

    /// Settings that work but that the operator should know about, logged as warnings by `serve`
    /// at start: an object store reached in the clear. (A shared database with the file store is
    /// logged by every ``Relay`` as it opens its storage.)
    public static func warnings(_ configuration: RelayConfiguration) -> [String] {
        var warnings: [String] = []
        switch configuration.blobStore {
        case .s3(let text):
            if let location = try? S3Location(text), location.sendsInTheClear {
                warnings.append("""
                    the object store endpoint is plain http:// to \(location.host), not this machine: blob ciphertext, \
                    sizes and signed requests cross the network in the clear (the content stays end-to-end encrypted). \
                    Prefer https://.
                    """)
            }
        default:
            break
        }
        if configuration.push.allowPrivateAddresses {
            warnings.append("""
                --push-allow-private-addresses is on: a user's Web Push endpoint may make this relay call loopback, \
                private and special addresses (the operator's own network). Use it for tests and private deployments only.
                """)
        }
        return warnings
    }
}
