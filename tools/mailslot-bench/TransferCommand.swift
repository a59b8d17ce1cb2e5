import ArgumentParser
import Foundation
import MailslotWire

/// `mailslot-bench transfer`: blob uploads and downloads (spec/protocol.md §4.15–§4.21).
struct TransferCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "transfer",
        abstract: "Upload and download N files of a size through the relay's blob routes; report MB/s, relay CPU per MiB and RSS growth.",
        discussion: """
            C clients each upload their share of the files (in the relay's parts, one part at a time) to a \
            recipient of their own; then every recipient downloads its files whole and acknowledges them, and \
            the run checks that the relay holds nothing afterwards. Relay mode sends pre-made ciphertext and \
            compares downloads byte for byte (the relay's work); e2e mode encrypts each file from disk, and \
            downloads to disk and opens it (digest, every tag, padding), comparing with the source after the \
            clock. With --alongside-rate, ordinary messages run at that rate for --alongside-seconds, first \
            alone, then while every client uploads, downloads and acknowledges its file in cycles: their p99 \
            latency is reported both ways.
            """
    )

    @OptionGroup var target: TargetOptions

    @Option(help: "relay: pre-made ciphertext (measures the relay); e2e: encrypt from disk, decrypt to disk.")
    var mode: Mode = .relay

    @Option(help: "Files in all, spread over the clients.")
    var files = 8

    @Option(help: ArgumentHelp("File size: bytes, or with KiB, MiB or GiB (e.g. 256MiB).", valueName: "SIZE"))
    var size: String = "64MiB"

    @Option(help: "Uploading clients, each with a recipient of its own.")
    var clients = 8

    @Option(help: ArgumentHelp("With --spawn: the relay's --max-file-bytes (default: the relay's, 100 MiB; the bench raises it to fit --size).", valueName: "SIZE"))
    var maxFileBytes: String?

    @Option(help: ArgumentHelp("With --spawn: the relay's --max-transfer-rate, blob bytes per second of all transfers together (e.g. 200MB; 0: no cap; default: the relay's, no cap).", valueName: "BYTES_PER_S"))
    var maxTransferRate: String?

    @Option(help: ArgumentHelp("Ordinary messages per second beside the transfers (0: none).", valueName: "PER_SEC"))
    var alongsideRate: Double = 0

    @Option(help: ArgumentHelp("How long the ordinary messages run, alone and beside the transfers.", valueName: "SECONDS"))
    var alongsideSeconds: Double = 10

    @OptionGroup var output: RunOutput

    func validate() throws {
        guard (1...10_000).contains(files) else { throw ValidationError("--files must be 1 to 10000") }
        guard (1...256).contains(clients) else { throw ValidationError("--clients must be 1 to 256") }
        guard let bytes = Self.bytes(size), bytes >= 1, bytes <= 64 << 30 else { throw ValidationError("--size must be 1 byte to 64GiB, e.g. 256MiB") }
        if let maxFileBytes { guard Self.bytes(maxFileBytes) != nil else { throw ValidationError("--max-file-bytes must be a size, e.g. 2GiB") } }
        if let maxTransferRate {
            guard target.spawn else { throw ValidationError("--max-transfer-rate goes with --spawn (a relay started elsewhere has its own)") }
            guard Self.bytes(maxTransferRate) != nil else { throw ValidationError("--max-transfer-rate must be bytes per second, e.g. 200MB or 0") }
        }
        guard alongsideRate >= 0, alongsideRate <= 100_000 else { throw ValidationError("--alongside-rate must be 0 to 100000") }
        guard alongsideSeconds > 0, alongsideSeconds <= 3600 else { throw ValidationError("--alongside-seconds must be more than 0 and at most 3600") }
    }

    /// `123`, `64KiB`, `256MiB`, `1GiB` (and KB/MB/GB as powers of ten).
    static func bytes(_ text: String) -> Int64? {
        let units: [(String, Int64)] = [("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30), ("KB", 1000), ("MB", 1_000_000), ("GB", 1_000_000_000)]
        for (suffix, factor) in units where text.hasSuffix(suffix) {
            guard let number = Int64(text.dropLast(suffix.count)), number >= 0, number <= Int64.max / factor else { return nil }
            return number * factor
        }
        return Int64(text)
    }

    func run() async throws {
        Teardown.installSignalHandlers()
        _ = ProcessStats.raiseFileLimit()
        let plainSize = Self.bytes(size)!
        let settings = TransferSettings(mode: mode, files: files, size: plainSize, clients: clients,
                                        alongsideRate: alongsideRate > 0 ? alongsideRate : nil, alongsideSeconds: alongsideSeconds,
                                        maxTransferRate: maxTransferRate.flatMap(Self.bytes), quiet: output.quiet)
        var relayArguments: [String] = []
        let limit = maxFileBytes.flatMap(Self.bytes) ?? max(plainSize, Defaults.maxFileBytes)
        if limit != Defaults.maxFileBytes {
            relayArguments += ["--max-file-bytes", "\(limit)"]
            // The relay refuses a largest file that one author's blob quota could not hold.
            let sealed = FileCipher.size(plainSize: limit) ?? limit
            if sealed > Defaults.maxAuthorBlobBytes { relayArguments += ["--max-author-blob-bytes", "\(sealed)"] }
        }
        // The relay checks the rate's bounds itself (1 MB/s to 1 TB/s, or 0) and says why it refuses one.
        if let rate = maxTransferRate.flatMap(Self.bytes) { relayArguments += ["--max-transfer-rate", "\(rate)"] }
        try await RunReport.measure(json: output.json, start: {
            try await RelayTarget.start(target, maxEnvelopeBytes: nil, extraArguments: target.spawn ? relayArguments : [])
        }) { relay in
            try await TransferRun(settings: settings, target: relay).run()
        }
    }
}
