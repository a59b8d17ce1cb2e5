import CSodium

// The encrypted-file format of spec/attachments.md §1–§2: libsodium's
// `crypto_secretstream_xchacha20poly1305` over 64 KiB chunks of the file padded with zeros to a
// size class, the file's length bound into every chunk, and a BLAKE2b-256 digest of the whole
// ciphertext that the recipient checks before it decrypts anything.
//
// Layers, from the bottom: the size arithmetic (`FileCipher.size(plainSize:)`); one chunk at a
// time (`FileEncryptor`, `FileDecryptor`, package-only); whole streams between a
// `FileChunkSource` and a `FileChunkSink` (`FileCipher.encrypt`, and `verify` then `decrypt`);
// whole files on disk (FileCipher+Disk.swift), which is what apps call.

/// The encrypted-file format: constants, size classes, and encrypting and opening whole streams.
public enum FileCipher {
    /// Plaintext bytes per chunk. Every chunk is full: the padded plaintext is a whole number of chunks.
    public static let chunkSize = 65_536
    /// The stream header that starts the ciphertext (`crypto_secretstream_xchacha20poly1305_HEADERBYTES`).
    public static let headerSize = 24
    /// What sealing adds to each chunk (`crypto_secretstream_xchacha20poly1305_ABYTES`: tag byte and MAC).
    public static let chunkOverhead = 17
    /// The ciphertext bytes of one chunk.
    public static let sealedChunkSize = chunkSize + chunkOverhead
    /// The largest file the format carries, 2^40 bytes (1 TiB); relays set far lower limits.
    public static let maxPlainSize: Int64 = 1 << 40
    /// The domain label at the start of every chunk's additional data.
    static let label = Array("mailslot-file-v1".utf8)

    /// The padded plaintext length for a file of `plainSize` bytes (§1.1): 64 KiB up to 64 KiB,
    /// then powers of two up to 1 MiB, then 16 steps per doubling; nil outside 0…2^40.
    public static func paddedSize(plainSize: Int64) -> Int64? {
        guard (0...maxPlainSize).contains(plainSize) else { return nil }
        let n = max(plainSize, 1)
        if n <= Int64(chunkSize) { return Int64(chunkSize) }
        if n <= 1 << 20 { return 1 << (64 - (n - 1).leadingZeroBitCount) }
        let step: Int64 = 1 << (63 - (n - 1).leadingZeroBitCount - 4)  // 2^(floor(log2(n − 1)) − 4)
        return (n + step - 1) / step * step
    }

    /// The ciphertext length of a file of `plainSize` bytes: what the relay stores and sees
    /// (`24 + P + 17·P/65536`); nil outside 0…2^40.
    public static func size(plainSize: Int64) -> Int64? {
        guard let padded = paddedSize(plainSize: plainSize) else { return nil }
        return Int64(headerSize) + padded + Int64(chunkOverhead) * (padded / Int64(chunkSize))
    }

    /// Whether `size` is the ciphertext length of some file (a relay's check of a declared blob
    /// size): a header and whole chunks whose padded plaintext is a size class.
    public static func isValidSize(_ size: Int64) -> Bool {
        guard size > Int64(headerSize), (size - Int64(headerSize)) % Int64(sealedChunkSize) == 0 else { return false }
        let padded = (size - Int64(headerSize)) / Int64(sealedChunkSize) * Int64(chunkSize)
        return paddedSize(plainSize: padded) == padded
    }

    /// The additional data of every chunk of a file of `plainSize` bytes (§1.2 step 4):
    /// `mailslot-file-v1` ‖ plainSize as 8 bytes big-endian.
    static func additionalData(plainSize: Int64) -> [UInt8] {
        label + (0..<8).map { UInt8(truncatingIfNeeded: UInt64(plainSize) >> (56 - 8 * $0)) }
    }

    // MARK: Streams

    /// Encrypts the `plainSize` bytes that `source` holds and writes the ciphertext to `sink`,
    /// hashing it on the way (§1.2). Memory stays at one chunk of each, whatever the size: the
    /// source is never asked for more than ``chunkSize`` bytes at a time, the sink never given
    /// more than ``sealedChunkSize``.
    ///
    /// The source must hold exactly `plainSize` bytes (checked: a source that ends early or goes
    /// on is ``FileError/sourceChanged``). Returns what the recipient needs to open the file.
    public static func encrypt(from source: inout some FileChunkSource, plainSize: Int64, key: FileKey = FileKey(),
                               to sink: inout some FileChunkSink) throws(FileError) -> SealedFile {
        guard let encryptor = FileEncryptor(key: key, plainSize: plainSize) else { throw .badLength }
        return try encrypt(from: &source, with: encryptor, to: &sink)
    }

    /// ``encrypt(from:plainSize:key:to:)`` with a ready encryptor (the vectors start theirs from
    /// a fixed header; a resumed upload restarts from its stored one).
    package static func encrypt(from source: inout some FileChunkSource, with encryptor: FileEncryptor,
                        to sink: inout some FileChunkSink) throws(FileError) -> SealedFile {
        let hasher = BLAKE2bHasher()
        let plain = ScratchBuffer(count: chunkSize), sealed = ScratchBuffer(count: sealedChunkSize)
        let header = ScratchBuffer(count: headerSize)
        header.bytes.copyBytes(from: encryptor.header)
        hasher.update(UnsafeRawBufferPointer(header.bytes))
        try sink.write(UnsafeRawBufferPointer(header.bytes))
        var remaining = encryptor.plainSize
        var checkedEnd = false
        for _ in 0..<encryptor.chunkCount {
            let wanted = Int(min(Int64(chunkSize), remaining))
            var filled = 0
            while filled < wanted {
                let got = try source.read(into: UnsafeMutableRawBufferPointer(rebasing: plain.bytes[filled..<wanted]))
                guard got > 0 else { throw .sourceChanged }
                filled += got
            }
            if wanted < chunkSize { sodium_memzero(plain.bytes.baseAddress! + wanted, chunkSize - wanted) }
            remaining -= Int64(wanted)
            if remaining == 0 && !checkedEnd {
                guard try isAtEnd(&source) else { throw .sourceChanged }
                checkedEnd = true
            }
            encryptor.seal(UnsafeRawBufferPointer(plain.bytes), into: sealed.bytes)
            hasher.update(UnsafeRawBufferPointer(sealed.bytes))
            try sink.write(UnsafeRawBufferPointer(sealed.bytes))
        }
        guard let digest = FileDigest(bytes: hasher.finalize()) else { preconditionFailure("BLAKE2b-256 gave another length") }
        return SealedFile(key: encryptor.key, digest: digest, size: encryptor.size, plainSize: encryptor.plainSize)
    }

    /// Whether `source` is at its end (asks it for one byte).
    private static func isAtEnd(_ source: inout some FileChunkSource) throws(FileError) -> Bool {
        let probe = ScratchBuffer(count: 1)
        return try source.read(into: probe.bytes) == 0
    }

    /// Opening steps 1–3 (§2): the declared size against the plain size, the ciphertext's length,
    /// and its digest, in one pass over `ciphertext` without decrypting anything.
    package static func verify(_ ciphertext: inout some FileChunkSource, _ file: SealedFile) throws(FileError) {
        guard size(plainSize: file.plainSize) == file.size else { throw .badLength }  // 1
        let hasher = BLAKE2bHasher()
        let buffer = ScratchBuffer(count: sealedChunkSize)
        var total: Int64 = 0
        while total < file.size {
            let wanted = Int(min(Int64(sealedChunkSize), file.size - total))
            let got = try ciphertext.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer.bytes[0..<wanted]))
            guard got > 0 else { throw .truncated }                                         // 2: shorter
            hasher.update(UnsafeRawBufferPointer(rebasing: buffer.bytes[0..<got]))
            total += Int64(got)
        }
        guard try isAtEnd(&ciphertext) else { throw .badLength }                         // 2: longer
        guard constantTimeEquals(hasher.finalize(), file.digest.bytes) else { throw .digestMismatch }  // 3
    }

    /// Opening steps 4–5 (§2): decrypts a ciphertext that ``verify(_:_:)`` accepted, read again
    /// from its start, and writes the file's bytes to `sink` chunk by chunk. The sink sees
    /// plaintext before the last checks: it must keep it provisional (a temporary file) until
    /// this returns.
    package static func decrypt(_ ciphertext: inout some FileChunkSource, _ file: SealedFile,
                                to sink: inout some FileChunkSink) throws(FileError) {
        let header = ScratchBuffer(count: headerSize)
        try readFully(&ciphertext, into: header.bytes)
        guard let decryptor = FileDecryptor(key: file.key, plainSize: file.plainSize, header: Array(header.bytes)) else {
            throw .badLength
        }
        let sealed = ScratchBuffer(count: sealedChunkSize), plain = ScratchBuffer(count: chunkSize)
        for _ in 0..<decryptor.chunkCount {
            try readFully(&ciphertext, into: sealed.bytes)
            let fileBytes = try decryptor.open(UnsafeRawBufferPointer(sealed.bytes), into: plain.bytes)
            if fileBytes > 0 { try sink.write(UnsafeRawBufferPointer(rebasing: plain.bytes[0..<fileBytes])) }
        }
        try decryptor.finish()
    }

    /// Fills `buffer` from `source`; ``FileError/truncated`` if the source ends first.
    private static func readFully(_ source: inout some FileChunkSource, into buffer: UnsafeMutableRawBufferPointer) throws(FileError) {
        var filled = 0
        while filled < buffer.count {
            let got = try source.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[filled...]))
            guard got > 0 else { throw .truncated }
            filled += got
        }
    }

    /// Opens a ciphertext held in memory (§2, every step in order) and returns the file's bytes.
    /// For small files, vectors and fuzzing: files on disk go through
    /// ``decryptFile(at:_:to:progress:)``, which never holds them whole.
    public static func open(_ ciphertext: [UInt8], _ file: SealedFile) throws(FileError) -> [UInt8] {
        var source = ByteSource(ciphertext)
        try verify(&source, file)
        source = ByteSource(ciphertext)
        var sink = ByteSink()
        try decrypt(&source, file, to: &sink)
        return sink.bytes
    }

    /// Encrypts a file held in memory; see ``encrypt(from:plainSize:key:to:)``.
    public static func seal(_ plaintext: [UInt8], key: FileKey = FileKey()) throws(FileError) -> (ciphertext: [UInt8], file: SealedFile) {
        var source = ByteSource(plaintext)
        var sink = ByteSink()
        let file = try encrypt(from: &source, plainSize: Int64(plaintext.count), key: key, to: &sink)
        return (sink.bytes, file)
    }
}

/// Why a file was refused (spec/attachments.md §2.3), or could not be read or written.
public enum FileError: Error, Equatable, Sendable {
    /// `file_bad_length`: the declared size is not the ciphertext length of `plain_size` (or
    /// `plain_size` is outside 0…2^40), or the ciphertext is longer than declared.
    case badLength
    /// `file_truncated`: the ciphertext is shorter than declared, or its last chunk is not final.
    case truncated
    /// `file_digest_mismatch`: the ciphertext's BLAKE2b-256 is not the declared digest (another
    /// or altered blob); nothing was decrypted.
    case digestMismatch
    /// `file_cannot_decrypt`: a chunk does not open with this key and plain size (wrong key,
    /// altered chunk, or another `plain_size` of the same size class).
    case cannotDecrypt
    /// `file_bad_tag`: a final chunk before the last one, or a tag the format never uses.
    case badTag
    /// `file_bad_padding`: the padding after the file's bytes is not all zeros.
    case badPadding
    /// `file_source_changed`: encrypting only: the source held more or fewer bytes than declared
    /// (the file changed while it was read).
    case sourceChanged
    /// `file_destination_exists`: decrypting to disk only: the destination name is taken (it
    /// is never overwritten).
    case destinationExists
    /// `file_io`: a local file could not be read or written (not a property of the ciphertext):
    /// what failed, and `errno`.
    case io(String, errno: Int32)

    /// The error code: spec/attachments.md §2.3 for the format's refusals.
    public var code: String {
        switch self {
        case .badLength: "file_bad_length"
        case .truncated: "file_truncated"
        case .digestMismatch: "file_digest_mismatch"
        case .cannotDecrypt: "file_cannot_decrypt"
        case .badTag: "file_bad_tag"
        case .badPadding: "file_bad_padding"
        case .sourceChanged: "file_source_changed"
        case .destinationExists: "file_destination_exists"
        case .io: "file_io"
        }
    }
}

/// The BLAKE2b-256 digest of a whole ciphertext, header included (§1.3).
public struct FileDigest: Sendable, Equatable, CustomStringConvertible {
    /// The digest size in bytes.
    public static let byteCount = 32
    /// The 32 digest bytes.
    public let bytes: [UInt8]

    /// Wraps 32 bytes, or returns nil for any other length.
    public init?(bytes: [UInt8]) {
        guard bytes.count == Self.byteCount else { return nil }
        self.bytes = bytes
    }

    /// The digest of `ciphertext` held in memory.
    public init(of ciphertext: [UInt8]) { bytes = blake2b(ciphertext, length: Self.byteCount) }

    /// Compared in constant time (`sodium_memcmp`), as every check of a received digest is.
    public static func == (lhs: FileDigest, rhs: FileDigest) -> Bool { constantTimeEquals(lhs.bytes, rhs.bytes) }

    /// Unpadded base64url, as in the chat message.
    public var description: String { Base64URL.encode(bytes) }
}

/// What opening an encrypted file needs, all of it carried in the file's reference (§3): the
/// key, the ciphertext's digest and length, and the file's own length. Not checked when made:
/// opening checks it (§2 step 1), so that a forged reference is refused with its code.
public struct SealedFile: Sendable, Equatable {
    /// The file's key.
    public let key: FileKey
    /// BLAKE2b-256 of the whole ciphertext.
    public let digest: FileDigest
    /// The ciphertext's length in bytes (``FileCipher/size(plainSize:)``).
    public let size: Int64
    /// The file's length in bytes, before padding.
    public let plainSize: Int64

    /// The parts of a reference that opening uses.
    public init(key: FileKey, digest: FileDigest, size: Int64, plainSize: Int64) {
        self.key = key
        self.digest = digest
        self.size = size
        self.plainSize = plainSize
    }
}

/// Where plaintext (to encrypt) or ciphertext (to open) is read from, a piece at a time.
public protocol FileChunkSource {
    /// Reads at most `buffer.count` bytes into `buffer` and returns how many; 0 only at the end.
    mutating func read(into buffer: UnsafeMutableRawBufferPointer) throws(FileError) -> Int
}

/// Where ciphertext (when encrypting) or the file's bytes (when opening) are written.
public protocol FileChunkSink {
    /// Writes all of `bytes`.
    mutating func write(_ bytes: UnsafeRawBufferPointer) throws(FileError)
}

/// A buffer of its own allocation for one chunk, wiped and freed with its owner: the stream
/// loops reuse it for every chunk (no allocation per chunk), and typed throws pass through code
/// that uses it, which they do not through the standard library's `withUnsafe…` closures.
private final class ScratchBuffer {
    let bytes: UnsafeMutableRawBufferPointer

    init(count: Int) {
        bytes = .allocate(byteCount: count, alignment: 16)
        bytes.initializeMemory(as: UInt8.self, repeating: 0)
    }

    deinit {
        sodium_memzero(bytes.baseAddress!, bytes.count)
        bytes.deallocate()
    }
}

/// A source over bytes in memory.
package struct ByteSource: FileChunkSource {
    private let bytes: [UInt8]
    private var offset = 0

    package init(_ bytes: [UInt8]) { self.bytes = bytes }

    package mutating func read(into buffer: UnsafeMutableRawBufferPointer) throws(FileError) -> Int {
        let count = min(buffer.count, bytes.count - offset)
        guard count > 0 else { return 0 }
        bytes.withUnsafeBytes { source in buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: source[offset..<offset + count])) }
        offset += count
        return count
    }
}

/// A sink that collects what it is given in memory.
package struct ByteSink: FileChunkSink {
    package private(set) var bytes: [UInt8] = []

    package init() {}

    package mutating func write(_ bytes: UnsafeRawBufferPointer) throws(FileError) { self.bytes.append(contentsOf: bytes) }
}

// MARK: - One chunk at a time

/// libsodium's secretstream state, wiped and freed with its owner. The state holds the file's
/// subkey, so it lives in its own allocation rather than in a Swift value that may be copied.
private final class StreamState {
    let pointer: UnsafeMutablePointer<crypto_secretstream_xchacha20poly1305_state>

    init() {
        Sodium.ready()
        pointer = .allocate(capacity: 1)
        sodium_memzero(pointer, MemoryLayout<crypto_secretstream_xchacha20poly1305_state>.size)
    }

    deinit {
        sodium_memzero(pointer, MemoryLayout<crypto_secretstream_xchacha20poly1305_state>.size)
        pointer.deallocate()
    }
}

/// The secretstream tags the format uses (§1.2) and the two it never does.
enum StreamTag: UInt8 {
    case message = 0, push = 1, rekey = 2, final = 3
}

/// Seals one file chunk by chunk (§1.2): the header, then each 64 KiB chunk of the padded
/// plaintext with the file's length in its additional data, the last one `FINAL`.
package final class FileEncryptor {
    /// The 24-byte stream header: the first bytes of the ciphertext.
    package let header: [UInt8]
    let key: FileKey
    let plainSize: Int64
    let size: Int64
    let chunkCount: Int64
    private let state: StreamState
    private let additionalData: [UInt8]
    private var sealedChunks: Int64 = 0

    /// Starts a file of `plainSize` bytes with a random header (`init_push`); nil outside 0…2^40.
    package init?(key: FileKey, plainSize: Int64) {
        guard let padded = FileCipher.paddedSize(plainSize: plainSize), let size = FileCipher.size(plainSize: plainSize) else { return nil }
        var header = [UInt8](repeating: 0, count: FileCipher.headerSize)
        let state = StreamState()
        key.bytes.withUnsafeBytes { keyBytes in
            _ = crypto_secretstream_xchacha20poly1305_init_push(state.pointer, &header, keyBytes.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        (self.state, self.header, self.key, self.plainSize, self.size) = (state, header, key, plainSize, size)
        (chunkCount, additionalData) = (padded / Int64(FileCipher.chunkSize), FileCipher.additionalData(plainSize: plainSize))
    }

    /// Starts a file with a chosen header: reproducible vectors, and an upload resumed after a
    /// crash, which seals the same file again into the same ciphertext (the parts the relay
    /// already holds stay valid). `init_pull` sets up the same state `init_push` does for that
    /// header (libsodium derives both the same way), so the chunks are those a random header
    /// would give, with this header. Never use a (key, header) pair for other plaintext: the
    /// keystream would repeat.
    package init?(key: FileKey, plainSize: Int64, header: [UInt8]) {
        guard header.count == FileCipher.headerSize, let padded = FileCipher.paddedSize(plainSize: plainSize),
              let size = FileCipher.size(plainSize: plainSize) else { return nil }
        let state = StreamState()
        key.bytes.withUnsafeBytes { keyBytes in
            _ = crypto_secretstream_xchacha20poly1305_init_pull(state.pointer, header, keyBytes.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        (self.state, self.header, self.key, self.plainSize, self.size) = (state, header, key, plainSize, size)
        (chunkCount, additionalData) = (padded / Int64(FileCipher.chunkSize), FileCipher.additionalData(plainSize: plainSize))
    }

    /// Seals the next chunk: `chunk` is 65 536 bytes of padded plaintext (zeros past the file's
    /// end, checked), `output` takes the 65 553 sealed bytes. The tag follows from the position.
    package func seal(_ chunk: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) {
        precondition(sealedChunks < chunkCount, "FileEncryptor: every chunk is already sealed")
        let start = sealedChunks * Int64(FileCipher.chunkSize)
        if plainSize < start + Int64(FileCipher.chunkSize) {
            let fileBytes = Int(max(0, plainSize - start))
            precondition(chunk[fileBytes...].allSatisfy { $0 == 0 }, "FileEncryptor: the padding must be zeros")
        }
        push(chunk, tag: sealedChunks + 1 == chunkCount ? .final : .message, into: output)
    }

    /// Seals `chunk` with any tag: ``seal(_:into:)``, and the vectors' broken streams.
    func push(_ chunk: UnsafeRawBufferPointer, tag: StreamTag, into output: UnsafeMutableRawBufferPointer) {
        precondition(chunk.count == FileCipher.chunkSize && output.count == FileCipher.sealedChunkSize,
                     "FileEncryptor: a chunk is 65 536 bytes in, 65 553 out")
        _ = crypto_secretstream_xchacha20poly1305_push(
            state.pointer, output.baseAddress!.assumingMemoryBound(to: UInt8.self), nil,
            chunk.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt64(chunk.count),
            additionalData, UInt64(additionalData.count), tag.rawValue)
        sealedChunks += 1
    }
}

/// Opens one file chunk by chunk (§2 steps 4–5), after its digest was checked.
package final class FileDecryptor {
    let plainSize: Int64
    let chunkCount: Int64
    private let state: StreamState
    private let additionalData: [UInt8]
    private var openedChunks: Int64 = 0
    private var finalSeen = false
    private var paddingIsClean = true

    /// Starts opening a file of `plainSize` bytes whose ciphertext begins with `header`; nil when
    /// `plainSize` is outside 0…2^40 or the header is not 24 bytes.
    package init?(key: FileKey, plainSize: Int64, header: [UInt8]) {
        guard header.count == FileCipher.headerSize, let padded = FileCipher.paddedSize(plainSize: plainSize) else { return nil }
        let state = StreamState()
        key.bytes.withUnsafeBytes { keyBytes in
            _ = crypto_secretstream_xchacha20poly1305_init_pull(state.pointer, header, keyBytes.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        self.state = state
        self.plainSize = plainSize
        chunkCount = padded / Int64(FileCipher.chunkSize)
        additionalData = FileCipher.additionalData(plainSize: plainSize)
    }

    /// Opens the next 65 553-byte chunk into `output` (65 536 bytes) and returns how many of them
    /// are the file's; the rest is padding, whose zeros ``finish()`` vouches for.
    package func open(_ sealed: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) throws(FileError) -> Int {
        precondition(sealed.count == FileCipher.sealedChunkSize && output.count == FileCipher.chunkSize,
                     "FileDecryptor: a chunk is 65 553 bytes in, 65 536 out")
        precondition(openedChunks < chunkCount && !finalSeen, "FileDecryptor: every chunk is already open")
        var tag: UInt8 = 0
        let status = crypto_secretstream_xchacha20poly1305_pull(
            state.pointer, output.baseAddress!.assumingMemoryBound(to: UInt8.self), nil, &tag,
            sealed.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt64(sealed.count),
            additionalData, UInt64(additionalData.count))
        guard status == 0 else { throw .cannotDecrypt }
        openedChunks += 1
        let last = openedChunks == chunkCount
        switch StreamTag(rawValue: tag) {
        case .message: if last { throw .truncated }
        case .final: if !last { throw .badTag }; finalSeen = true
        default: throw .badTag
        }
        let start = (openedChunks - 1) * Int64(FileCipher.chunkSize)
        let fileBytes = Int(min(Int64(FileCipher.chunkSize), max(0, plainSize - start)))
        if fileBytes < FileCipher.chunkSize {
            // Remembered, not thrown: every chunk is decrypted (step 4) before padding is judged (step 5).
            var bits: UInt8 = 0
            for byte in output[fileBytes...] { bits |= byte }
            if bits != 0 { paddingIsClean = false }
        }
        return fileBytes
    }

    /// Step 5, once every chunk is open: ``FileError/badPadding`` unless the padding was all zeros.
    package func finish() throws(FileError) {
        guard finalSeen else { throw .truncated }
        guard paddingIsClean else { throw .badPadding }
    }
}
