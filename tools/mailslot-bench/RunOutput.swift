import ArgumentParser

/// The options `run` and `crash` share: how long to wait for the end, and how to report.
struct RunOutput: ParsableArguments {
    @Option(help: ArgumentHelp("How long to wait without progress for the last answers, acks and the drain after sending stops.", valueName: "SECONDS"))
    var drainTimeout: Double = 30

    @Flag(help: "End stdout with one JSON object (the last line).")
    var json = false

    @Flag(help: "No progress lines on stderr.")
    var quiet = false

    func validate() throws {
        guard drainTimeout > 0, drainTimeout <= 3600 else { throw ValidationError("--drain-timeout must be more than 0 and at most 3600 seconds") }
    }
}
