import Foundation

/// A table of a Markdown document, for tests that hold the documents to the code: the rows of the
/// one table whose header is the given one, each row its cells, trimmed.
public struct MarkdownTable: Sendable {
    /// The header cells.
    public let header: [String]
    /// The body rows, in order; each has as many cells as the header.
    public let rows: [[String]]

    /// The repository's root folder (this file is Tests/Support/MarkdownTable.swift).
    public static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// The table of `file` (relative to the repository) whose header is `header`; throws unless there
    /// is exactly one, and unless every row has the header's number of cells.
    public init(in file: String, header: [String]) throws {
        let text = try String(contentsOf: Self.repository.appendingPathComponent(file), encoding: .utf8)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let starts = lines.indices.filter { Self.cells(lines[$0]) == header }
        guard starts.count == 1, let start = starts.first else {
            throw TestRelayError("\(file) has \(starts.count) tables headed \(header), not one")
        }
        guard start + 1 < lines.count, let rule = Self.cells(lines[start + 1]),
              rule.count == header.count, rule.allSatisfy({ !$0.isEmpty && $0.allSatisfy { "-:".contains($0) } }) else {
            throw TestRelayError("the table headed \(header) in \(file) has no delimiter row")
        }
        var rows: [[String]] = []
        for line in lines[(start + 2)...] {
            guard let cells = Self.cells(line) else { break }
            guard cells.count == header.count else {
                throw TestRelayError("a row of \(cells.count) cells in the table headed \(header) in \(file): \(line)")
            }
            rows.append(cells)
        }
        self.header = header
        self.rows = rows
    }

    /// The cells of a table line (`| a | b |`), or nil for a line that is not one. A `\|` stays in its cell.
    static func cells(_ line: String) -> [String]? {
        let trimmed = line.trimmingCharacters(in: .whitespaces)
        guard trimmed.hasPrefix("|"), trimmed.hasSuffix("|"), trimmed.count >= 2 else { return nil }
        var cells: [String] = []
        var cell = ""
        var escaped = false
        for character in trimmed.dropFirst().dropLast() {
            if escaped { cell.append(character); escaped = false; continue }
            switch character {
            case "\\": escaped = true; cell.append(character)
            case "|": cells.append(cell.trimmingCharacters(in: .whitespaces)); cell = ""
            default: cell.append(character)
            }
        }
        cells.append(cell.trimmingCharacters(in: .whitespaces))
        return cells
    }
}
