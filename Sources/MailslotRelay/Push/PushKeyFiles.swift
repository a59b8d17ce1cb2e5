import Foundation

// Reading the secret files the push providers are configured with (the VAPID key, the APNs .p8
// key, the FCM service account, the webhook secrets): refused when another user may read them,
// as ssh refuses a private key, and their PEM blocks picked apart, since swift-crypto reads exactly
// one block and `openssl ecparam -genkey` prints an `EC PARAMETERS` block before the key.
// Nothing read here is ever logged. docs/design/wakeups.md §6.

/// Why a push key file cannot be used. The descriptions name the file's setting and path, never its contents.
struct PushKeyFileError: Error, Equatable, CustomStringConvertible {
    /// What is wrong, for the operator.
    let description: String
}

/// Reads push key files and their PEM blocks.
enum PushKeyFiles {
    /// The file's text, refused when it is missing, not a regular file, larger than `maxBytes`, or
    /// readable by the group or others.
    static func read(_ path: String, setting: String, maxBytes: Int = 64 * 1024) throws(PushKeyFileError) -> String {
        let attributes: [FileAttributeKey: Any]
        do { attributes = try FileManager.default.attributesOfItem(atPath: path) } catch {
            throw PushKeyFileError(description: "\(setting): cannot read \(path)")
        }
        guard attributes[.type] as? FileAttributeType == .typeRegular else {
            throw PushKeyFileError(description: "\(setting): \(path) is not a regular file")
        }
        if let mode = attributes[.posixPermissions] as? NSNumber, mode.intValue & 0o077 != 0 {
            throw PushKeyFileError(description: "\(setting): \(path) may be read by other users (mode \(String(mode.intValue & 0o777, radix: 8))); chmod 600 it")
        }
        if let size = attributes[.size] as? NSNumber, size.intValue > maxBytes {
            throw PushKeyFileError(description: "\(setting): \(path) is larger than \(maxBytes) bytes")
        }
        guard let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8) else {
            throw PushKeyFileError(description: "\(setting): cannot read \(path) as UTF-8 text")
        }
        return text
    }

    /// One PEM block: its label (`PRIVATE KEY`, `EC PARAMETERS`, …) and its whole text, armour included.
    struct PEMBlock: Equatable {
        let label: String
        let text: String
    }

    /// The PEM blocks of `text`, in order; text between blocks is ignored (as OpenSSL does), an
    /// unterminated block is refused.
    static func pemBlocks(_ text: String) throws(PushKeyFileError) -> [PEMBlock] {
        var blocks: [PEMBlock] = []
        var current: (label: String, lines: [String])?
        for rawLine in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline) {
            let line = rawLine.trimmingCharacters(in: .whitespaces)
            if current == nil {
                if line.hasPrefix("-----BEGIN "), line.hasSuffix("-----") {
                    current = (String(line.dropFirst(11).dropLast(5)), [line])
                }
            } else if line.hasPrefix("-----END ") {
                guard line == "-----END \(current!.label)-----" else {
                    throw PushKeyFileError(description: "a PEM block's END line does not match its BEGIN")
                }
                blocks.append(PEMBlock(label: current!.label, text: (current!.lines + [line]).joined(separator: "\n")))
                current = nil
            } else if !line.isEmpty {
                current!.lines.append(line)
            }
        }
        guard current == nil else { throw PushKeyFileError(description: "a PEM block has no END line") }
        return blocks
    }

    /// The one private-key block of a PEM file (`PRIVATE KEY` or `EC PRIVATE KEY`), skipping an
    /// `EC PARAMETERS` block; any other block, or two keys, is refused.
    static func privateKeyBlock(_ text: String, setting: String) throws(PushKeyFileError) -> PEMBlock {
        let blocks: [PEMBlock]
        do { blocks = try pemBlocks(text) } catch {
            throw PushKeyFileError(description: "\(setting): \(error.description)")
        }
        var key: PEMBlock?
        for block in blocks {
            switch block.label {
            case "EC PARAMETERS": continue
            case "PRIVATE KEY", "EC PRIVATE KEY":
                guard key == nil else { throw PushKeyFileError(description: "\(setting): the file holds more than one private key") }
                key = block
            default:
                throw PushKeyFileError(description: "\(setting): unexpected PEM block \"\(block.label)\"")
            }
        }
        guard let key else { throw PushKeyFileError(description: "\(setting): no PRIVATE KEY block") }
        return key
    }
}
