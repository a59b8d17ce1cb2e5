import Foundation
import MailslotWire
import NIOCore

/// The bytes a transfer run moves, made before the clock starts.
///
/// Relay mode: one buffer of random bytes the size of a file's ciphertext, shared by every file
/// (the relay checks part digests, not the file format), with each part's digest computed once;
/// downloads are compared with it as they stream in. E2e mode: one random source file per file in
/// a temporary folder; each upload seals its source to a spool file and sends each part read back
/// from it as soon as it is sealed (the client library's pipeline), each download writes the ciphertext to a file and opens it into a new one.
final class TransferWorkload: Sendable {
    private let mode: Mode
    private let cipherSize: Int64
    private let folder: URL
    private let teardown: UUID
    /// Relay mode: the ciphertext, and each part's digest by its offset.
    private let ciphertext: ByteBuffer?
    private let digests: [Int64: [UInt8]]
    /// E2e mode: what each file was sealed as (key, digest, sizes), by file number.
    private let sealed = Locked<[Int: SealedFile]>([:])

    init(mode: Mode, files: Int, size: Int64, cipherSize: Int64, partSize: Int64) throws {
        self.mode = mode
        self.cipherSize = cipherSize
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("mailslot-bench-transfer-\(UUID().uuidString.prefix(8))")
        self.folder = folder
        teardown = Teardown.add { try? FileManager.default.removeItem(at: folder) }
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        switch mode {
        case .relay:
            var buffer = ByteBufferAllocator().buffer(capacity: Int(cipherSize))
            var left = Int(cipherSize)
            while left > 0 {
                let block = min(left, 1 << 20)
                buffer.writeBytes(randomBytes(block))
                left -= block
            }
            var digests: [Int64: [UInt8]] = [:]
            if let layout = BlobLayout(size: cipherSize, partSize: partSize) {
                for number in 1...layout.parts {
                    let range = layout.range(ofPart: number)!
                    digests[range.lowerBound] = Self.digest(buffer.getSlice(at: Int(range.lowerBound), length: range.count)!)
                }
            }
            ciphertext = buffer
            self.digests = digests
        case .e2e:
            ciphertext = nil
            digests = [:]
            for file in 0..<files {
                guard FileManager.default.createFile(atPath: source(file).path, contents: nil, attributes: [.posixPermissions: 0o600]),
                      let handle = FileHandle(forWritingAtPath: source(file).path) else {
                    throw BenchFailure.failed("cannot write \(source(file).path)")
                }
                var left = size
                while left > 0 {
                    let block = Int(min(left, 1 << 20))
                    try handle.write(contentsOf: randomBytes(block))
                    left -= Int64(block)
                }
                try handle.close()
            }
        }
    }

    /// Deletes the folder and everything in it.
    func remove() {
        try? FileManager.default.removeItem(at: folder)
        Teardown.remove(teardown)
    }

    private func source(_ file: Int) -> URL { folder.appendingPathComponent("source-\(file)") }
    private func spool(_ file: Int) -> URL { folder.appendingPathComponent("spool-\(file)") }
    private func downloaded(_ file: Int) -> URL { folder.appendingPathComponent("download-\(file)") }
    private func output(_ file: Int) -> URL { folder.appendingPathComponent("output-\(file)") }

    /// The ciphertext size of every file.
    var uploadSize: Int64 { cipherSize }

    /// E2e mode: starts sealing file `file`'s source into its spool, as the client library's file
    /// send does (a pipeline: `parts` yields each part's number and digest once it is in the
    /// spool, while the rest is sealed; `sealed` ends with what the file was sealed as, which
    /// the download checks against). Nil in relay mode (the ciphertext is ready).
    func startSealing(_ file: Int, partSize: Int64) -> (parts: AsyncStream<(number: Int, digest: [UInt8])>, sealed: Task<Void, any Error>)? {
        guard mode == .e2e else { return nil }
        let (parts, continuation) = AsyncStream.makeStream(of: (number: Int, digest: [UInt8]).self)
        let source = source(file), spool = spool(file), sealed = sealed
        let task = Task.detached {
            defer { continuation.finish() }
            do throws(FileError) {
                let plainSize = try FileDescriptor(opening: source, flags: O_RDONLY).regularFileSize()
                guard let encryptor = FileEncryptor(key: FileKey(), plainSize: plainSize) else { throw FileError.badLength }
                let result = try FileCipher.encryptFile(at: source, to: spool, with: encryptor, partSize: partSize) {
                    continuation.yield((number: $0, digest: $1))
                }
                sealed.withLock { $0[file] = result }
            } catch {
                throw BenchFailure.failed("encrypting file \(file): \(error.code)")
            }
        }
        return (parts, task)
    }

    /// The bytes of `range` of file `file`'s ciphertext and their BLAKE2b-256 digest.
    func part(_ file: Int, _ range: Range<Int64>) throws -> (ByteBuffer, [UInt8]) {
        if let ciphertext {
            let slice = ciphertext.getSlice(at: Int(range.lowerBound), length: range.count)!
            return (slice, digests[range.lowerBound] ?? Self.digest(slice))
        }
        let buffer = try spoolBytes(file, range)
        return (buffer, Self.digest(buffer))
    }

    /// E2e mode: the bytes of `range` of file `file`'s spool, read back as the client library
    /// does (their digest came with the part from ``startSealing(_:partSize:)``).
    func spoolBytes(_ file: Int, _ range: Range<Int64>) throws -> ByteBuffer {
        guard let handle = FileHandle(forReadingAtPath: spool(file).path) else { throw BenchFailure.failed("cannot read \(spool(file).path)") }
        defer { try? handle.close() }
        try handle.seek(toOffset: UInt64(range.lowerBound))
        guard let data = try handle.read(upToCount: range.count), data.count == range.count else {
            throw BenchFailure.failed("the spool of file \(file) is short")
        }
        return ByteBuffer(data: data)
    }

    /// Where a download of file `file` goes.
    func downloadSink(_ file: Int) throws -> DownloadSink {
        if let ciphertext { return DownloadSink(expected: ciphertext) }
        try? FileManager.default.removeItem(at: downloaded(file))
        guard FileManager.default.createFile(atPath: downloaded(file).path, contents: nil, attributes: [.posixPermissions: 0o600]),
              let handle = FileHandle(forWritingAtPath: downloaded(file).path) else {
            throw BenchFailure.failed("cannot write \(downloaded(file).path)")
        }
        return DownloadSink(file: handle)
    }

    /// Checks a finished download: relay mode, every byte as sent; e2e, opened into a new file
    /// (digest, every tag, padding), which ``outputMatches(_:)`` compares after the clock.
    func finishDownload(_ file: Int, sink: DownloadSink, received: Int64) throws {
        try sink.close()
        guard received == (sealed.withLock { $0[file]?.size } ?? cipherSize) else {
            throw BenchFailure.failed("the download of file \(file) has \(received) bytes")
        }
        if mode == .relay {
            guard !sink.mismatched else { throw BenchFailure.failed("the download of file \(file) differs from what was uploaded") }
            return
        }
        guard let sealed = sealed.withLock({ $0[file] }) else { throw BenchFailure.failed("file \(file) was never sealed") }
        try? FileManager.default.removeItem(at: output(file))
        // As the client library opens a download: the digest computed as the bytes came, then one pass.
        do { try FileCipher.decryptFile(at: downloaded(file), sealed, digested: sink.digest ?? [], to: output(file)) } catch {
            throw BenchFailure.failed("opening file \(file): \(error.code)")
        }
    }

    /// E2e mode: whether file `file` came back as its source, byte for byte.
    func outputMatches(_ file: Int) -> Bool {
        guard let a = FileHandle(forReadingAtPath: source(file).path), let b = FileHandle(forReadingAtPath: output(file).path) else { return false }
        defer { try? a.close(); try? b.close() }
        while true {
            let x = (try? a.read(upToCount: 1 << 20)) ?? nil, y = (try? b.read(upToCount: 1 << 20)) ?? nil
            if x != y { return false }
            if x == nil || x!.isEmpty { return true }
        }
    }

    private static func digest(_ buffer: ByteBuffer) -> [UInt8] {
        let hasher = BLAKE2bHasher()
        buffer.withUnsafeReadableBytes { hasher.update($0) }
        return hasher.finalize()
    }
}

/// Where one download's bytes go as they arrive: compared with the expected ciphertext (relay
/// mode) or appended to a file (e2e). Used by one task at a time.
final class DownloadSink {
    private let expected: ByteBuffer?
    private let file: FileHandle?
    private var offset = 0
    private(set) var mismatched = false
    /// E2e mode: the ciphertext's BLAKE2b-256, computed as it is written (as the client library does).
    private let hasher = BLAKE2bHasher()
    /// The digest of what was written, once ``close()`` ran (e2e mode only).
    private(set) var digest: [UInt8]?

    init(expected: ByteBuffer) {
        self.expected = expected
        file = nil
    }

    init(file: FileHandle) {
        expected = nil
        self.file = file
    }

    func consume(_ buffer: ByteBuffer) throws {
        if let expected {
            let length = buffer.readableBytes
            if offset + length > expected.readableBytes {
                mismatched = true
            } else if !mismatched, length > 0 {
                let same = buffer.withUnsafeReadableBytes { got in
                    expected.withUnsafeReadableBytes { want in
                        memcmp(got.baseAddress!, want.baseAddress! + offset, length) == 0
                    }
                }
                if !same { mismatched = true }
            }
            offset += length
        } else if let file {
            try buffer.withUnsafeReadableBytes { bytes in
                try file.write(contentsOf: bytes)
                hasher.update(bytes)
            }
        }
    }

    /// Closes the file (not synced: it is opened at once and removed, as the client library's
    /// download spool) and finishes its digest.
    func close() throws {
        guard let file else { return }
        try file.close()
        digest = hasher.finalize()
    }
}
