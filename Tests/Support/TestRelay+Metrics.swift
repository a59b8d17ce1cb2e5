import MailslotRelay

extension TestRelay {
    /// An unlabelled counter or gauge of the relay's metrics; 0 when the relay has not set it yet.
    public func counter(_ name: String) -> Double {
        for line in relay.metricsText().split(separator: "\n") where line.hasPrefix(name + " ") {
            return Double(line.split(separator: " ").last ?? "") ?? 0
        }
        return 0
    }

    /// The sum of a labelled counter's series whose labels contain every one of `labels`
    /// (e.g. `mailslot_http_requests_total` with `PUT` and `parts`: the part uploads answered).
    public func sum(_ name: String, labelsContaining labels: [String]) -> Double {
        relay.metricsText().split(separator: "\n")
            .filter { line in line.hasPrefix(name + "{") && labels.allSatisfy { line.contains($0) } }
            .reduce(0) { $0 + (Double($1.split(separator: " ").last ?? "") ?? 0) }
    }

    /// The part uploads (`PUT /v1/blobs/{id}/parts/{n}`) the relay answered, whatever their status.
    public func partUploads() -> Int {
        Int(sum("mailslot_http_requests_total", labelsContaining: ["PUT", "parts"]))
    }
}
