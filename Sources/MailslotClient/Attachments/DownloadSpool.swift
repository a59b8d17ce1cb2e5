import Foundation
import MailslotWire
import Synchronization

/// A blob's ciphertext as a download appends it to its hidden `.part` file, hashed (BLAKE2b-256,
/// spec/attachments.md §1.3) as it is written, so that checking its digest needs no pass over the
/// file of its own: the decryption is then the only read, from the page cache. Opening one on a
/// file left by an interrupted download hashes the bytes already there first, so a resumed
/// download is verified whole all the same.
///
/// Its calls block (file I/O, hashing): they run through ``FileWork``, one at a time (each is
/// awaited before the next); the lock only makes that visible to the compiler.
final class DownloadSpool: Sendable {
    private struct State {
        let handle: FileHandle
        var hasher: BLAKE2bHasher
        var length: Int64
    }

    private let state: Mutex<State>
    private let path: String

    /// How many bytes the file holds (where the download goes on).
    var length: Int64 { state.withLock { $0.length } }

    /// Opens (or creates, mode 0600) the spool at `url` of a ciphertext of `size` bytes, and hashes
    /// what it holds already; more than `size` bytes is not a prefix of this blob: emptied.
    init(at url: URL, size: Int64) throws {
        path = url.path
        if !FileManager.default.fileExists(atPath: url.path) {
            guard FileManager.default.createFile(atPath: url.path, contents: nil, attributes: [.posixPermissions: 0o600]) else {
                throw FileError.io("cannot create \(url.path)", errno: errno)
            }
        }
        let handle = try FileHandle(forUpdating: url)
        var length = Int64(try handle.seekToEnd())
        let hasher = BLAKE2bHasher()
        if length > size {
            try handle.truncate(atOffset: 0)
            length = 0
        } else if length > 0 {
            try handle.seek(toOffset: 0)
            var read: Int64 = 0
            while read < length {
                guard let chunk = try handle.read(upToCount: Int(min(Int64(4 << 20), length - read))), !chunk.isEmpty else {
                    throw FileError.io("\(url.path) ended while it was read", errno: EIO)
                }
                chunk.withUnsafeBytes { hasher.update($0) }
                read += Int64(chunk.count)
            }
            try handle.seek(toOffset: UInt64(length))
        }
        state = Mutex(State(handle: handle, hasher: hasher, length: length))
    }

    /// Appends `bytes` (the next range of the ciphertext) and adds them to the digest.
    func append(_ bytes: Data) throws {
        try state.withLock { state in
            try state.handle.write(contentsOf: bytes)
            bytes.withUnsafeBytes { state.hasher.update($0) }
            state.length += Int64(bytes.count)
        }
    }

    /// The digest of every byte written, once the last is; the file is closed. Not synced: it is
    /// read once more at once (the decryption) and removed, and a crash leaves at worst a prefix
    /// that the next try hashes again and, were it damaged, fetches again (``FileDownloading``).
    func finish() throws -> [UInt8] {
        try state.withLock { state in
            try state.handle.close()
            return state.hasher.finalize()
        }
    }
}
