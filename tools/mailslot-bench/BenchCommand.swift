import ArgumentParser
import Foundation
import MailslotRelay

/// `mailslot-bench`: load and crash tests for the relay, with real WebSocket clients.
@main
struct MailslotBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mailslot-bench",
        abstract: "Measure a Mailslot relay with real WebSocket senders and recipients.",
        discussion: """
            `run` (the default) measures throughput and latency; `crash` kills the relay again and again \
            and checks that nothing answered is lost; `group` sends group messages to M members through the \
            relay's send to many. Exit status: 0 all checks passed; 1 a check failed \
            (lost, duplicated, refused or left-over messages; the crash test's FAIL); 64 bad flags; \
            69 the relay cannot be reached or started; 70 the run could not proceed.
            """,
        subcommands: [RunCommand.self, TransferCommand.self, GroupCommand.self, CrashCommand.self],
        defaultSubcommand: RunCommand.self
    )
}

/// Whether messages are sealed once up front or by each sender.
enum Mode: String, ExpressibleByArgument, Sendable {
    /// Pre-sealed envelopes, one per recipient, made before the clock starts: the relay alone.
    case relay
    /// Each message sealed by its sender and opened and verified by its recipient (libsodium).
    case e2e
}

/// Which envelope format e2e mode seals (spec/envelope.md, version 2: ratchets).
enum EnvelopeVersion: String, ExpressibleByArgument, Sendable {
    /// Version 1: each message signed and sealed on its own.
    case v1
    /// Version 2: each message in the sender's ratchet with its recipient (X3DH, Double Ratchet).
    case v2
}

/// `mailslot-bench run`: throughput and latency.
struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Send messages from S senders to R recipients over WebSockets; report throughput, latency and losses.",
        discussion: """
            Each sender writes `send` frames on its own subscription socket; each recipient acks every \
            `message` frame and the relay answers `acked` once it has erased it. Latencies are measured \
            from the send (in an open loop, from the moment the scheduler meant to send, so a slow relay \
            cannot hide its backlog) to the delivery and to the `acked` frame. Progress goes to stderr once \
            a second; the summary to stdout; with --json the last line of stdout is one JSON object. \
            With --nodes N and --postgres or --database-url, N spawned relays share one PostgreSQL \
            database (senders and recipients on different nodes with --placement split), and the \
            report adds each node's CPU and memory, the database server's, commits and cross-node \
            notifications per second. With --wake-registrations N (under tools/push run), N offline users \
            with Web Push registrations at the stand-in get messages beside the load, the stand-in answering \
            as --push-fault says, and the report adds the relay's push counters, memory and CPU.
            """
    )

    @OptionGroup var target: TargetOptions

    @Option(help: "relay: envelopes sealed once per recipient before the clock starts (measures the relay); e2e: each message sealed by its sender and opened and verified by its recipient.")
    var mode: Mode = .relay

    @Option(help: "E2e mode: v2 (ratchets: version 2 bundles with a signed prekey, one ratchet per sender and recipient) or v1 (each message signed and sealed on its own).")
    var envelope: EnvelopeVersion = .v2

    @Flag(help: "E2e mode with v2: each recipient uploads a one-time prekey per sender (at most 200, the relay's default limit) and each sender claims one per recipient before the clock; a claim the relay's limits refuse, or none left, starts the session with the signed prekey alone.")
    var oneTimePrekeys = false

    @Option(help: ArgumentHelp("E2e mode: before the socket phase, measure seal and open CPU in-process in this many alternating batches of each format (0: skip).", valueName: "N"))
    var cryptoBatches = 5

    @Option(help: ArgumentHelp("Messages in each in-process batch (--crypto-batches).", valueName: "N"))
    var cryptoBatchMessages = 2000

    @Option(help: "Sending users, each with its own socket.")
    var senders = 4

    @Option(help: "Receiving users that ack every message.")
    var recipients = 4

    @Option(help: ArgumentHelp("Plaintext body size in bytes; the envelope is the size class that holds it.", valueName: "BYTES"))
    var size = 256

    @Option(help: ArgumentHelp("Send for this long (default 10 unless --messages is given).", valueName: "SECONDS"))
    var duration: Double?

    @Option(help: ArgumentHelp("Send this many messages in all (with --duration: whichever ends first).", valueName: "N"))
    var messages: Int?

    @Option(help: ArgumentHelp("Open loop: offer this many messages per second in all, whatever the answers. Without it, a closed loop.", valueName: "PER_SEC"))
    var rate: Double?

    @Option(help: ArgumentHelp("Closed loop: unanswered sends each sender keeps outstanding (default 32).", valueName: "N"))
    var window: Int?

    @Option(help: ArgumentHelp("Idle subscribed sockets held open during the run (connection scale); reports relay RSS per idle connection.", valueName: "C"))
    var subscribers = 0

    @Option(help: ArgumentHelp("Extra recipients that receive but never ack: their backlog waits on disk; RSS is sampled as it grows. Drained at the end.", valueName: "K"))
    var slowRecipients = 0

    @Option(help: ArgumentHelp("Wake-ups (docs/design/wakeups.md §9.5): N offline users, each with a Web Push registration at the push stand-in, sent a message every half --wake-interval beside the run's load, so each is woken once per interval. 0 with --push-standin: the relay configured for the stand-ins, nothing registered (the baseline). Needs --spawn.", valueName: "N"))
    var wakeRegistrations: Int?

    @Option(help: ArgumentHelp("The folder `tools/push run` made (default: $MAILSLOT_TEST_PUSH_DIR): the spawned relay gets its providers' settings; the registrations point at its Web Push receiver.", valueName: "DIR"))
    var pushStandin: String?

    @Option(help: "How the Web Push stand-in answers during the run: none (201, every wake-up checked and decrypted), hang (never answers), 500 (every wake-up).")
    var pushFault: PushFault = .none

    @Option(help: ArgumentHelp("With --wake-registrations: the relay's --push-wake-interval (5 to 3600 s); short, so a short run sees many wake-ups.", valueName: "SECONDS"))
    var wakeInterval: Int = 5

    @OptionGroup var output: RunOutput

    /// The stand-in folder: --push-standin, else the variable `tools/push run` sets.
    private var standinFolder: String? {
        pushStandin ?? ProcessInfo.processInfo.environment["MAILSLOT_TEST_PUSH_DIR"].flatMap { $0.isEmpty ? nil : $0 }
    }

    func validate() throws {
        try validateWake()
        guard (1...1000).contains(senders) else { throw ValidationError("--senders must be 1 to 1000") }
        guard (1...1000).contains(recipients) else { throw ValidationError("--recipients must be 1 to 1000") }
        guard (0...1000).contains(slowRecipients) else { throw ValidationError("--slow-recipients must be 0 to 1000") }
        guard (0...200_000).contains(subscribers) else { throw ValidationError("--subscribers must be 0 to 200000") }
        guard (1...1_000_000).contains(size) else { throw ValidationError("--size must be 1 to 1000000 bytes") }
        if oneTimePrekeys { guard mode == .e2e, envelope == .v2 else { throw ValidationError("--one-time-prekeys goes with --mode e2e and --envelope v2") } }
        guard (0...100).contains(cryptoBatches) else { throw ValidationError("--crypto-batches must be 0 to 100") }
        guard (1...1_000_000).contains(cryptoBatchMessages) else { throw ValidationError("--crypto-batch-messages must be 1 to 1000000") }
        if let duration { guard duration > 0, duration <= 3600 else { throw ValidationError("--duration must be more than 0 and at most 3600 seconds") } }
        if let messages { guard messages >= 1, messages <= 100_000_000 else { throw ValidationError("--messages must be 1 to 100000000") } }
        if let rate { guard rate > 0, rate <= 10_000_000 else { throw ValidationError("--rate must be more than 0 and at most 10000000 per second") } }
        if let window {
            guard (1...100_000).contains(window) else { throw ValidationError("--window must be 1 to 100000") }
            guard rate == nil else { throw ValidationError("--window is for the closed loop; an open loop (--rate) keeps no window") }
        }
    }

    /// The wake-up options go together, with a spawned relay the bench configures itself.
    private func validateWake() throws {
        guard let wakeRegistrations else {
            if pushStandin != nil || pushFault != .none || wakeInterval != 5 {
                throw ValidationError("--push-standin, --push-fault and --wake-interval go with --wake-registrations N")
            }
            return
        }
        guard (0...10_000).contains(wakeRegistrations) else { throw ValidationError("--wake-registrations must be 0 to 10000") }
        guard PushSettings.wakeIntervalRange.contains(wakeInterval) else {
            throw ValidationError("--wake-interval must be \(PushSettings.wakeIntervalRange.lowerBound) to \(PushSettings.wakeIntervalRange.upperBound) seconds (the relay's --push-wake-interval)")
        }
        guard target.spawn else {
            throw ValidationError("--wake-registrations needs --spawn: the bench starts the relay with the stand-ins' settings and --push-wake-interval")
        }
        guard standinFolder != nil else {
            throw ValidationError("--wake-registrations needs the push stand-ins: --push-standin DIR, or run under tools/push run (MAILSLOT_TEST_PUSH_DIR)")
        }
        if wakeRegistrations == 0 && pushFault != .none { throw ValidationError("--push-fault needs registrations to fail (--wake-registrations 1 or more)") }
    }

    func run() async throws {
        Teardown.installSignalHandlers()
        var wake: WakeSettings?
        if let wakeRegistrations, let standinFolder {
            do {
                wake = WakeSettings(registrations: wakeRegistrations, standin: try PushStandin(folder: standinFolder), fault: pushFault,
                                    interval: wakeInterval)
            } catch let failure as BenchFailure {
                Console.error("mailslot-bench: error: \(failure.description)")
                throw ExitCode(failure.status)
            }
        }
        let fileLimit = ProcessStats.raiseFileLimit()
        let needed = 2 * (senders + recipients + slowRecipients + subscribers) + 64
        if fileLimit > 0, fileLimit < UInt64(needed) {
            Console.error("mailslot-bench: warning: the open-file limit is \(fileLimit); this run needs about \(needed)")
        }
        let settings = RunSettings(mode: mode, envelope: envelope, oneTimePrekeys: oneTimePrekeys,
                                   cryptoBatches: cryptoBatches, cryptoBatchMessages: cryptoBatchMessages,
                                   senders: senders, recipients: recipients, slowRecipients: slowRecipients,
                                   subscribers: subscribers, size: size, duration: duration ?? (messages == nil ? 10 : nil),
                                   messages: messages, rate: rate, window: window ?? 32, drainTimeout: output.drainTimeout, quiet: output.quiet,
                                   wake: wake)
        try await RunReport.measure(json: output.json, start: {
            let body = try MessageBody(size: size, senderUID: "bench-xxxxxxxxxx-s0000", recipientUIDLength: "bench-xxxxxxxxxx-r0000".count,
                                       version: mode == .e2e ? envelope : .v1)
            return try await RelayTarget.start(target, maxEnvelopeBytes: body.envelopeBytes > 65536 ? body.envelopeBytes : nil,
                                               extraArguments: wake?.relayArguments ?? [])
        }) { relay in
            try await Benchmark(settings: settings, target: relay).run()
        }
    }
}
