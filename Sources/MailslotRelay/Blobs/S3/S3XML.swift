/// The little XML the relay reads from S3: the root element's name, the text of the first
/// element with a given name (`UploadId`, `Code`, `Message`), and the repeated entries of a list
/// (`Upload`). S3's answers are flat and small, so a
/// scanner does; FoundationXML would bring libxml2 into the static build for four strings. It
/// understands the XML declaration, comments, attributes on start tags and the five predefined
/// entities plus character references; anything else it does not need to.
enum S3XML {
    /// The name of the document's root element (`Error`, `InitiateMultipartUploadResult`, …), or
    /// nil when there is none.
    static func rootName(_ document: [UInt8]) -> String? {
        var index = 0
        while let open = document[index...].firstIndex(of: UInt8(ascii: "<")) {
            let next = open + 1
            guard next < document.count else { return nil }
            switch document[next] {
            case UInt8(ascii: "?"):  // declaration or processing instruction
                guard let end = find(Array("?>".utf8), in: document, from: next) else { return nil }
                index = end + 2
            case UInt8(ascii: "!"):  // comment or doctype
                if let end = find(Array("-->".utf8), in: document, from: next), starts(Array("!--".utf8), document, at: next) {
                    index = end + 3
                } else if let end = document[next...].firstIndex(of: UInt8(ascii: ">")) {
                    index = end + 1
                } else {
                    return nil
                }
            default:
                let nameEnd = document[next...].firstIndex(where: { isNameEnd($0) }) ?? document.count
                return nameEnd > next ? String(decoding: document[next..<nameEnd], as: UTF8.self) : nil
            }
        }
        return nil
    }

    /// The decoded text of the first `<name>…</name>` (attributes allowed on the start tag), or nil
    /// when there is none. An empty element (`<name/>` or `<name></name>`) gives "".
    static func text(of name: String, in document: [UInt8]) -> String? {
        let document = withoutComments(document)
        let open = Array("<\(name)".utf8)
        var index = 0
        while let start = find(open, in: document, from: index) {
            let after = start + open.count
            guard after < document.count else { return nil }
            guard isNameEnd(document[after]) else { index = after; continue }  // <UploadIdX> is another element
            guard let tagEnd = document[after...].firstIndex(of: UInt8(ascii: ">")) else { return nil }
            if document[tagEnd - 1] == UInt8(ascii: "/") { return "" }
            let close = Array("</\(name)>".utf8)
            guard let end = find(close, in: document, from: tagEnd + 1) else { return nil }
            return decodeEntities(document[(tagEnd + 1)..<end])
        }
        return nil
    }

    /// The contents of every `<name>…</name>` in the document, in order (attributes allowed on
    /// the start tag; an empty element gives an empty array element): the repeated entries of a
    /// list (`<Upload>` in ListMultipartUploadsResult). Elements of that name do not nest in S3's
    /// answers, so each ends at the first `</name>` after it.
    static func elements(named name: String, in document: [UInt8]) -> [[UInt8]] {
        let document = withoutComments(document)
        let open = Array("<\(name)".utf8), close = Array("</\(name)>".utf8)
        var elements: [[UInt8]] = []
        var index = 0
        while let start = find(open, in: document, from: index) {
            let after = start + open.count
            guard after < document.count else { break }
            guard isNameEnd(document[after]) else { index = after; continue }
            guard let tagEnd = document[after...].firstIndex(of: UInt8(ascii: ">")) else { break }
            if document[tagEnd - 1] == UInt8(ascii: "/") {
                elements.append([])
                index = tagEnd + 1
                continue
            }
            guard let end = find(close, in: document, from: tagEnd + 1) else { break }
            elements.append(Array(document[(tagEnd + 1)..<end]))
            index = end + close.count
        }
        return elements
    }

    /// `text` with `&`, `<`, `>`, `"` and `'` written as entities: for values put into XML.
    static func escape(_ text: String) -> String {
        var output = ""
        for character in text {
            switch character {
            case "&": output += "&amp;"
            case "<": output += "&lt;"
            case ">": output += "&gt;"
            case "\"": output += "&quot;"
            case "'": output += "&apos;"
            default: output.append(character)
            }
        }
        return output
    }

    /// The document with its `<!-- … -->` comments cut out (an unclosed one: to the end).
    private static func withoutComments(_ document: [UInt8]) -> [UInt8] {
        let open = Array("<!--".utf8), close = Array("-->".utf8)
        guard var start = find(open, in: document, from: 0) else { return document }
        var output = Array(document[..<start])
        while true {
            guard let end = find(close, in: document, from: start + open.count) else { return output }
            let resume = end + close.count
            guard let next = find(open, in: document, from: resume) else {
                output += document[resume...]
                return output
            }
            output += document[resume..<next]
            start = next
        }
    }

    private static func isNameEnd(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: ">") || byte == UInt8(ascii: "/") || byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t")
            || byte == UInt8(ascii: "\n") || byte == UInt8(ascii: "\r")
    }

    private static func starts(_ needle: [UInt8], _ haystack: [UInt8], at index: Int) -> Bool {
        index + needle.count <= haystack.count && haystack[index..<(index + needle.count)].elementsEqual(needle)
    }

    private static func find(_ needle: [UInt8], in haystack: [UInt8], from start: Int) -> Int? {
        guard !needle.isEmpty, start >= 0, haystack.count >= needle.count else { return nil }
        var index = start
        while index + needle.count <= haystack.count {
            if haystack[index] == needle[0] && starts(needle, haystack, at: index) { return index }
            index += 1
        }
        return nil
    }

    /// Character data with its entity and character references replaced; an unknown entity is
    /// kept as written.
    private static func decodeEntities(_ bytes: ArraySlice<UInt8>) -> String {
        let text = String(decoding: bytes, as: UTF8.self)
        guard text.contains("&") else { return text }
        var output = ""
        var rest = Substring(text)
        while let amp = rest.firstIndex(of: "&") {
            output += rest[..<amp]
            guard let semicolon = rest[amp...].firstIndex(of: ";"), rest.distance(from: amp, to: semicolon) <= 10 else {
                output += rest[amp...]
                return output
            }
            let entity = rest[rest.index(after: amp)..<semicolon]
            switch entity {
            case "amp": output += "&"
            case "lt": output += "<"
            case "gt": output += ">"
            case "quot": output += "\""
            case "apos": output += "'"
            default:
                var scalar: Unicode.Scalar?
                if entity.hasPrefix("#x") || entity.hasPrefix("#X") {
                    scalar = UInt32(entity.dropFirst(2), radix: 16).flatMap(Unicode.Scalar.init)
                } else if entity.hasPrefix("#") {
                    scalar = UInt32(entity.dropFirst(), radix: 10).flatMap(Unicode.Scalar.init)
                }
                if let scalar { output.unicodeScalars.append(scalar) } else { output += rest[amp...semicolon] }
            }
            rest = rest[rest.index(after: semicolon)...]
        }
        output += rest
        return output
    }
}
