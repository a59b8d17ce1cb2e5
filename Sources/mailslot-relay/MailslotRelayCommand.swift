import ArgumentParser

/// `mailslot-relay`: the relay's executable: runs the relay, makes issuer keys, mints tokens.
@main
struct MailslotRelayCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mailslot-relay",
        abstract: "The Mailslot relay: an end-to-end encrypted, ephemeral mailbox relay.",
        discussion: """
            Exit codes: 0 success · 64 bad arguments (invalid uid, TTL out of range) · 65 malformed key file \
            · 66 key file missing · 73 cannot create an output file · 77 key file not readable.
            """,
        subcommands: [ServeCommand.self, KeygenCommand.self, TokenCommand.self]
    )
}
