// Fuzz target `file-open`: opening an encrypted file (spec/attachments.md §2;
// Sources/MailslotCrypto/Formats/FileCipher.swift) with a fixed key, the key of stream `two` of
// spec/vectors/files.json. The first byte picks what the rest of the input is:
//
//   0  a reference's sizes and a ciphertext: 5 bytes of plain_size (little-endian, up to 2^40 − 1)
//      then the ciphertext. Bit 4 of the mode byte set: the digest is the ciphertext's own, so the
//      opener goes past check 3 into the stream; clear: stream `two`'s digest. The declared size
//      is the plain size's (check 1 passes), so lengths, digests and chunk parsing see the bytes.
//   1  a stream the harness seals with the fixed key: 3 bytes of plain_size (up to 262 144: at
//      most 4 chunks), 1 byte of tags (2 bits per chunk: MESSAGE, PUSH, REKEY, FINAL), then the
//      padded plaintext (zero-extended). Every chunk authenticates, so the tag rules and the
//      padding check decide; the outcome must be what the spec's order gives, computed here
//      independently, and an opened file must be the plaintext's first plain_size bytes.
//   2  a chat-message body: `ChatMessage.decode`, whose file references must satisfy §3
//      (the size is the plain size's) and survive re-encoding.

import Foundation
@testable import MailslotCrypto
import MailslotWire

@_cdecl("LLVMFuzzerTestOneInput")
public func fileOpenOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = bytes(data, size)
    guard let mode = input.first else { return 0 }
    let rest = Array(input.dropFirst())
    switch mode % 3 {
    case 0: openRaw(rest, ownDigest: mode & 0x10 != 0)
    case 1: openSealedByHarness(rest)
    default: decodeBody(rest)
    }
    return 0
}

/// The fixed key and the fixed stream `two` (spec/vectors/files.json).
enum FileFixed {
    static let key: FileKey = {
        guard let key = FileKey(bytes: SecretBytes(copying: stream.key)) else { fatalError("the fixed file key is not 32 bytes") }
        return key
    }()
    static var ciphertext: [UInt8] { stream.ciphertext }
    static var plainSize: Int64 { stream.plainSize }
    static let digest = FileDigest(of: ciphertext)
    /// Read once at start-up from the repository the binary runs in (tools/fuzz/run starts it there).
    private static let stream: (key: [UInt8], ciphertext: [UInt8], plainSize: Int64) = {
        let vectors = Seeds.json(FileManager.default.currentDirectoryPath, "spec/vectors/files.json")
        guard let streams = vectors["streams"] as? [String: [String: Any]], let two = streams["two"],
              let key = Base64URL.decode(two["key"] as? String ?? ""), let ciphertext = Base64URL.decode(two["ciphertext"] as? String ?? ""),
              let plainSize = two["plain_size"] as? Int else {
            fatalError("spec/vectors/files.json has no stream `two`")
        }
        return (key, ciphertext, Int64(plainSize))
    }()
}

private func littleEndian(_ bytes: ArraySlice<UInt8>) -> Int64 {
    bytes.reversed().reduce(0) { $0 << 8 | Int64($1) }
}

private func openRaw(_ input: [UInt8], ownDigest: Bool) {
    guard input.count >= 5 else { return }
    let plainSize = littleEndian(input[0..<5])
    let ciphertext = Array(input[5...])
    let size = FileCipher.size(plainSize: plainSize) ?? Int64(ciphertext.count)
    let file = SealedFile(key: FileFixed.key, digest: ownDigest ? FileDigest(of: ciphertext) : FileFixed.digest,
                          size: size, plainSize: plainSize)
    do {
        let opened = try FileCipher.open(ciphertext, file)
        expect(Int64(opened.count) == plainSize, "a file of \(opened.count) bytes opened for plain_size \(plainSize)")
        expect(Int64(ciphertext.count) == size && FileCipher.isValidSize(size), "a ciphertext of the wrong length opened")
        expect(FileDigest(of: ciphertext) == file.digest, "a ciphertext opened under another digest")
    } catch {
        expect(error != .sourceChanged && error != .destinationExists && error.code != "file_io", "opening in memory gave \(error.code)")
        if FileCipher.size(plainSize: plainSize) == nil { expect(error == .badLength, "plain_size out of range gave \(error.code)") }
        if Int64(ciphertext.count) < size { expect(error == .truncated, "a short ciphertext gave \(error.code)") }
        if Int64(ciphertext.count) == size && !ownDigest && FileDigest(of: ciphertext) != file.digest {
            expect(error == .digestMismatch, "a ciphertext of another digest gave \(error.code)")
        }
    }
}

private func openSealedByHarness(_ input: [UInt8]) {
    guard input.count >= 4 else { return }
    let plainSize = min(littleEndian(input[0..<3]), 4 * Int64(FileCipher.chunkSize))
    let tagBits = input[3]
    let padded = Int(FileCipher.paddedSize(plainSize: plainSize)!)
    var plain = Array(input[4...].prefix(padded))
    plain += [UInt8](repeating: 0, count: padded - plain.count)
    let chunks = padded / FileCipher.chunkSize
    let tags = (0..<chunks).map { StreamTag(rawValue: tagBits >> (2 * UInt8($0)) & 3)! }
    guard let encryptor = FileEncryptor(key: FileFixed.key, plainSize: plainSize, header: Array(FileFixed.ciphertext.prefix(24))) else {
        expect(false, "no encryptor for plain_size \(plainSize)")
        return
    }
    var ciphertext = encryptor.header
    var sealed = [UInt8](repeating: 0, count: FileCipher.sealedChunkSize)
    for index in 0..<chunks {
        plain[index * FileCipher.chunkSize..<(index + 1) * FileCipher.chunkSize].withUnsafeBytes { chunk in
            sealed.withUnsafeMutableBytes { encryptor.push(chunk, tag: tags[index], into: $0) }
        }
        ciphertext += sealed
    }
    // The spec's order (§2.1 checks 4 and 5), independently of FileDecryptor.
    var expected: FileError?
    for (index, tag) in tags.enumerated() {
        let last = index == chunks - 1
        if (tag == .final && !last) || tag == .push || tag == .rekey { expected = .badTag; break }
        if tag == .message && last { expected = .truncated; break }
    }
    if expected == nil && plain[Int(plainSize)...].contains(where: { $0 != 0 }) { expected = .badPadding }
    let file = SealedFile(key: FileFixed.key, digest: FileDigest(of: ciphertext), size: Int64(ciphertext.count), plainSize: plainSize)
    do {
        let opened = try FileCipher.open(ciphertext, file)
        expect(expected == nil, "a stream the spec refuses (\(expected?.code ?? "")) opened")
        expect(opened == Array(plain[..<Int(plainSize)]), "the opened file is not the sealed one")
    } catch {
        expect(error == expected, "got \(error.code), the spec's order gives \(expected?.code ?? "ok")")
    }
}

private func decodeBody(_ body: [UInt8]) {
    guard let message = try? ChatMessage.decode(body) else { return }
    for reference in message.payload.files ?? [] {
        expect(FileCipher.size(plainSize: reference.plainSize) == reference.size, "a reference whose size is not its plain size's")
        expect(Identifier.isValidBlobID(reference.blob), "a reference with an invalid blob id")
        expect((reference.preview?.data.count ?? 1) <= FilePreview.maxBytes, "an oversized preview")
    }
    expect(message.type != .file || !(message.payload.files ?? []).isEmpty, "a file message without files")
    do {
        let again = try ChatMessage.decode(try message.encoded())
        expect(again == message, "a chat message with files changed in a decode-encode-decode round trip")
    } catch {
        expect(false, "a chat message that decoded does not decode after re-encoding: \(error.code)")
    }
}

/// Stream `two` and its cases (mode 0), sealed streams of every tag pattern (mode 1), and the
/// reference bodies (mode 2), all from spec/vectors/files.json.
func fuzzSeeds(root: String) -> [(name: String, bytes: [UInt8])] {
    var seeds: [(name: String, bytes: [UInt8])] = []
    let vectors = Seeds.json(root, "spec/vectors/files.json")
    let plainSize = FileFixed.plainSize
    let sizeBytes = (0..<5).map { UInt8(truncatingIfNeeded: plainSize >> (8 * $0)) }
    // The harness's key must open stream `two` as the vectors say, or the seeds would stop at check 4.
    let file = SealedFile(key: FileFixed.key, digest: FileFixed.digest, size: Int64(FileFixed.ciphertext.count), plainSize: plainSize)
    expect((try? FileCipher.open(FileFixed.ciphertext, file)) != nil, "the fixed key does not open stream `two` of files.json")
    seeds.append(("two", Seeds.mode(0, sizeBytes + FileFixed.ciphertext)))
    seeds.append(("two-own-digest", Seeds.mode(0x10 * 3, sizeBytes + FileFixed.ciphertext)))
    for (index, vector) in Seeds.list(vectors, "cases").enumerated() where vector["stream"] as? String == "two" {
        var ciphertext = FileFixed.ciphertext
        if let cut = vector["truncate_to"] as? Int { ciphertext = Array(ciphertext.prefix(cut)) }
        if let more = vector["append"] as? String { ciphertext += Base64URL.decode(more) ?? [] }
        if let flip = vector["flip_byte"] as? Int, flip < ciphertext.count { ciphertext[flip] ^= 1 }
        seeds.append(("case-\(index)", Seeds.mode(0x10 * 3, sizeBytes + ciphertext)))
    }
    for (plain, tags) in [(40_000, 0b11), (100_000, 0b1100), (100_000, 0b0000), (100_000, 0b0011), (200_000, 0b11_00_00_00),
                          (40_000, 0b01), (131_073, 0b11_00_00_00)] as [(Int, UInt8)] {
        let header = (0..<3).map { UInt8(truncatingIfNeeded: plain >> (8 * $0)) } + [tags]
        seeds.append(("sealed-\(plain)-\(tags)", Seeds.mode(1, header + (0..<plain).map { UInt8($0 % 251) })))
    }
    for (index, vector) in Seeds.list(vectors, "references").enumerated() {
        if let body = vector["body"] as? String { seeds.append(("reference-\(index)", Seeds.mode(2, Array(body.utf8)))) }
    }
    return seeds
}
