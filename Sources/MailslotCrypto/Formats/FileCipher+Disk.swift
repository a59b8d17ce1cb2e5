import CSodium
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Encrypting from a file and opening to a file (spec/attachments.md §2 "Writing to disk"): what
// apps call. Memory stays at about one chunk whatever the file's size. An opened file appears
// under its name only once every check passed: it is written to a temporary file beside it,
// synced, and linked into place after the final tag and the padding check, so an app never sees
// a partial or forged file, and an existing file is never replaced.

extension FileCipher {
    /// Encrypts the file at `source` into `destination` (created or truncated, mode 0600, synced
    /// before this returns) under `key`, a fresh random key unless the caller has one.
    ///
    /// The file must not change while it is read: one that grows or shrinks is refused with
    /// ``FileError/sourceChanged``. On any failure `destination` is removed. Returns what the
    /// reference carries: key, digest, ciphertext size and plain size. `progress` is called as
    /// the file is read (stage ``FileProgress/Stage/encrypting``, at most once per 64 KiB).
    public static func encryptFile(at source: URL, to destination: URL, key: FileKey = FileKey(),
                                   progress: ((FileProgress) -> Void)? = nil) throws(FileError) -> SealedFile {
        let input = try FileDescriptor(opening: source, flags: O_RDONLY)
        let plainSize = try input.regularFileSize()
        let output = try FileDescriptor(opening: destination, flags: O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, mode: 0o600)
        var written = false
        defer { if !written { unlink(destination.path) } }
        var reader = FileDescriptorSource(input, progress: progress.map { report in { report(FileProgress(stage: .encrypting, done: $0, total: plainSize)) } })
        var writer = FileDescriptorSink(output)
        let file = try encrypt(from: &reader, plainSize: plainSize, key: key, to: &writer)
        try output.sync()
        written = true
        return file
    }

    /// Opens the ciphertext at `ciphertext` (§2, every step in order: the digest is checked in a
    /// first pass, before anything is decrypted) and writes the file to `destination`.
    ///
    /// The plaintext goes to a temporary file in `destination`'s folder (mode 0600), which is
    /// synced and linked to `destination` only after the last check; on any failure it is
    /// removed and `destination` does not exist. An existing `destination` is never replaced
    /// (``FileError/destinationExists``, checked first and again atomically at the end).
    ///
    /// `progress` is called as the ciphertext is read, in each pass (stages
    /// ``FileProgress/Stage/verifying`` then ``FileProgress/Stage/decrypting``, totals the
    /// ciphertext's size). The ciphertext file must not change between the passes (it is the
    /// caller's own download); were it replaced, its chunks would still have to open with the key.
    public static func decryptFile(at ciphertext: URL, _ file: SealedFile, to destination: URL,
                                   progress: ((FileProgress) -> Void)? = nil) throws(FileError) {
        let input = try openCiphertext(at: ciphertext, file, to: destination)             // steps 1–2
        var reader = FileDescriptorSource(input, progress: progress.map { report in { report(FileProgress(stage: .verifying, done: $0, total: file.size)) } })
        try verify(&reader, file)                                                       // steps 1–3
        try input.rewind()
        try decryptVerified(input, file, to: destination, progress: progress)
    }

    /// Opens the ciphertext at `ciphertext` whose BLAKE2b-256 the caller computed, `digest`, as
    /// it wrote every byte of the file itself (a download hashed as it arrives, so that checking
    /// it needs no pass of its own), and writes the file to `destination` as
    /// ``decryptFile(at:_:to:progress:)`` does.
    ///
    /// Steps 1–2 use the lengths (of the file as it is now); step 3 compares `digest` with the
    /// reference's, in constant time, before anything is decrypted. The caller vouches that
    /// `digest` is of the bytes in the file: it must be the file's only writer. Were the file
    /// changed after it was hashed, its chunks would still have to open with the key and their
    /// tags, as in the two-pass opening. `progress` reports the decryption only.
    package static func decryptFile(at ciphertext: URL, _ file: SealedFile, digested digest: [UInt8], to destination: URL,
                                    progress: ((FileProgress) -> Void)? = nil) throws(FileError) {
        let input = try openCiphertext(at: ciphertext, file, to: destination)             // steps 1–2
        guard constantTimeEquals(digest, file.digest.bytes) else { throw .digestMismatch }  // step 3
        try decryptVerified(input, file, to: destination, progress: progress)
    }

    /// Steps 1–2 of both openings: the reference's sizes agree, nothing is at `destination`, and
    /// the ciphertext file at `ciphertext` is exactly the reference's size. Returns it, open.
    private static func openCiphertext(at ciphertext: URL, _ file: SealedFile, to destination: URL) throws(FileError) -> FileDescriptor {
        guard size(plainSize: file.plainSize) == file.size else { throw .badLength }  // before any I/O
        guard !exists(destination) else { throw .destinationExists }
        let input = try FileDescriptor(opening: ciphertext, flags: O_RDONLY)
        let length = try input.regularFileSize()
        guard length >= file.size else { throw .truncated }
        guard length == file.size else { throw .badLength }
        return input
    }

    /// Steps 4–5 and the writing of §2.2, from `input` at its start, once steps 1–3 passed.
    private static func decryptVerified(_ input: FileDescriptor, _ file: SealedFile, to destination: URL,
                                        progress: ((FileProgress) -> Void)?) throws(FileError) {
        let (temporary, temporaryPath) = try FileDescriptor.temporary(beside: destination)
        defer { unlink(temporaryPath) }  // after the link, only the temporary name goes
        var reader = FileDescriptorSource(input, progress: progress.map { report in { report(FileProgress(stage: .decrypting, done: $0, total: file.size)) } })
        var writer = FileDescriptorSink(temporary)
        try decrypt(&reader, file, to: &writer)                                         // steps 4–5
        try temporary.sync()
        guard link(temporaryPath, destination.path) == 0 else {
            let error = errno
            if error == EEXIST { throw .destinationExists }
            throw .io("cannot link the opened file to \(destination.path)", errno: error)
        }
        syncFolder(of: destination)
    }

    /// Whether something (a file, a folder, a dangling link) has this name.
    private static func exists(_ url: URL) -> Bool {
        var status = stat()
        return lstat(url.path, &status) == 0
    }

    /// Makes a new name in the folder durable (best effort: not every file system syncs folders).
    private static func syncFolder(of url: URL) {
        let folder = systemOpen(url.deletingLastPathComponent().path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard folder >= 0 else { return }
        _ = fsync(folder)
        close(folder)
    }
}

/// An open file descriptor, closed with its owner.
package final class FileDescriptor {
    let fd: Int32
    let path: String

    /// Opens `url` with `open(2)` flags (close-on-exec added) and `mode` for a created file.
    package init(opening url: URL, flags: Int32, mode: mode_t = 0) throws(FileError) {
        guard url.isFileURL else { throw .io("not a file URL: \(url)", errno: EINVAL) }
        path = url.path
        var opened: Int32
        repeat { opened = systemOpen(path, flags | O_CLOEXEC, mode) } while opened < 0 && errno == EINTR
        fd = opened
        guard fd >= 0 else { throw .io("cannot open \(path)", errno: errno) }
    }

    private init(fd: Int32, path: String) {
        self.fd = fd
        self.path = path
    }

    deinit { close(fd) }

    /// A new empty file `.<name>.mailslot-XXXXXX` beside `destination`, mode 0600, and its path.
    static func temporary(beside destination: URL) throws(FileError) -> (FileDescriptor, String) {
        let folder = destination.deletingLastPathComponent().path
        var template = Array("\(folder)/.\(destination.lastPathComponent).mailslot-XXXXXX".utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard fd >= 0 else { throw .io("cannot create a temporary file in \(folder)", errno: errno) }
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        let path = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        return (FileDescriptor(fd: fd, path: path), path)
    }

    /// The size of a regular file; anything else (a folder, a pipe, a device) is refused.
    package func regularFileSize() throws(FileError) -> Int64 {
        var status = stat()
        guard fstat(fd, &status) == 0 else { throw .io("cannot stat \(path)", errno: errno) }
        guard status.st_mode & S_IFMT == S_IFREG else { throw .io("not a regular file: \(path)", errno: EINVAL) }
        return Int64(status.st_size)
    }

    func rewind() throws(FileError) {
        guard lseek(fd, 0, SEEK_SET) == 0 else { throw .io("cannot seek in \(path)", errno: errno) }
    }

    /// `fsync(2)`.
    package func sync() throws(FileError) {
        guard fsync(fd) == 0 else { throw .io("cannot sync \(path)", errno: errno) }
    }
}

/// How far ``FileCipher/encryptFile(at:to:key:progress:)`` or
/// ``FileCipher/decryptFile(at:_:to:progress:)`` is: `done` of `total` bytes in the current stage.
public struct FileProgress: Sendable, Equatable {
    /// What is being done.
    public enum Stage: Sendable, Equatable {
        /// Reading the file and writing its ciphertext; totals are the file's size.
        case encrypting
        /// The first pass over a ciphertext: its length and digest (§2 checks 1–3).
        case verifying
        /// The second pass: decrypting into the temporary file.
        case decrypting
    }
    /// The stage.
    public let stage: Stage
    /// Bytes read so far in this stage.
    public let done: Int64
    /// Bytes this stage reads in all.
    public let total: Int64
}

/// Reads a file descriptor from where it stands, reporting the bytes read so far.
package struct FileDescriptorSource: FileChunkSource {
    let file: FileDescriptor
    let progress: ((Int64) -> Void)?
    private var done: Int64 = 0

    package init(_ file: FileDescriptor, progress: ((Int64) -> Void)? = nil) {
        self.file = file
        self.progress = progress
    }

    package mutating func read(into buffer: UnsafeMutableRawBufferPointer) throws(FileError) -> Int {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return 0 }
        while true {
            let got = systemRead(file.fd, base, buffer.count)
            if got > 0, let progress {
                done += Int64(got)
                progress(done)
            }
            if got >= 0 { return got }
            if errno != EINTR { throw .io("cannot read \(file.path)", errno: errno) }
        }
    }
}

/// Appends to a file descriptor.
package struct FileDescriptorSink: FileChunkSink {
    let file: FileDescriptor

    package init(_ file: FileDescriptor) { self.file = file }

    package mutating func write(_ bytes: UnsafeRawBufferPointer) throws(FileError) {
        var offset = 0
        while offset < bytes.count {
            let done = systemWrite(file.fd, bytes.baseAddress! + offset, bytes.count - offset)
            if done < 0 {
                if errno == EINTR { continue }
                throw .io("cannot write \(file.path)", errno: errno)
            }
            offset += done
        }
    }
}

#if canImport(Glibc)
private let systemRead = Glibc.read, systemWrite = Glibc.write
private func systemOpen(_ path: String, _ flags: Int32, _ mode: mode_t = 0) -> Int32 { Glibc.open(path, flags, mode) }
#elseif canImport(Darwin)
private let systemRead = Darwin.read, systemWrite = Darwin.write
private func systemOpen(_ path: String, _ flags: Int32, _ mode: mode_t = 0) -> Int32 { Darwin.open(path, flags, mode) }
#endif
