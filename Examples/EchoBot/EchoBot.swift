// An echo bot on the public MailslotClient API only: it answers every text with the same text,
// and every picture with a delivery receipt.
//
//   MAILSLOT_RELAY=http://127.0.0.1:8080 \
//   MAILSLOT_ISSUER_SECRET_KEY_FILE=./mailslot-data/dev-issuer.key \
//   swift run mailslot-echo-bot
//
// A real bot gets its tokens from the app's backend; this one mints its own with the issuer key
// (the development key of a local relay), which only a trusted backend should hold.
import Foundation
import MailslotClient

@main
struct EchoBot {
    static func main() async throws {
        let environment = ProcessInfo.processInfo.environment
        let relay = URL(string: environment["MAILSLOT_RELAY"] ?? "http://127.0.0.1:8080")!
        let uid = environment["MAILSLOT_BOT_UID"] ?? "echo-bot"
        let keyFile = environment["MAILSLOT_ISSUER_SECRET_KEY_FILE"] ?? "./mailslot-data/dev-issuer.key"
        let audience = environment["MAILSLOT_AUDIENCE"] ?? Defaults.audience
        let folder = environment["MAILSLOT_BOT_DATA"] ?? "./echo-bot-data"

        guard let keyText = try? String(contentsOfFile: keyFile, encoding: .utf8),
              let issuerKey = try? IdentityKeyPair(paserk: keyText.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            FileHandle.standardError.write(Data("echo-bot: cannot read an issuer secret key (k4.secret) from \(keyFile)\n".utf8))
            exit(66)
        }
        let client = try MailslotClient(relay: relay, databasePath: folder + "/client.sqlite") {
            try TokenIssuer(key: issuerKey, audience: audience).mint(uid: uid)
        }
        try await client.signIn()
        print("echo-bot: signed in as \(uid); fingerprint \(try await client.ownFingerprint())")

        let stream = client.messages { state in print("echo-bot: \(state)") }
        for try await received in stream {
            switch received.message.type {
            case .text:
                let text = received.message.payload.text ?? ""
                let outcome = try await client.send(text: text, to: received.sender)
                print("echo-bot: echoed \(received.id) from \(received.sender): \(outcome)")
            case .picture:
                try await client.send(Payload(receipt: Receipt(kind: .delivered, messageIDs: [received.id])), type: .receipt,
                                      to: received.sender)
            default:
                break  // receipts, typing, locations: nothing to answer
            }
        }
    }
}
