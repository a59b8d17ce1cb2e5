import Foundation
import MailslotWire
import NIOCore
#if canImport(Glibc)
import Glibc
#endif

/// Blobs as files under the data folder, the default storage: `<data>/blobs/<2 hex>/<32 hex>`,
/// the 32 hex characters being the random storage key (never the blob id), folders 0700 and
/// files 0600 (docs/design/attachments.md §3.1).
///
/// I/O is plain POSIX (`open`, `fallocate`, `pwritev`, `fdatasync`, `pread`, `unlink`) run on the
/// blob transfers' own thread pool (``BlobIOPool``, at a lower CPU priority), never on an event
/// loop or the cooperative pool, where ordinary messages run: NIOFileSystem runs on a pool too
/// but has neither `fallocate` nor `fdatasync`, the two calls that make the watermark see a
/// whole upload at create and a part durable before it is answered. A part's body is hashed
/// (BLAKE2b-256) and written on that pool as well (``PartStream``): the request's task only
/// collects buffers, half a MiB at a time, so relay memory per upload is about 1 MiB whatever
/// the part or file size.
final class FileBlobStorage: BlobStorage {
    /// `<data>/blobs`.
    let directory: String
    private let probe: DiskSpace.Probe
    private let pool: BlobIOPool

    /// The most bytes read in one go for a download (a part is written in ``PartStream``'s chunks).
    static let chunkBytes = 1024 * 1024

    /// Creates `directory` (0700) when it is missing. `probe` reads the free space of its disk;
    /// `pool` runs the blocking calls and the hashing.
    init(directory: String, probe: @escaping DiskSpace.Probe = DiskSpace.available, pool: BlobIOPool = .shared) throws {
        self.directory = directory
        self.probe = probe
        self.pool = pool
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
    }

    /// The file of storage key `key`, or nil for a key that is not 32 lowercase hex characters
    /// (keys come from the relay's own store; this keeps any other text out of the path).
    func path(of key: String) -> String? {
        guard key.utf8.count == 32, key.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }) else { return nil }
        return "\(directory)/\(key.prefix(2))/\(key)"
    }

    private func checkedPath(_ key: String) throws(BlobStorageFailure) -> String {
        guard let path = path(of: key) else { throw .failed("not a storage key") }
        return path
    }

    func begin(key: String, size: Int64) async throws(BlobStorageFailure) -> UploadHandle {
        let path = try checkedPath(key)
        let folder = (path as NSString).deletingLastPathComponent
        try await blocking {
            let descriptor = try Self.openForWriting(path, folder: folder)
            defer { close(descriptor) }
            // Real blocks now, so that the free-space watermark counts the whole upload from its
            // create and a part never finds the disk full. A file system without fallocate
            // (EOPNOTSUPP) gets a sparse file: glibc's posix_fallocate would write zeros instead.
            if size > 0, let error = Self.allocate(descriptor, size: size) {
                if error == ENOSPC || error == EDQUOT {
                    unlink(path)
                    throw BlobStorageFailure.full
                }
                if error != EOPNOTSUPP { throw BlobStorageFailure.failed("fallocate: errno \(error)") }
            }
            // The new file's name is durable with its folder.
            Self.syncFolder(folder)
        }
        return nil
    }

    func writePart<Body: AsyncSequence & Sendable>(key: String, upload: UploadHandle, number: Int, offset: Int64, length: Int64,
                                                   digest: [UInt8], body: Body) async throws(BlobStorageFailure) -> String?
        where Body.Element == ByteBuffer {
        let path = try checkedPath(key)
        let folder = (path as NSString).deletingLastPathComponent
        // Created if missing: a create retried after a crash between its row and `begin` finds
        // the row (200) but no file.
        let descriptor = FileDescriptorBox(try await blocking { try Self.openForWriting(path, folder: folder) })
        defer { descriptor.close() }
        let hashed = try await PartStream(pool: pool).write(body, length: length, to: descriptor.value, at: offset)
        // Unrecorded bytes in the part's own range are harmless: a retry overwrites them, and a
        // download needs every part recorded.
        guard constantTimeEquals(hashed, digest) else { throw .digestMismatch }
        let fd = descriptor.value
        try await blocking {
            guard fdatasync(fd) == 0 else { throw BlobStorageFailure.failed("fdatasync: errno \(errno)") }
        }
        return nil
    }

    func complete(key: String, upload: UploadHandle, parts: [StoredPart]) async throws(BlobStorageFailure) {
        // Every part was written at its offset and made durable before it was recorded: the
        // file is whole already.
    }

    func read(key: String, range: Range<Int64>, into write: (ByteBuffer) async throws -> Void) async throws {
        let path = try checkedPath(key)
        let descriptor = FileDescriptorBox(try await blocking {
            let descriptor = open(path, O_RDONLY | O_CLOEXEC)
            guard descriptor >= 0 else { throw BlobStorageFailure.failed("open: errno \(errno)") }
            return descriptor
        })
        defer { descriptor.close() }
        var position = range.lowerBound
        let allocator = ByteBufferAllocator()
        while position < range.upperBound {
            let length = Int(min(Int64(Self.chunkBytes), range.upperBound - position))
            let fd = descriptor.value, at = position
            let chunk: ByteBuffer = try await blocking {
                var buffer = allocator.buffer(capacity: length)
                let count = try buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: length) { bytes -> Int in
                    var done = 0
                    while done < length {
                        let count = pread(fd, bytes.baseAddress! + done, length - done, off_t(at) + off_t(done))
                        if count < 0, errno == EINTR { continue }
                        guard count > 0 else { throw BlobStorageFailure.failed("pread: short file") }
                        done += count
                    }
                    return done
                }
                precondition(count == length)
                return buffer
            }
            try await write(chunk)
            position += Int64(length)
        }
    }

    func erase(key: String, upload: UploadHandle) async throws(BlobStorageFailure) {
        let path = try checkedPath(key)
        try await blocking {
            guard unlink(path) == 0 || errno == ENOENT else { throw BlobStorageFailure.failed("unlink: errno \(errno)") }
        }
    }

    func freeBytes() -> Int64? { probe(directory) }

    /// The storage keys of the files present, for the start-up sweep of files no row names.
    func storedKeys() throws -> [String] {
        var keys: [String] = []
        for folder in try FileManager.default.contentsOfDirectory(atPath: directory) where folder.utf8.count == 2 {
            guard let names = try? FileManager.default.contentsOfDirectory(atPath: "\(directory)/\(folder)") else { continue }
            keys += names.filter { path(of: $0) != nil && $0.hasPrefix(folder) }
        }
        return keys
    }

    /// Opens (creating, 0600) the blob file, creating its folder (0700) when missing.
    private static func openForWriting(_ path: String, folder: String) throws -> CInt {
        if mkdir(folder, 0o700) != 0, errno != EEXIST { throw BlobStorageFailure.failed("mkdir: errno \(errno)") }
        let descriptor = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            if errno == ENOSPC || errno == EDQUOT { throw BlobStorageFailure.full }
            throw BlobStorageFailure.failed("open: errno \(errno)")
        }
        return descriptor
    }

    /// Linux's `fallocate(2)`, which Swift's Glibc module does not import (glibc declares it for
    /// `_GNU_SOURCE` only): looked up once by name, as the C library exports it.
    private static let linuxFallocate: (@convention(c) (CInt, CInt, off_t, off_t) -> CInt)? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "fallocate") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (CInt, CInt, off_t, off_t) -> CInt).self)
    }()

    /// Allocates `size` bytes of real blocks to the file; the errno of a failure, nil on success.
    /// Without `fallocate(2)` in the C library, as on a file system without it (EOPNOTSUPP),
    /// nothing is allocated: `posix_fallocate` would write `size` zeros instead.
    private static func allocate(_ descriptor: CInt, size: Int64) -> CInt? {
        guard let linuxFallocate else { return nil }
        guard linuxFallocate(descriptor, 0, 0, off_t(size)) != 0 else { return nil }
        return errno
    }

    private static func syncFolder(_ folder: String) {
        let descriptor = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { return }
        _ = fsync(descriptor)
        close(descriptor)
    }

    /// Runs blocking `body` on the thread pool; its errors are ``BlobStorageFailure``s.
    private func blocking<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws(BlobStorageFailure) -> T {
        do {
            return try await pool.run(body)
        } catch let failure as BlobStorageFailure {
            throw failure
        } catch {
            throw .failed("\(type(of: error))")
        }
    }
}

/// A file descriptor closed exactly once, from any task.
private final class FileDescriptorBox: Sendable {
    let value: CInt
    init(_ value: CInt) { self.value = value }
    func close() { _ = Glibc.close(value) }
}
