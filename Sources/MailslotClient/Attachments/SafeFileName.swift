import Foundation

/// The name a received file is saved under: the sender's name made harmless (docs/design/attachments.md
/// §6.4). The sender chose it, so it is never trusted as a path: only its last component is
/// kept, without `/`, `\`, NUL or control characters and without a leading dot (no hidden file,
/// no `..`), at most 255 bytes; what is left empty becomes `file-<blob prefix>` with an extension
/// from the media type.
enum SafeFileName {
    /// The most UTF-8 bytes of a saved name (most file systems' limit), suffix included.
    static let maxBytes = 255

    /// The sanitised name for `name` (the sender's, maybe nil) of a file of `mediaType`;
    /// `fallback` is the stem used when nothing usable is left.
    static func make(_ name: String?, mediaType: String, fallback: String) -> String {
        var text = name ?? ""
        // The last component by either separator: `../../x`, `C:\x` and `a/b/` all leave a plain name.
        if let cut = text.lastIndex(where: { $0 == "/" || $0 == "\\" }) { text = String(text[text.index(after: cut)...]) }
        text = String(text.unicodeScalars.filter { scalar in
            !(scalar.value < 0x20 || scalar.value == 0x7F || (0x80...0x9F).contains(scalar.value)
              || scalar.properties.generalCategory == .format || scalar.properties.generalCategory == .lineSeparator
              || scalar.properties.generalCategory == .paragraphSeparator)
        }.map(Character.init))
        text = text.trimmingCharacters(in: .whitespaces)
        while text.hasPrefix(".") { text.removeFirst() }
        text = truncated(text, to: maxBytes - 16)  // room for " (NNN)" before the extension
        if text.isEmpty { text = fallback + (extensions[mediaType.lowercased()].map { "." + $0 } ?? "") }
        return text
    }

    /// Candidate `attempt` for a name: the name itself, then `stem (1).ext`, `stem (2).ext`, …
    static func candidate(_ name: String, attempt: Int) -> String {
        guard attempt > 0 else { return name }
        let ext = (name as NSString).pathExtension
        let stem = ext.isEmpty ? name : String(name.dropLast(ext.count + 1))
        return "\(stem) (\(attempt))" + (ext.isEmpty ? "" : ".\(ext)")
    }

    /// `text` cut to at most `limit` UTF-8 bytes on a character boundary.
    private static func truncated(_ text: String, to limit: Int) -> String {
        guard text.utf8.count > limit else { return text }
        var result = ""
        for character in text {
            guard result.utf8.count + character.utf8.count <= limit else { break }
            result.append(character)
        }
        return result
    }

    /// Extensions for a file without a usable name, by media type: a small table of common ones.
    static let extensions: [String: String] = [
        "image/jpeg": "jpg", "image/png": "png", "image/gif": "gif", "image/webp": "webp", "image/heic": "heic",
        "video/mp4": "mp4", "video/quicktime": "mov", "video/webm": "webm", "audio/mpeg": "mp3", "audio/ogg": "ogg",
        "audio/mp4": "m4a", "audio/aac": "aac", "application/pdf": "pdf", "application/zip": "zip", "text/plain": "txt",
        "application/octet-stream": "bin",
    ]
}
