import Foundation
import MailslotCrypto

/// spec/openapi.yaml's `components`, read as JSON values, and a JSON Schema check of a value
/// against one of its schemas: enough to validate what the relay sends without a YAML or JSON
/// Schema package (``OpenAPITests``).
///
/// The reader takes the YAML the document is written in — block mappings and sequences, flow
/// sequences of scalars, quoted and plain scalars, `|` and `>` block scalars — and refuses
/// anything else rather than guess. The checker knows the keywords the document's schemas use:
/// `$ref` (within the document), `oneOf`, `anyOf`, `allOf`, `type`, `const`, `enum`, `minimum`,
/// `maximum`, `minLength`, `maxLength`, `pattern`, `required`, `properties`,
/// `additionalProperties: false`, `items`, `minItems`, `maxItems`; a schema with another
/// keyword that constrains is refused, so that no rule is silently skipped.
struct OpenAPISchema {
    /// `components`, as JSON.
    let components: JSONValue

    /// A line the reader did not understand, or a keyword the checker does not know.
    struct Unsupported: Error, CustomStringConvertible {
        let description: String
    }

    /// Reads the `components:` section of `text`, an OpenAPI document.
    init(document text: String) throws {
        let all = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard let start = all.firstIndex(of: "components:") else { throw Unsupported(description: "no components: section") }
        let end = all[(start + 1)...].firstIndex { line in line.first.map { $0 != " " && $0 != "#" } ?? false } ?? all.endIndex
        var reader = Reader(lines: Array(all[(start + 1)..<end]))
        components = try reader.node(indent: 2)
    }

    /// Every way `value` breaks schema `name` of `components.schemas`; empty when it is valid.
    func violations(of value: JSONValue, schema name: String) throws -> [String] {
        try violations(of: value, against: try resolve("#/components/schemas/\(name)"), at: name)
    }

    private func resolve(_ reference: String) throws -> JSONValue {
        let prefix = "#/components/"
        guard reference.hasPrefix(prefix) else { throw Unsupported(description: "reference \(reference) outside the document") }
        var node = components
        for part in reference.dropFirst(prefix.count).split(separator: "/") {
            guard case .object(let members) = node, let next = members[String(part)] else {
                throw Unsupported(description: "reference \(reference) names nothing")
            }
            node = next
        }
        return node
    }

    /// The keywords that say nothing of validity (annotations).
    private static let annotations: Set<String> = ["description", "title", "example", "examples", "format", "deprecated", "default"]
    private static let checked: Set<String> = ["$ref", "oneOf", "anyOf", "allOf", "type", "const", "enum", "minimum", "maximum",
                                               "minLength", "maxLength", "pattern", "required", "properties", "additionalProperties",
                                               "items", "minItems", "maxItems"]

    private func violations(of value: JSONValue, against schema: JSONValue, at path: String) throws -> [String] {
        guard case .object(let keywords) = schema else { throw Unsupported(description: "\(path): a schema that is not an object") }
        if let unknown = Set(keywords.keys).subtracting(Self.annotations).subtracting(Self.checked).sorted().first {
            throw Unsupported(description: "\(path): keyword \(unknown) is not checked here")
        }
        var found: [String] = []
        if case .string(let reference) = keywords["$ref"] {
            found += try violations(of: value, against: try resolve(reference), at: "\(path)→\(reference)")
        }
        if case .array(let all) = keywords["allOf"] {
            for (index, part) in all.enumerated() { found += try violations(of: value, against: part, at: "\(path).allOf[\(index)]") }
        }
        if case .array(let choices) = keywords["oneOf"] {
            let each = try choices.enumerated().map { index, choice in try violations(of: value, against: choice, at: "\(path).oneOf[\(index)]") }
            let matching = each.filter(\.isEmpty).count
            if matching != 1 {
                // The reasons of the schemas that came closest (but for a `type` of another
                // kind of frame), to say what to fix.
                let closest = each.filter { !$0.isEmpty }.min { reasons, other in
                    func distance(_ reasons: [String]) -> Int { reasons.count + (reasons.contains { $0.contains(".type: ") } ? 1000 : 0) }
                    return distance(reasons) < distance(other)
                } ?? []
                found.append("\(path): matches \(matching) of its oneOf schemas, not exactly one \(closest)")
            }
        }
        if case .array(let choices) = keywords["anyOf"], try choices.allSatisfy({ try !violations(of: value, against: $0, at: path).isEmpty }) {
            found.append("\(path): matches none of its anyOf schemas")
        }
        if let type = keywords["type"] {
            let types: [String]
            switch type {
            case .string(let one): types = [one]
            case .array(let many): types = many.compactMap { if case .string(let name) = $0 { name } else { nil } }
            default: throw Unsupported(description: "\(path): type \(type)")
            }
            if !types.contains(where: { Self.has(value, type: $0) }) { found.append("\(path): \(Self.text(value)) is not of type \(types)") }
        }
        if let constant = keywords["const"], !Self.equal(constant, value) {
            found.append("\(path): \(Self.text(value)) is not \(Self.text(constant))")
        }
        if case .array(let allowed) = keywords["enum"], !allowed.contains(where: { Self.equal($0, value) }) {
            found.append("\(path): \(Self.text(value)) is not one of \(allowed.map(Self.text))")
        }
        if case .number(let number) = value {
            if case .number(let minimum) = keywords["minimum"], number < minimum { found.append("\(path): \(number) is below \(minimum)") }
            if case .number(let maximum) = keywords["maximum"], number > maximum { found.append("\(path): \(number) is above \(maximum)") }
        }
        if case .string(let string) = value {
            if case .number(let minimum) = keywords["minLength"], Double(string.count) < minimum { found.append("\(path): shorter than \(minimum)") }
            if case .number(let maximum) = keywords["maxLength"], Double(string.count) > maximum { found.append("\(path): longer than \(maximum)") }
            if case .string(let pattern) = keywords["pattern"],
               string.range(of: pattern, options: .regularExpression) == nil {
                found.append("\(path): \(Self.text(value)) does not match \(pattern)")
            }
        }
        if case .array(let items) = value {
            if case .number(let minimum) = keywords["minItems"], Double(items.count) < minimum { found.append("\(path): fewer than \(minimum) items") }
            if case .number(let maximum) = keywords["maxItems"], Double(items.count) > maximum { found.append("\(path): more than \(maximum) items") }
            if let schema = keywords["items"] {
                for (index, item) in items.enumerated() { found += try violations(of: item, against: schema, at: "\(path)[\(index)]") }
            }
        }
        if case .object(let members) = value {
            if case .array(let required) = keywords["required"] {
                for case .string(let name) in required where members[name] == nil { found.append("\(path): no member \(name)") }
            }
            let properties: [String: JSONValue]
            if case .object(let declared) = keywords["properties"] { properties = declared } else { properties = [:] }
            for (name, member) in members.sorted(by: { $0.key < $1.key }) {
                if let schema = properties[name] {
                    found += try violations(of: member, against: schema, at: "\(path).\(name)")
                } else if keywords["additionalProperties"] == .bool(false) {
                    found.append("\(path): member \(name) is not allowed")
                }
            }
        }
        return found
    }

    private static func has(_ value: JSONValue, type: String) -> Bool {
        switch (type, value) {
        case ("null", .null), ("boolean", .bool), ("number", .number), ("string", .string), ("array", .array), ("object", .object): true
        // JSONValue reads numbers as Double: integral is all it can say of a large one (2⁶³−1).
        case ("integer", .number(let number)): number == number.rounded() && number.isFinite
        default: false
        }
    }

    private static func equal(_ left: JSONValue, _ right: JSONValue) -> Bool { left == right }

    private static func text(_ value: JSONValue) -> String {
        (try? String(decoding: JSONEncoder().encode(value), as: UTF8.self)) ?? "\(value)"
    }

    /// A reader of the document's YAML, line by line.
    private struct Reader {
        let lines: [String]
        var index = 0

        init(lines: [String]) {
            // Blank lines and whole-line comments carry nothing (block scalars are read as text
            // and may lose their blank lines: descriptions only).
            self.lines = lines.filter { line in
                let content = line.drop { $0 == " " }
                return !content.isEmpty && !content.hasPrefix("#")
            }
        }

        static func indent(_ line: String) -> Int { line.prefix { $0 == " " }.count }

        /// The node whose lines start at `index`, indented `indent` spaces.
        mutating func node(indent: Int) throws -> JSONValue {
            guard index < lines.count, Self.indent(lines[index]) == indent else { throw Unsupported(description: "no node at \(indent) spaces") }
            let content = lines[index].dropFirst(indent)
            return content == "-" || content.hasPrefix("- ") ? try sequence(indent: indent) : try mapping(indent: indent)
        }

        private mutating func sequence(indent: Int) throws -> JSONValue {
            var items: [JSONValue] = []
            while index < lines.count, Self.indent(lines[index]) == indent, lines[index].dropFirst(indent).hasPrefix("-") {
                let item = String(lines[index].dropFirst(indent + 1).drop { $0 == " " })
                if item.isEmpty {
                    index += 1
                    items.append(try node(indent: Self.indent(lines[index])))
                } else if Self.keyAndValue(item) != nil {
                    // `- key: value`: a mapping whose first member is on the dash's line.
                    var rewritten = lines
                    rewritten[index] = String(repeating: " ", count: indent + 2) + item
                    var inner = Reader(filtered: rewritten, index: index)
                    items.append(try inner.mapping(indent: indent + 2))
                    index = inner.index
                } else {
                    items.append(try Self.scalar(item))
                    index += 1
                }
            }
            return .array(items)
        }

        private init(filtered: [String], index: Int) {
            lines = filtered
            self.index = index
        }

        private mutating func mapping(indent: Int) throws -> JSONValue {
            var members: [String: JSONValue] = [:]
            while index < lines.count, Self.indent(lines[index]) == indent {
                let line = String(lines[index].dropFirst(indent))
                guard !line.hasPrefix("-"), let (key, value) = Self.keyAndValue(line) else {
                    throw Unsupported(description: "not a member: \(lines[index])")
                }
                index += 1
                let deeper = index < lines.count ? Self.indent(lines[index]) : -1
                if value.isEmpty {
                    if deeper > indent {
                        members[key] = try node(indent: deeper)
                    } else if deeper == indent, lines[index].dropFirst(indent).hasPrefix("- ") {
                        members[key] = try sequence(indent: indent)
                    } else {
                        members[key] = .null
                    }
                } else if ["|", "|-", ">", ">-"].contains(value) {
                    var text: [String] = []
                    while index < lines.count, Self.indent(lines[index]) > indent { text.append(lines[index].trimmingCharacters(in: .whitespaces)); index += 1 }
                    members[key] = .string(text.joined(separator: value.hasPrefix("|") ? "\n" : " "))
                } else {
                    var scalar = try Self.scalar(value)
                    // A plain scalar folded over more lines.
                    while index < lines.count, Self.indent(lines[index]) > indent, case .string(let first) = scalar {
                        scalar = .string(first + " " + lines[index].trimmingCharacters(in: .whitespaces))
                        index += 1
                    }
                    members[key] = scalar
                }
            }
            return .object(members)
        }

        /// `key: value` or `key:`, the key plain or quoted; nil for a line that is no member.
        static func keyAndValue(_ line: String) -> (String, String)? {
            if line.hasPrefix("\"") || line.hasPrefix("'") {
                let quote = line.first!
                guard let close = line.dropFirst().firstIndex(of: quote) else { return nil }
                let rest = line[line.index(after: close)...]
                guard rest == ":" || rest.hasPrefix(": ") else { return nil }
                return (String(line[line.index(after: line.startIndex)..<close]), rest.dropFirst().trimmingCharacters(in: .whitespaces))
            }
            if line.hasPrefix("{") || line.hasPrefix("[") { return nil }
            if line.hasSuffix(":"), !line.contains(": ") { return (String(line.dropLast()), "") }
            guard let separator = line.range(of: ": ") else { return nil }
            return (String(line[..<separator.lowerBound]), line[separator.upperBound...].trimmingCharacters(in: .whitespaces))
        }

        /// A scalar or a flow collection of scalars.
        static func scalar(_ text: String) throws -> JSONValue {
            if text.hasPrefix("["), text.hasSuffix("]") {
                return .array(try split(String(text.dropFirst().dropLast())).map(scalar))
            }
            if text.hasPrefix("{") {
                // Flow mappings appear only in examples, which say nothing of validity.
                return .string(text)
            }
            if text.hasPrefix("\""), text.hasSuffix("\""), text.count >= 2 {
                return .string(String(text.dropFirst().dropLast()).replacingOccurrences(of: "\\\"", with: "\"")
                    .replacingOccurrences(of: "\\\\", with: "\\"))
            }
            if text.hasPrefix("'"), text.hasSuffix("'"), text.count >= 2 {
                return .string(String(text.dropFirst().dropLast()).replacingOccurrences(of: "''", with: "'"))
            }
            switch text {
            case "null", "~": return .null
            case "true": return .bool(true)
            case "false": return .bool(false)
            default: break
            }
            if text.range(of: "^-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][-+]?[0-9]+)?$", options: .regularExpression) != nil, let number = Double(text) {
                return .number(number)
            }
            return .string(text)
        }

        /// The items of a flow sequence: split at commas outside quotes.
        static func split(_ text: String) throws -> [String] {
            var items: [String] = [], current = "", quote: Character?
            for character in text {
                if let open = quote {
                    if character == open { quote = nil }
                } else if character == "\"" || character == "'" {
                    quote = character
                } else if character == "[" || character == "{" {
                    throw Unsupported(description: "a nested flow collection: [\(text)]")
                } else if character == "," {
                    items.append(current.trimmingCharacters(in: .whitespaces))
                    current = ""
                    continue
                }
                current.append(character)
            }
            let last = current.trimmingCharacters(in: .whitespaces)
            if !last.isEmpty || !items.isEmpty { items.append(last) }
            return items.filter { !$0.isEmpty }
        }
    }
}
