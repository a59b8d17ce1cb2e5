import MailslotWire

/// The outbox spool of a file being sealed, cut into the relay's parts as it is written: each
/// part's BLAKE2b-256 is computed from its bytes as they are produced, and `completed` is called
/// with the part's number and digest once its last byte is in the spool. The upload reads a part
/// back only then, while encryption goes on (a pipeline, not a pass to seal and one to send; see
/// FileSending.swift).
struct PartSpool: FileChunkSink {
    private var writer: FileDescriptorSink
    private let layout: BlobLayout
    private let completed: (Int, [UInt8]) -> Void
    private var hasher = BLAKE2bHasher()
    private var part = 1
    private var leftInPart: Int64

    /// A spool writing to `file` (empty, at its start), cut as `layout` says.
    init(_ file: FileDescriptor, layout: BlobLayout, completed: @escaping (Int, [UInt8]) -> Void) {
        writer = FileDescriptorSink(file)
        self.layout = layout
        self.completed = completed
        leftInPart = Int64(layout.range(ofPart: 1)?.count ?? 0)
    }

    mutating func write(_ bytes: UnsafeRawBufferPointer) throws(FileError) {
        try writer.write(bytes)
        var offset = 0
        while offset < bytes.count {
            let take = Int(min(Int64(bytes.count - offset), leftInPart))
            guard take > 0 else { throw .badLength }  // more ciphertext than the blob holds
            hasher.update(UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + take]))
            offset += take
            leftInPart -= Int64(take)
            if leftInPart == 0 {
                completed(part, hasher.finalize())
                part += 1
                hasher = BLAKE2bHasher()
                leftInPart = Int64(layout.range(ofPart: part)?.count ?? 0)
            }
        }
    }
}
