import CSodium
import Foundation
import Testing
@testable import MailslotCrypto

/// The encrypted-file format (spec/attachments.md §1–§2) beyond its vectors: round trips across
/// the size classes, memory bounded by one chunk, and the disk rules (nothing under the name
/// unless every check passed, never an overwrite, a source that changes refused).
@Suite struct FileCipherTests {
    /// A source that hands out `bytes` and records how much each read asked for.
    struct RecordingSource: FileChunkSource {
        var bytes: [UInt8]
        var offset = 0
        var requests: [Int] = []
        /// At most this many bytes per read, to exercise short reads.
        var largestRead = Int.max

        mutating func read(into buffer: UnsafeMutableRawBufferPointer) throws(FileError) -> Int {
            requests.append(buffer.count)
            let count = min(buffer.count, bytes.count - offset, largestRead)
            guard count > 0 else { return 0 }
            bytes.withUnsafeBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[offset..<offset + count])) }
            offset += count
            return count
        }
    }

    /// A sink that records the size of every write.
    struct RecordingSink: FileChunkSink {
        var bytes: [UInt8] = []
        var writes: [Int] = []

        mutating func write(_ bytes: UnsafeRawBufferPointer) throws(FileError) {
            writes.append(bytes.count)
            self.bytes.append(contentsOf: bytes)
        }
    }

    static func plaintext(_ count: Int) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 8) } }

    static func temporaryFolder() throws -> URL {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("mailslot-file-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        return folder
    }

    @Test func sizeClassesMatchTheSpecTable() {
        // spec/attachments.md §1.1's table, and the class count it states (181 up to 2 GiB).
        #expect(FileCipher.size(plainSize: 40_000) == 65_577)
        #expect(FileCipher.size(plainSize: 1_048_577) == 1_114_425)
        #expect(FileCipher.size(plainSize: 3_000_000) == 3_015_462)
        #expect(FileCipher.size(plainSize: 104_857_600) == 104_884_824)
        var classes = Set<Int64>(), plain: Int64 = 0
        while plain <= 1 << 31 {
            let padded = FileCipher.paddedSize(plainSize: plain)!
            classes.insert(padded)
            #expect(padded >= plain && padded % 65_536 == 0 && FileCipher.isValidSize(FileCipher.size(plainSize: plain)!))
            if padded > 1 << 20 { #expect(Double(padded - plain) <= Double(plain) * 0.0625) }
            plain = padded + 1
        }
        #expect(classes.count == 181)
        #expect(FileCipher.paddedSize(plainSize: -1) == nil && FileCipher.size(plainSize: (1 << 40) + 1) == nil)
        #expect(crypto_secretstream_abytes() == FileCipher.chunkOverhead && crypto_secretstream_headerbytes() == FileCipher.headerSize)
    }

    @Test(arguments: [0, 1, 40_000, 65_535, 65_536, 65_537, 131_072, 200_000, 1_048_577])
    func roundTripInMemory(size: Int) throws {
        let plain = Self.plaintext(size)
        let (ciphertext, file) = try FileCipher.seal(plain)
        #expect(Int64(ciphertext.count) == file.size && file.size == FileCipher.size(plainSize: Int64(size)))
        #expect(file.digest == FileDigest(of: ciphertext))
        #expect(try FileCipher.open(ciphertext, file) == plain)
        // A fresh header each time: the same file and key never give the same ciphertext.
        let again = try FileCipher.seal(plain, key: file.key)
        #expect(again.ciphertext != ciphertext)
    }

    @Test func encryptorAsksForOneChunkAtMostAndWritesOneChunkAtATime() throws {
        let size = 5 * 65_536 + 123
        var source = RecordingSource(bytes: Self.plaintext(size))
        source.largestRead = 40_000  // short reads: the encryptor fills each chunk in pieces
        var sink = RecordingSink()
        let file = try FileCipher.encrypt(from: &source, plainSize: Int64(size), to: &sink)
        #expect(source.requests.max()! <= FileCipher.chunkSize)
        #expect(source.requests.last == 1, "one byte asked after the last, to see the source is at its end")
        #expect(sink.writes.max()! <= FileCipher.sealedChunkSize && sink.writes.first == FileCipher.headerSize)
        #expect(try FileCipher.open(sink.bytes, file) == Self.plaintext(size))

        // Opening reads and writes a chunk at a time too.
        var ciphertext = RecordingSource(bytes: sink.bytes)
        try FileCipher.verify(&ciphertext, file)
        #expect(ciphertext.requests.max()! <= FileCipher.sealedChunkSize)
        ciphertext = RecordingSource(bytes: sink.bytes)
        var output = RecordingSink()
        try FileCipher.decrypt(&ciphertext, file, to: &output)
        #expect(ciphertext.requests.max()! <= FileCipher.sealedChunkSize && output.writes.max()! <= FileCipher.chunkSize)
        #expect(output.bytes == Self.plaintext(size))
    }

    @Test func aSourceThatChangesIsRefused() throws {
        var short = RecordingSource(bytes: Self.plaintext(1000))
        var sink = RecordingSink()
        #expect(throws: FileError.sourceChanged) { try FileCipher.encrypt(from: &short, plainSize: 1001, to: &sink) }
        var long = RecordingSource(bytes: Self.plaintext(1001))
        #expect(throws: FileError.sourceChanged) { try FileCipher.encrypt(from: &long, plainSize: 1000, to: &sink) }
        var empty = RecordingSource(bytes: [1])
        #expect(throws: FileError.sourceChanged) { try FileCipher.encrypt(from: &empty, plainSize: 0, to: &sink) }
        #expect(throws: FileError.badLength) { try FileCipher.encrypt(from: &empty, plainSize: (1 << 40) + 1, to: &sink) }
    }

    @Test func streamingDigestIsBLAKE2bOfTheWhole() {
        let bytes = Self.plaintext(300_001)
        let hasher = BLAKE2bHasher()
        var offset = 0
        for piece in [0, 1, 127, 128, 129, 65_536, 100_000] {
            hasher.update(Array(bytes[offset..<offset + piece]))
            offset += piece
        }
        hasher.update(Array(bytes[offset...]))
        #expect(hasher.finalize() == blake2b(bytes, length: 32))
        // RFC 7693 Appendix A is BLAKE2b-512 of "abc"; libsodium's unkeyed 32-byte output of "" is well known.
        #expect(BLAKE2bHasher(length: 32).finalize() == hex("0e5751c026e543b2e8ab2eb06099daa1d1e5df47778f7787faab45cdf12fe3a8"))
    }

    @Test func fileRoundTripOnDisk() throws {
        let folder = try Self.temporaryFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        for size in [0, 65_536, 1_048_577] {
            let source = folder.appendingPathComponent("plain-\(size)"), sealed = folder.appendingPathComponent("sealed-\(size)")
            let opened = folder.appendingPathComponent("opened-\(size)")
            try Data(Self.plaintext(size)).write(to: source)
            var reports: [FileProgress] = []
            let file = try FileCipher.encryptFile(at: source, to: sealed) { reports.append($0) }
            #expect(reports.last == (size == 0 ? nil : FileProgress(stage: .encrypting, done: Int64(size), total: Int64(size))))
            #expect(reports.count == (size + 65_535) / 65_536, "one report per chunk read")
            let attributes = try FileManager.default.attributesOfItem(atPath: sealed.path)
            #expect(file.plainSize == Int64(size) && attributes[.size] as? Int == Int(file.size))
            #expect(attributes[.posixPermissions] as? Int == 0o600)
            reports = []
            try FileCipher.decryptFile(at: sealed, file, to: opened) { reports.append($0) }
            #expect(try Data(contentsOf: opened) == Data(Self.plaintext(size)))
            #expect(reports.filter { $0.stage == .verifying }.last?.done == file.size)
            #expect(reports.last == FileProgress(stage: .decrypting, done: file.size, total: file.size))
            for stage in [FileProgress.Stage.verifying, .decrypting] {
                let done = reports.filter { $0.stage == stage }.map(\.done)
                #expect(done == done.sorted() && Set(done).count == done.count, "\(stage): growing")
            }
            #expect(reports.firstIndex { $0.stage == .decrypting }! > reports.lastIndex { $0.stage == .verifying }!, "verified before decrypting")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path).allSatisfy { !$0.hasPrefix(".") }, "no temporary file left")
    }

    @Test func decryptingNeverOverwritesAndLeavesNothingOnFailure() throws {
        let folder = try Self.temporaryFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let source = folder.appendingPathComponent("plain"), sealed = folder.appendingPathComponent("sealed")
        let opened = folder.appendingPathComponent("opened")
        try Data(Self.plaintext(100_000)).write(to: source)
        let file = try FileCipher.encryptFile(at: source, to: sealed)

        // An existing name is never replaced, even by the right file.
        try Data("keep me".utf8).write(to: opened)
        #expect(throws: FileError.destinationExists) { try FileCipher.decryptFile(at: sealed, file, to: opened) }
        #expect(try Data(contentsOf: opened) == Data("keep me".utf8))
        try FileManager.default.removeItem(at: opened)

        // The last chunk altered (its digest updated, so decryption starts and writes chunk 1
        // to the temporary file): refused at the end, and nothing under either name.
        var bytes = try [UInt8](Data(contentsOf: sealed))
        bytes[bytes.count - 5] ^= 1
        try Data(bytes).write(to: sealed)
        let forged = SealedFile(key: file.key, digest: FileDigest(of: bytes), size: file.size, plainSize: file.plainSize)
        #expect(throws: FileError.cannotDecrypt) { try FileCipher.decryptFile(at: sealed, forged, to: opened) }
        #expect(!FileManager.default.fileExists(atPath: opened.path))
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted() == ["plain", "sealed"], "no temporary file left")

        // A missing ciphertext, a folder for a source: I/O errors, not format refusals.
        #expect { try FileCipher.decryptFile(at: folder.appendingPathComponent("absent"), file, to: opened) } throws: {
            ($0 as? FileError)?.code == "file_io"
        }
        #expect { try FileCipher.encryptFile(at: folder, to: folder.appendingPathComponent("x")) } throws: { ($0 as? FileError)?.code == "file_io" }
        #expect(!FileManager.default.fileExists(atPath: folder.appendingPathComponent("x").path), "a failed encryption leaves no file")
    }

    /// The one-pass opening of a download hashed as it arrived: the caller's digest decides
    /// step 3 before anything is decrypted; lengths are still checked on the file.
    @Test func openingWithADigestComputedOnTheWayChecksItBeforeDecrypting() throws {
        let folder = try Self.temporaryFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let source = folder.appendingPathComponent("plain"), sealed = folder.appendingPathComponent("sealed")
        let opened = folder.appendingPathComponent("opened")
        try Data(Self.plaintext(200_000)).write(to: source)
        let file = try FileCipher.encryptFile(at: source, to: sealed)

        var other = file.digest.bytes
        other[0] ^= 1
        #expect(throws: FileError.digestMismatch) { try FileCipher.decryptFile(at: sealed, file, digested: other, to: opened) }
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted() == ["plain", "sealed"], "nothing written")

        var reports: [FileProgress] = []
        try FileCipher.decryptFile(at: sealed, file, digested: file.digest.bytes, to: opened) { reports.append($0) }
        #expect(try Data(contentsOf: opened) == Data(Self.plaintext(200_000)))
        #expect(reports.allSatisfy { $0.stage == .decrypting } && reports.last?.done == file.size, "one pass")
        try FileManager.default.removeItem(at: opened)

        let handle = try FileHandle(forWritingTo: sealed)
        try handle.truncate(atOffset: UInt64(file.size - 1))
        try handle.close()
        #expect(throws: FileError.truncated) { try FileCipher.decryptFile(at: sealed, file, digested: file.digest.bytes, to: opened) }
        #expect(!FileManager.default.fileExists(atPath: opened.path))
    }

    @Test func referenceChecksEveryMember() throws {
        let (_, file) = try FileCipher.seal(Self.plaintext(10))
        let reference = try FileReference(blob: "0123456789abcdef", sealed: file, mediaType: "text/plain", name: "a.txt",
                                          preview: FilePreview(mediaType: "image/png", data: [1, 2, 3]))
        let message = ChatMessage(type: .file, sender: Sender(id: "alice"), payload: Payload(text: "c", files: [reference]), timestamp: 1)
        let decoded = try ChatMessage.decode(try message.encoded())
        #expect(decoded == message && decoded.payload.files?.first?.sealed == file)
        #expect(throws: EnvelopeError.self) { try FileReference(blob: "short", sealed: file, mediaType: "text/plain") }
        let wrongSize = SealedFile(key: file.key, digest: file.digest, size: file.size + 1, plainSize: file.plainSize)
        #expect(throws: EnvelopeError.self) { try FileReference(blob: "0123456789abcdef", sealed: wrongSize, mediaType: "text/plain") }
        #expect(throws: EnvelopeError.self) { try FilePreview(mediaType: "image/png", data: [UInt8](repeating: 0, count: 4097)) }
        let empty = ChatMessage(type: .file, sender: Sender(id: "alice"), payload: Payload(files: []), timestamp: 1)
        #expect(throws: EnvelopeError.self) { try empty.validate() }
        let none = ChatMessage(type: .file, sender: Sender(id: "alice"), payload: Payload(text: "no file"), timestamp: 1)
        #expect(throws: EnvelopeError.self) { try none.validate() }
    }
}

private func crypto_secretstream_abytes() -> Int { Int(crypto_secretstream_xchacha20poly1305_abytes()) }
private func crypto_secretstream_headerbytes() -> Int { Int(crypto_secretstream_xchacha20poly1305_headerbytes()) }
