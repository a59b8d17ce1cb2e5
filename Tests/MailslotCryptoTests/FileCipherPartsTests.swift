import Foundation
import Testing
@testable import MailslotCrypto

/// Sealing into a spool cut into parts (FileCipher+Parts.swift): every part announced once, in
/// order, after its bytes are in the spool, with their digest; the same key and header seal the
/// same file into the same bytes (what a resumed upload relies on).
@Suite struct FileCipherPartsTests {
    @Test(arguments: [(Int64(0), Int64(100_000)), (200_000, 65_553), (1_500_000, 300_000), (1_500_000, 1 << 30)])
    func eachPartIsAnnouncedWithItsDigestOnceItIsInTheSpool(plainSize: Int64, partSize: Int64) throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("mailslot-parts-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let source = folder.appendingPathComponent("source"), spool = folder.appendingPathComponent("spool")
        try Data((0..<plainSize).map { UInt8(truncatingIfNeeded: $0 &* 31) }).write(to: source)
        let key = FileKey()
        let encryptor = try #require(FileEncryptor(key: key, plainSize: plainSize))
        var announced: [(Int, [UInt8], Int64)] = []
        let sealed = try FileCipher.encryptFile(at: source, to: spool, with: encryptor, partSize: partSize) { number, digest in
            let written = (try? FileManager.default.attributesOfItem(atPath: spool.path)[.size] as? NSNumber)?.int64Value ?? -1
            announced.append((number, digest, written))
        }
        let ciphertext = try [UInt8](Data(contentsOf: spool))
        #expect(Int64(ciphertext.count) == sealed.size && FileDigest(of: ciphertext) == sealed.digest)
        let parts = Int((sealed.size - 1) / partSize + 1)
        #expect(announced.map(\.0) == Array(1...parts))
        for (number, digest, written) in announced {
            let range = Int64(number - 1) * partSize..<min(Int64(number) * partSize, sealed.size)
            #expect(digest == FileDigest(of: Array(ciphertext[Int(range.lowerBound)..<Int(range.upperBound)])).bytes, "part \(number)")
            #expect(written >= range.upperBound, "part \(number) announced before its bytes were written")
        }
        // Sealed again with the same key and header: the same bytes.
        let again = try #require(FileEncryptor(key: key, plainSize: plainSize, header: encryptor.header))
        let resealed = try FileCipher.encryptFile(at: source, to: spool, with: again, partSize: partSize) { _, _ in }
        let respooled = try [UInt8](Data(contentsOf: spool))
        #expect(resealed == sealed && respooled == ciphertext)
    }

    @Test func aSourceOfAnotherSizeIsRefusedAndLeavesNoSpool() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("mailslot-parts-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let source = folder.appendingPathComponent("source"), spool = folder.appendingPathComponent("spool")
        try Data(count: 1000).write(to: source)
        let encryptor = try #require(FileEncryptor(key: FileKey(), plainSize: 999))
        #expect(throws: FileError.sourceChanged) { try FileCipher.encryptFile(at: source, to: spool, with: encryptor, partSize: 4096) { _, _ in } }
        #expect(!FileManager.default.fileExists(atPath: spool.path))
    }
}
