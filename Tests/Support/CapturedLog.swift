import Logging
import Synchronization

/// Collects every log line (message and metadata) the relay writes.
public final class CapturedLog: Sendable {
    private let lines = Mutex<[String]>([])

    /// An empty log.
    public init() {}

    /// Every line so far.
    public var text: String { lines.withLock { $0.joined(separator: "\n") } }

    /// A logger at trace level that writes here.
    public var logger: Logger {
        var logger = Logger(label: "captured") { _ in Handler(log: self) }
        logger.logLevel = .trace
        return logger
    }

    struct Handler: LogHandler {
        let log: CapturedLog
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) {
            let all = metadata.merging(event.metadata ?? [:]) { $1 }
            log.lines.withLock { $0.append("\(event.level) \(event.message) \(all) \(event.source)") }
        }
    }
}
