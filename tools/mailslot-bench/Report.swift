import Foundation
import Histogram

/// A JSON value with members in the order written and explicit nulls: the report's last line.
indirect enum JSON {
    case null
    case bool(Bool)
    case int(Int)
    case number(Double)
    case string(String)
    case array([JSON])
    case object([(String, JSON)])

    /// An optional integer, null when absent.
    static func int(_ value: Int?) -> JSON { value.map(JSON.int) ?? .null }
    /// An optional number, null when absent or not finite.
    static func number(_ value: Double?) -> JSON { value.flatMap { $0.isFinite ? JSON.number($0) : nil } ?? .null }

    /// Compact JSON text.
    var text: String {
        switch self {
        case .null: "null"
        case .bool(let value): value ? "true" : "false"
        case .int(let value): "\(value)"
        case .number(let value):
            // Three decimals are plenty for milliseconds and rates; no exponent forms.
            value == value.rounded() && abs(value) < 1e15 ? "\(Int64(value))" : String(format: "%.3f", value)
        case .string(let value): Self.quote(value)
        case .array(let values): "[" + values.map(\.text).joined(separator: ",") + "]"
        case .object(let members): "{" + members.map { Self.quote($0.0) + ":" + $0.1.text }.joined(separator: ",") + "}"
        }
    }

    private static func quote(_ text: String) -> String {
        var quoted = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": quoted += "\\\""
            case "\\": quoted += "\\\\"
            case "\n": quoted += "\\n"
            case "\t": quoted += "\\t"
            case "\r": quoted += "\\r"
            case _ where scalar.value < 0x20: quoted += String(format: "\\u%04x", scalar.value)
            default: quoted.unicodeScalars.append(scalar)
            }
        }
        return quoted + "\""
    }
}

/// p50, p99, p99.9 and max of a latency histogram (microseconds), in milliseconds.
struct LatencySummary {
    let count: UInt64
    let p50: Double, p99: Double, p999: Double, max: Double

    init(_ histogram: Latencies) {
        count = histogram.totalCount
        func ms(_ microseconds: UInt64) -> Double { Double(microseconds) / 1000 }
        p50 = ms(histogram.valueAtPercentile(50))
        p99 = ms(histogram.valueAtPercentile(99))
        p999 = ms(histogram.valueAtPercentile(99.9))
        max = ms(histogram.max)
    }

    var json: JSON {
        guard count > 0 else { return .null }
        return .object([("p50", .number(p50)), ("p99", .number(p99)), ("p999", .number(p999)), ("max", .number(max)), ("count", .int(Int(count)))])
    }

    /// One row of the human table.
    func row(_ label: String) -> String {
        guard count > 0 else { return label.padding(toLength: 22, withPad: " ", startingAt: 0) + "(no samples)" }
        return label.padding(toLength: 22, withPad: " ", startingAt: 0)
            + [p50, p99, p999, max].map { String(format: "%9.3f", $0) }.joined(separator: " ")
    }
}

/// Human-readable sizes for the summary.
enum Format {
    static func bytes(_ value: Int?) -> String {
        guard let value else { return "n/a" }
        if abs(value) >= 1 << 20 { return String(format: "%.1f MiB", Double(value) / 1_048_576) }
        if abs(value) >= 1 << 10 { return String(format: "%.1f KiB", Double(value) / 1024) }
        return "\(value) B"
    }

    /// A count, or "n/a" when unknown (a metric the relay does not serve).
    static func count(_ value: Int?) -> String { value.map(String.init) ?? "n/a" }

    static func optional(_ value: Double?, _ format: String) -> String {
        value.map { String(format: format, $0) } ?? "n/a"
    }
}
