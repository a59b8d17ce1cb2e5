import Foundation
import MailslotWire

/// An issuer secret key kept in a file as one `k4.secret.…` line, readable by its owner only.
enum IssuerKeyFile {
    /// Reads and checks the key in `path`, with a distinct failure for each way it can go wrong.
    static func read(_ path: String) throws(CLIFailure) -> IdentityKeyPair {
        guard FileManager.default.fileExists(atPath: path) else {
            throw .noInput("the issuer secret key file '\(path)' does not exist (create one with `mailslot-relay keygen --secret-key-file FILE`)")
        }
        var contents: Data
        do {
            contents = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw .noPermission("the issuer secret key file '\(path)' cannot be read (check its owner and permissions)")
        }
        defer { contents.resetBytes(in: 0..<contents.count) }
        guard contents.count < 1024 else {
            throw .dataError("'\(path)' is not an issuer secret key: expected one line `k4.secret.…`")
        }
        let text = String(decoding: contents, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        do {
            return try IdentityKeyPair(paserk: text)
        } catch {
            // Never echo the file's contents: it may hold a secret of another kind.
            switch error {
            case .wrongType: throw .dataError("'\(path)' is not an issuer secret key: expected one line `k4.secret.…` (PASERK)")
            case .malformedKey: throw .dataError("'\(path)' holds a k4.secret key that is not 64 bytes of base64url")
            case .inconsistentSecretKey: throw .dataError("'\(path)' holds a k4.secret key whose public half does not match its seed")
            }
        }
    }

    /// Creates `path` with the key's PASERK, mode 0600, refusing to overwrite an existing file.
    static func create(_ path: String, key: IdentityKeyPair) throws(CLIFailure) {
        try createSecretFile(path, text: key.paserk + "\n")
    }

    /// Creates `path` holding `text`, mode 0600 from the start (`O_CREAT | O_EXCL`: never over an
    /// existing file, never readable by others for an instant), and syncs it.
    static func createSecretFile(_ path: String, text: String) throws(CLIFailure) {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            let reason = errno == EEXIST ? "it already exists; remove it first or choose another path" : String(cString: strerror(errno))
            throw .cannotCreate("cannot create '\(path)': \(reason)")
        }
        defer { close(descriptor) }
        var line = Array(text.utf8)
        defer { wipe(&line) }
        let written = line.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        guard written == line.count, fsync(descriptor) == 0 else {
            throw .cannotCreate("cannot write '\(path)': \(String(cString: strerror(errno)))")
        }
    }
}
