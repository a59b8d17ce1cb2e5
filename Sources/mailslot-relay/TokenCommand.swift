import ArgumentParser
import Foundation
import MailslotWire

/// `mailslot-relay token`: custom tokens, as an app's backend would mint them.
struct TokenCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Work with custom sign-in tokens.",
        subcommands: [Mint.self, Verify.self]
    )

    /// `mailslot-relay token mint`: one signed token on stdout.
    struct Mint: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Mint a custom token (PASETO v4.public) that signs UID in at a relay.",
            usage: "mailslot-relay token mint --uid UID [--ttl SECONDS] [--audience ID] [--jti ID] (--issuer-secret-key FILE | --data DIR)",
            discussion: """
                The token is printed on stdout, nothing else. It is a bearer credential until it expires: \
                hand it to the user's client, do not log it.
                """
        )

        @Option(name: .long, help: "The user the token signs in: 1 to 128 of A-Z a-z 0-9 . _ -")
        var uid: String

        @Option(name: .long, help: ArgumentHelp("Lifetime in seconds, 1 to 3600.", valueName: "SECONDS"))
        var ttl: Int64 = Defaults.tokenLifetime

        @Option(name: .long, help: ArgumentHelp("The relay's id (`aud`); must match the relay's --audience.", valueName: "ID"))
        var audience: String = Defaults.audience

        @Option(name: .long, help: ArgumentHelp("A token id (`jti`), if the relay should see one.", valueName: "ID"))
        var jti: String?

        @Option(name: .long, help: ArgumentHelp("The file holding the issuer secret key (one line, k4.secret.…).", valueName: "FILE"))
        var issuerSecretKey: String?

        @Option(name: .long, help: ArgumentHelp("Use the development issuer key of the relay's data folder instead.", valueName: "DIR"))
        var data: String?

        /// The key file: the one given, or the data folder's development key.
        var keyFile: String { issuerSecretKey ?? DevelopmentKey.path(in: data ?? "./mailslot-data") }

        func validate() throws {
            guard (issuerSecretKey == nil) != (data == nil) else {
                throw ValidationError("give either --issuer-secret-key FILE or --data DIR (the relay's development key)")
            }
            guard Identifier.isValidUID(uid) else {
                throw ValidationError("'\(uid)' is not a valid uid: use 1 to 128 of A-Z a-z 0-9 . _ - (and not '.' or '..')")
            }
            guard (1...CustomToken.maxLifetime).contains(ttl) else {
                throw ValidationError("--ttl must be between 1 and \(CustomToken.maxLifetime) seconds (custom tokens live at most one hour)")
            }
            guard !audience.isEmpty, audience.utf8.count <= CustomToken.maxClaimBytes else {
                throw ValidationError("--audience must be 1 to \(CustomToken.maxClaimBytes) bytes")
            }
            if let jti, jti.isEmpty || jti.utf8.count > CustomToken.maxClaimBytes {
                throw ValidationError("--jti must be 1 to \(CustomToken.maxClaimBytes) bytes")
            }
        }

        func run() throws {
            try reportingFailures {
                let key = try IssuerKeyFile.read(keyFile)
                if let mode = try? FileManager.default.attributesOfItem(atPath: keyFile)[.posixPermissions] as? Int,
                   mode & 0o077 != 0 {
                    FileHandle.standardError.write(Data(
                        "mailslot-relay: warning: '\(keyFile)' is readable by other users; run `chmod 600 \(keyFile)`\n".utf8))
                }
                do throws(TokenError) {
                    print(try TokenIssuer(key: key, audience: audience).mint(uid: uid, lifetime: ttl, tokenID: jti))
                } catch {
                    // validate() has already refused every input the issuer can refuse.
                    throw CLIFailure.usage("cannot mint: \(error.code)")
                }
            }
        }
    }

    /// `mailslot-relay token verify`: checks a token as the relay would, and says why it is refused.
    struct Verify: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Check a custom token as the relay would: prints the uid, or why it is refused.",
            discussion: """
                Reads the token from the argument, or from stdin when it is '-'. Exit 0 when it is accepted, \
                65 with the error code (e.g. token_expired) when it is refused.
                """
        )

        @Argument(help: "The token, or - to read it from stdin.")
        var token: String

        @Option(name: .long, help: ArgumentHelp("A trusted issuer public key (k4.public.…); repeat to trust several.", valueName: "KEY"))
        var issuerPublicKey: [String] = []

        @Option(name: .long, help: ArgumentHelp("The relay's id (`aud`).", valueName: "ID"))
        var audience: String = Defaults.audience

        func run() throws {
            try reportingFailures {
                guard !issuerPublicKey.isEmpty else { throw CLIFailure.usage("give at least one --issuer-public-key k4.public.…") }
                var keys: [IdentityPublicKey] = []
                for text in issuerPublicKey {
                    do { keys.append(try IdentityPublicKey(paserk: text)) } catch {
                        throw CLIFailure.usage("--issuer-public-key takes a PASERK k4.public.… key")
                    }
                }
                let text = token == "-" ? (readLine(strippingNewline: true) ?? "") : token
                do throws(TokenError) {
                    let verified = try TokenVerifier(issuerKeys: keys, audience: audience).verify(text)
                    print("uid: \(verified.uid)")
                    print("expires_at: \(Timestamp.format(Int64(verified.expiresAt.rounded(.down))))")
                    print("kid: \(verified.keyID)")
                    if let jti = verified.tokenID { print("jti: \(jti)") }
                } catch {
                    throw CLIFailure.dataError("token refused: \(error.code)")
                }
            }
        }
    }
}
