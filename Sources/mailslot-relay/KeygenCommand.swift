import ArgumentParser
import Foundation
import MailslotRelay
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
            file (mode 0600) and is not printed. With --vapid FILE, a new VAPID key for Web Push wake-ups \
            instead (PKCS#8 PEM, mode 0600; the public key is printed, the browsers' applicationServerKey); \
            with --webhook-secret FILE, a new whsec_ webhook secret (mode 0600, not printed).
            """
    )

    @Option(name: .long, help: ArgumentHelp("Write a new VAPID P-256 key to this new file (mode 0600) and print its public key.", valueName: "FILE"))
    var vapid: String?

    @Option(name: .long, help: ArgumentHelp("Write a new whsec_ webhook secret to this new file (mode 0600).", valueName: "FILE"))
    var webhookSecret: String?

    @Option(name: .long, help: ArgumentHelp("Write the secret key to this new file (mode 0600) instead of printing it.", valueName: "FILE"))
    var secretKeyFile: String?

    @Flag(name: .long, help: "Print one JSON object instead of labelled lines.")
    var json = false

    func run() throws {
        try reportingFailures {
            var fields: [(String, String)] = []
            if vapid != nil || webhookSecret != nil {
                guard secretKeyFile == nil else { throw CLIFailure.usage("--secret-key-file makes an issuer key: give it alone") }
                if let vapid {
                    let key = PushKeygen.vapidKey()
                    try IssuerKeyFile.createSecretFile(vapid, text: key.pem)
                    fields += [("vapid_key_file", vapid), ("vapid_public_key", key.publicKey)]
                }
                if let webhookSecret {
                    try IssuerKeyFile.createSecretFile(webhookSecret, text: PushKeygen.webhookSecret())
                    fields.append(("webhook_secret_file", webhookSecret))
                }
                try print(fields)
                return
            }
            let key = IdentityKeyPair()
            if let secretKeyFile {
                try IssuerKeyFile.create(secretKeyFile, key: key)
                fields.append(("secret_key_file", secretKeyFile))
            } else {
                fields.append(("secret_key", key.paserk))
            }
            fields.append(("public_key", key.publicKey.paserk))
            fields.append(("kid", key.publicKey.paserkID))
            try print(fields)
        }
    }

    /// Prints `fields` as labelled lines, or as one JSON object with `--json`.
    private func print(_ fields: [(String, String)]) throws {
        if json {
            let object = Dictionary(uniqueKeysWithValues: fields)
            let data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
            Swift.print(String(decoding: data, as: UTF8.self))
        } else {
            for (name, value) in fields { Swift.print("\(name): \(value)") }
        }
    }
}
