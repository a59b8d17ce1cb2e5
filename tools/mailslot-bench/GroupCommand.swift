import ArgumentParser
import Foundation
import MailslotWire

/// `mailslot-bench group`: one group of M members sending through the relay's send to many
/// (issue 30 item 7, docs/design/groups.md §10).
struct GroupCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "group",
        abstract: "Send group messages to M members through the relay's send to many; report commit, sealing and delivery times.",
        discussion: """
            M throwaway members (v2 key bundles) form one group: every body's `group` member names its state \
            (id, version, hash; spec/groups.md). The first --senders members take turns sending a text group \
            message, sealed by its sender for every other member in the pairwise ratchet with them (the client \
            library's format and calls, spec/ratchet.md) and sent as one send to many (`POST /v1/messages`, as \
            the client library sends it). One message is in flight at a time: after each answer the bench reads \
            the relay's `mailslot_batch_seconds` histogram, whose change is that batch's commit time (admission \
            to commit). Each sender's first message (its ratchets started: the first send to a fresh group) goes \
            before the clock and is reported apart. --online percent of the members (the senders always among \
            them) hold a subscription and ack what they get; the others connect after the clock and receive their \
            backlog. Every copy received is opened and checked (up to about 50,000 copies, after the clock). \
            Relay CPU per copy covers storing, delivering and erasing it; the bench's /metrics reads are taken \
            out. Commit → delivery compares the relay's clock with the bench's: loopback relays only. With \
            --json the last line of stdout is one JSON object.
            """
    )

    @OptionGroup var target: TargetOptions

    @Option(help: ArgumentHelp("Members of the group (2 to 1000), each a user with its own keys.", valueName: "M"))
    var members = 10

    @Option(help: ArgumentHelp("Members that send, in turn (1 to 16, at most M).", valueName: "K"))
    var senders = 4

    @Option(help: ArgumentHelp("Group messages per second offered in all (one in flight at a time: a slower relay lowers the rate achieved, reported).", valueName: "PER_SEC"))
    var rate = 1.0

    @Option(help: ArgumentHelp("Percentage of the members online (subscribed) during the clock; the rest receive afterwards.", valueName: "PERCENT"))
    var online = 100.0

    @Option(help: ArgumentHelp("Send for this long after the first sends.", valueName: "SECONDS"))
    var seconds = 10.0

    @Option(help: ArgumentHelp("Send at most this many group messages after the first sends (with --seconds: whichever ends first).", valueName: "N"))
    var messages: Int?

    @Option(help: ArgumentHelp("Plaintext text size in bytes.", valueName: "BYTES"))
    var size = 256

    @OptionGroup var output: RunOutput

    func validate() throws {
        guard (2...GroupLimits.maxMembers).contains(members) else { throw ValidationError("--members must be 2 to \(GroupLimits.maxMembers)") }
        guard (1...16).contains(senders), senders <= members else { throw ValidationError("--senders must be 1 to 16, and at most --members") }
        guard rate > 0, rate <= 1000 else { throw ValidationError("--rate must be more than 0 and at most 1000 per second") }
        guard online >= 0, online <= 100 else { throw ValidationError("--online must be 0 to 100 (a percentage)") }
        guard seconds > 0, seconds <= 3600 else { throw ValidationError("--seconds must be more than 0 and at most 3600") }
        if let messages { guard (1...1_000_000).contains(messages) else { throw ValidationError("--messages must be 1 to 1000000") } }
        guard (1...16_384).contains(size) else { throw ValidationError("--size must be 1 to 16384 bytes") }
    }

    func run() async throws {
        Teardown.installSignalHandlers()
        let fileLimit = ProcessStats.raiseFileLimit()
        let needed = 2 * members + 64
        if fileLimit > 0, fileLimit < UInt64(needed) {
            Console.error("mailslot-bench: warning: the open-file limit is \(fileLimit); this run needs about \(needed)")
        }
        let settings = GroupSettings(members: members, senders: senders, rate: rate, onlinePercent: online, seconds: seconds,
                                     messages: messages, size: size, drainTimeout: output.drainTimeout, quiet: output.quiet)
        try await RunReport.measure(json: output.json, start: {
            // The relay's defaults hold a 1,000-member batch (--max-batch-entries 1000, 8 MiB); the
            // spawned relay's connection and rate limits are already far above any group here.
            try await RelayTarget.start(target, maxEnvelopeBytes: nil)
        }) { relay in
            try await GroupRun(settings: settings, target: relay).run()
        }
    }
}

/// What a `group` run does.
struct GroupSettings: Sendable {
    let members: Int
    let senders: Int
    let rate: Double
    let onlinePercent: Double
    let seconds: Double
    let messages: Int?
    let size: Int
    let drainTimeout: Double
    let quiet: Bool

    /// Members online during the clock: the percentage of M, rounded, and never fewer than the
    /// senders (their sockets carry the sends, so they receive as they send).
    var onlineCount: Int { max(senders, min(members, Int((Double(members) * onlinePercent / 100).rounded()))) }
}
