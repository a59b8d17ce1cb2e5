import Foundation
import Testing

/// Locates test data without bundling resources: the official vectors beside this file, and
/// the project's own spec vectors under `spec/vectors/`.
enum Fixtures {
    static let testsFolder = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    static let specVectors = testsFolder.deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("spec/vectors")

    static func json(_ url: URL) throws -> Any {
        try JSONSerialization.jsonObject(with: Data(contentsOf: url))
    }

    /// The `tests` array of an official PASETO/PASERK vector file.
    static func officialTests(_ file: String) throws -> [[String: Any]] {
        let url = testsFolder.appendingPathComponent("Fixtures/paseto/\(file)")
        return try #require((json(url) as? [String: Any])?["tests"] as? [[String: Any]])
    }
}

func hex(_ text: String) -> [UInt8] {
    var bytes: [UInt8] = []
    var iterator = text.utf8.makeIterator()
    while let high = iterator.next(), let low = iterator.next() {
        bytes.append(UInt8(String(decoding: [high, low], as: UTF8.self), radix: 16)!)
    }
    return bytes
}
