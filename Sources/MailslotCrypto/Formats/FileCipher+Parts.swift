import Foundation

// Sealing a file into a spool cut into a relay's parts (spec/protocol.md §4.18), for an upload
// that runs as a pipeline with encryption: each part's BLAKE2b-256 is computed from its bytes as
// they are sealed, and the caller hears of a part the moment its last byte is in the spool, so
// it can send that part while the rest is sealed, and never reads a part back to hash it.
// Used by the client library's file send and by `mailslot-bench transfer --mode e2e`.

extension FileCipher {
    /// Seals the file at `source` with `encryptor` into `spool` (created or truncated, mode
    /// 0600, synced before this returns) as ``encryptFile(at:to:key:progress:)`` does, and calls
    /// `part` with each part's number (from 1) and digest once the part's bytes, ciphertext
    /// offsets `[(n − 1) · partSize, min(n · partSize, size))`, are written to the spool.
    ///
    /// A source that is not `encryptor`'s plain size, or changes while it is read, is
    /// ``FileError/sourceChanged``. On failure `spool` is removed. `progress` gets the plaintext
    /// bytes read so far.
    package static func encryptFile(at source: URL, to spool: URL, with encryptor: FileEncryptor, partSize: Int64,
                                    progress: ((Int64) -> Void)? = nil, part: @escaping (Int, [UInt8]) -> Void) throws(FileError) -> SealedFile {
        guard partSize > 0 else { throw .badLength }
        let input = try FileDescriptor(opening: source, flags: O_RDONLY)
        guard try input.regularFileSize() == encryptor.plainSize else { throw .sourceChanged }
        let output = try FileDescriptor(opening: spool, flags: O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, mode: 0o600)
        var written = false
        defer { if !written { unlink(spool.path) } }
        var reader = FileDescriptorSource(input, progress: progress)
        var sink = PartSpool(output, size: encryptor.size, partSize: partSize, completed: part)
        let sealed = try encrypt(from: &reader, with: encryptor, to: &sink)
        try output.sync()
        written = true
        return sealed
    }
}

/// A spool file cut into parts as it is written: each part hashed as its bytes pass, and
/// announced once they are all written.
struct PartSpool: FileChunkSink {
    private var writer: FileDescriptorSink
    private let size: Int64
    private let partSize: Int64
    private let completed: (Int, [UInt8]) -> Void
    private var hasher = BLAKE2bHasher()
    private var part = 1
    private var leftInPart: Int64

    /// A spool writing to `file` (empty) a ciphertext of `size` bytes, cut every `partSize`.
    init(_ file: FileDescriptor, size: Int64, partSize: Int64, completed: @escaping (Int, [UInt8]) -> Void) {
        writer = FileDescriptorSink(file)
        self.size = size
        self.partSize = partSize
        self.completed = completed
        leftInPart = min(partSize, size)
    }

    mutating func write(_ bytes: UnsafeRawBufferPointer) throws(FileError) {
        try writer.write(bytes)
        var offset = 0
        while offset < bytes.count {
            let take = Int(min(Int64(bytes.count - offset), leftInPart))
            guard take > 0 else { throw .badLength }  // more ciphertext than `size`
            hasher.update(UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + take]))
            offset += take
            leftInPart -= Int64(take)
            if leftInPart == 0 {
                completed(part, hasher.finalize())
                hasher = BLAKE2bHasher()
                leftInPart = max(0, min(partSize, size - Int64(part) * partSize))
                part += 1
            }
        }
    }
}
