import ArgumentParser

/// `mailslot`: send and receive end-to-end encrypted messages through a Mailslot relay.
@main
struct MailslotCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mailslot",
        abstract: "Send and receive end-to-end encrypted messages through a Mailslot relay.",
        discussion: """
            Start with `mailslot login --relay URL --token TOKEN` (your app's backend mints the token). \
            Each --profile keeps its keys, contacts and messages in ~/.mailslot/NAME (or $MAILSLOT_HOME/NAME), \
            readable by you only.

            Exit codes: 0 success · 1 failure · 64 bad arguments · 65 refused data (changed key, invalid keys, a safety number that does not match) \
            · 69 relay unreachable or refusing · 75 queued, not sent yet (run `mailslot flush`) · 77 not logged in \
            or the session cannot be renewed (log in again).
            """,
        subcommands: [Login.self, Send.self, Receive.self, Listen.self, History.self, Rejected.self, Contacts.self, Fingerprint.self,
                      Trust.self, Resend.self, RotateKey.self, Unsend.self, Block.self, Unblock.self, Flush.self, GroupCommand.self, Push.self, Logout.self]
    )

    /// Runs the command line, with the global options (`--profile`, `--json`) accepted before
    /// the subcommand as well as after it: `mailslot --profile bob --json receive`, as git and
    /// kubectl take theirs.
    static func main() async {
        await main(GlobalOptions.movedAfterSubcommand(Array(CommandLine.arguments.dropFirst())))
    }
}
