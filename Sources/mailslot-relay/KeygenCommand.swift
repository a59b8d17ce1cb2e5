import ArgumentParser
import Foundation
import MailslotWire

/// `mailslot-relay keygen`: a new issuer key pair, as PASERK.
struct KeygenCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keygen",
        abstract: "Print a new issuer key pair as PASERK (k4.secret, k4.public, and the key id k4.pid).",
        discussion: """
            The app's backend keeps the secret key and mints custom tokens with it; the relay is given \
            the public key (`serve --issuer-public-key k4.public.…`). Several public keys may be trusted \
            at once, so keys rotate without downtime. With --secret-key-file the secret goes to a new \
            file (mode 0600) and is not printed.
            """
    )

    @Option(name: .long, help: ArgumentHelp("Write the secret key to this new file (mode 0600) instead of printing it.", valueName: "FILE"))
    var secretKeyFile: String?

    @Flag(name: .long, help: "Print one JSON object instead of labelled lines.")
    var json = false

    func run() throws {
        try reportingFailures {
            let key = IdentityKeyPair()
            var fields: [(String, String)] = []
            if let secretKeyFile {
                try IssuerKeyFile.create(secretKeyFile, key: key)
                fields.append(("secret_key_file", secretKeyFile))
            } else {
                fields.append(("secret_key", key.paserk))
            }
            fields.append(("public_key", key.publicKey.paserk))
            fields.append(("kid", key.publicKey.paserkID))
            if json {
                let object = Dictionary(uniqueKeysWithValues: fields)
                let data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
                print(String(decoding: data, as: UTF8.self))
            } else {
                for (name, value) in fields { print("\(name): \(value)") }
            }
        }
    }
}
