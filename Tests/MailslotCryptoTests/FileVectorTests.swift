import Foundation
import Testing
@testable import MailslotCrypto

/// `spec/vectors/files.json` (spec/attachments.md §5): the size classes, deterministic sealing,
/// opening cases over stored streams, and file references in chat messages. Written with
/// `MAILSLOT_WRITE_VECTORS=1`, like the other vector files; regenerating changes nothing, as
/// every key and stream header is derived from the case's name.
extension SpecVectorTests {
    /// Byte i of every vector file is i mod 251 (a prime, so chunks differ from one another).
    static func filePlaintext(_ count: Int) -> [UInt8] { (0..<count).map { UInt8($0 % 251) } }

    /// The key of vector stream `name`: BLAKE2b-256 of `mailslot file vector key: ` + name.
    static func fileKey(_ name: String) -> FileKey {
        FileKey(bytes: SecretBytes(copying: blake2b(Array("mailslot file vector key: \(name)".utf8), length: 32)))!
    }

    /// The header of vector stream `name`: BLAKE2b-192 of `mailslot file vector header: ` + name.
    static func fileHeader(_ name: String) -> [UInt8] { blake2b(Array("mailslot file vector header: \(name)".utf8), length: 24) }

    /// A stream sealed under `name`'s key and header. `tags` replaces the tag of each chunk, and
    /// `dirty` sets one padding byte (an offset into the padded plaintext) to 1: the broken
    /// streams no encryptor makes.
    static func fileStream(_ name: String, plainSize: Int, tags: [StreamTag]? = nil, dirty: Int? = nil) -> [UInt8] {
        let encryptor = FileEncryptor(key: fileKey(name), plainSize: Int64(plainSize), header: fileHeader(name))!
        var padded = filePlaintext(plainSize)
        padded += [UInt8](repeating: 0, count: Int(FileCipher.paddedSize(plainSize: Int64(plainSize))!) - plainSize)
        if let dirty { padded[dirty] = 1 }
        var output = fileHeader(name)
        let chunks = padded.count / FileCipher.chunkSize
        var sealed = [UInt8](repeating: 0, count: FileCipher.sealedChunkSize)
        for index in 0..<chunks {
            let tag = tags?[index] ?? (index == chunks - 1 ? .final : .message)
            padded[index * FileCipher.chunkSize..<(index + 1) * FileCipher.chunkSize].withUnsafeBytes { chunk in
                sealed.withUnsafeMutableBytes { encryptor.push(chunk, tag: tag, into: $0) }
            }
            output += sealed
        }
        return output
    }

    /// The stored streams: (name, plain size, how it was made, ciphertext).
    static func fileStreams() -> [(name: String, plainSize: Int, construction: String, ciphertext: [UInt8])] {
        [
            ("one", 40_000, "sealed as §1 says: 1 chunk", fileStream("one", plainSize: 40_000)),
            ("two", 100_000, "sealed as §1 says: 2 chunks", fileStream("two", plainSize: 100_000)),
            ("no_final", 100_000, "2 chunks, both tagged MESSAGE", fileStream("no_final", plainSize: 100_000, tags: [.message, .message])),
            ("early_final", 100_000, "2 chunks, both tagged FINAL", fileStream("early_final", plainSize: 100_000, tags: [.final, .final])),
            ("push_tag", 40_000, "1 chunk tagged PUSH (0x01)", fileStream("push_tag", plainSize: 40_000, tags: [.push])),
            ("dirty_pad", 131_073, "4 chunks; padded plaintext byte 131 083 (in chunk 3) is 0x01",
             fileStream("dirty_pad", plainSize: 131_073, dirty: 131_083)),
        ]
    }

    static let filePlainSizes: [Int64] = [0, 1, 40_000, 65_536, 65_537, 131_072, 131_073, 1_048_576, 1_048_577, 1_114_112,
                                          1_114_113, 2_097_153, 3_000_000, 104_857_600, 1 << 31, (1 << 40) - 1, 1 << 40, -1, (1 << 40) + 1]

    static let fileCiphertextSizes: [Int64] = [0, 24, 65_576, 65_577, 65_578, 131_130, 24 + 65_553 * 3, 24 + 65_553 * 17,
                                               24 + 65_553 * 18, 24 + 65_553 * 32, 24 + 65_553 * 33, 24 + 65_553 * 34,
                                               FileCipher.size(plainSize: 1 << 40)!, FileCipher.size(plainSize: 1 << 40)! + 65_553 * 16]

    static let fileSealedSizes = [0, 1, 65_535, 65_536, 65_537, 131_072, 262_145, 1_048_576, 1_048_577, 3_000_000]

    static func fileCases() -> [[String: Any]] {
        let streams = Dictionary(uniqueKeysWithValues: fileStreams().map { ($0.name, $0) })
        func base(_ stream: String) -> [String: Any] {
            let s = streams[stream]!
            return ["stream": stream, "key": secretBase64(fileKey(stream).bytes), "digest": Base64URL.encode(FileDigest(of: s.ciphertext).bytes),
                    "size": s.ciphertext.count, "plain_size": s.plainSize]
        }
        func vector(_ name: String, _ stream: String, _ expect: String, _ more: [String: Any] = [:]) -> [String: Any] {
            var fields = base(stream).merging(more) { $1 }
            fields["name"] = name
            fields["expect"] = expect
            return fields
        }
        /// The digest of `stream` after flipping bit 0 of byte `offset`.
        func flippedDigest(_ stream: String, _ offset: Int) -> String {
            var bytes = streams[stream]!.ciphertext
            bytes[offset] ^= 1
            return Base64URL.encode(FileDigest(of: bytes).bytes)
        }
        let two = streams["two"]!.ciphertext.count, chunk2 = 24 + FileCipher.sealedChunkSize + 100
        let chunk4 = 24 + 3 * FileCipher.sealedChunkSize + 7
        return [
            vector("one chunk", "one", "ok"),
            vector("two chunks", "two", "ok"),
            vector("cut after chunk 1", "two", "file_truncated", ["truncate_to": 24 + FileCipher.sealedChunkSize]),
            vector("one byte short", "two", "file_truncated", ["truncate_to": two - 1]),
            vector("header only", "two", "file_truncated", ["truncate_to": 24]),
            vector("empty", "two", "file_truncated", ["truncate_to": 0]),
            vector("one byte more", "two", "file_bad_length", ["append": Base64URL.encode([0])]),
            vector("a chunk more, declared too", "two", "file_bad_length", ["size": two + FileCipher.sealedChunkSize]),
            vector("last chunk not final", "no_final", "file_truncated"),
            vector("chunk 2 altered, digest of the altered ciphertext", "two", "file_cannot_decrypt",
                   ["flip_byte": chunk2, "digest": flippedDigest("two", chunk2)]),
            vector("chunk 2 altered, digest of the original", "two", "file_digest_mismatch", ["flip_byte": chunk2]),
            vector("header altered, digest of the altered ciphertext", "two", "file_cannot_decrypt",
                   ["flip_byte": 3, "digest": flippedDigest("two", 3)]),
            vector("tag byte of chunk 1 altered, digest of the altered ciphertext", "two", "file_cannot_decrypt",
                   ["flip_byte": 24, "digest": flippedDigest("two", 24)]),
            vector("wrong digest", "one", "file_digest_mismatch", ["digest": Base64URL.encode(blake2b([], length: 32))]),
            vector("wrong key", "one", "file_cannot_decrypt", ["key": secretBase64(fileKey("two").bytes)]),
            vector("another plain_size of the same class", "two", "file_cannot_decrypt", ["plain_size": 100_001]),
            vector("plain_size 0, same class", "one", "file_cannot_decrypt", ["plain_size": 0]),
            vector("plain_size of another class", "two", "file_bad_length", ["plain_size": 40_000]),
            vector("plain_size -1", "one", "file_bad_length", ["plain_size": -1]),
            vector("plain_size over 2^40", "one", "file_bad_length", ["plain_size": (1 << 40) + 1]),
            vector("final chunk before the last", "early_final", "file_bad_tag"),
            vector("a tag the format never uses", "push_tag", "file_bad_tag"),
            vector("padding not zero", "dirty_pad", "file_bad_padding"),
            vector("padding not zero and chunk 4 altered: every chunk decrypts before the padding is judged", "dirty_pad",
                   "file_cannot_decrypt", ["flip_byte": chunk4, "digest": flippedDigest("dirty_pad", chunk4)]),
            vector("truncated and a wrong digest: the length decides", "two", "file_truncated",
                   ["truncate_to": two - FileCipher.sealedChunkSize, "digest": Base64URL.encode(blake2b([], length: 32))]),
        ]
    }

    // MARK: References

    static let referenceBlob = "Xq3v0Ck9m1Lr8sWbTn2pQA"

    /// An override that removes a member (NSNull writes a JSON null).
    static let absent = "\u{0}absent"

    /// A file reference as JSON members, for stream `two`, with `overrides`.
    static func referenceMembers(_ overrides: [String: Any] = [:]) -> [String: Any] {
        let ciphertext = fileStream("two", plainSize: 100_000)
        var members: [String: Any] = [
            "blob": referenceBlob, "key": secretBase64(fileKey("two").bytes), "digest": Base64URL.encode(FileDigest(of: ciphertext).bytes),
            "size": ciphertext.count, "plain_size": 100_000, "media_type": "application/octet-stream", "name": "two.bin",
        ]
        for (key, value) in overrides { members[key] = (value as? String) == absent ? nil : value }
        return members
    }

    static func fileBody(_ files: Any?, type: String = "file", text: String? = "look") -> String {
        var payload: [String: Any] = [:]
        if let files { payload["files"] = files }
        if let text { payload["text"] = text }
        let message: [String: Any] = ["payload": payload, "sender": ["id": "alice"], "timestamp": now * 1000, "type": type]
        let data = try! JSONSerialization.data(withJSONObject: message, options: [.sortedKeys, .withoutEscapingSlashes])
        return String(decoding: data, as: UTF8.self)
    }

    static func referenceCases() -> [[String: Any]] {
        func ok(_ name: String, _ body: String, canonical: Bool = true) -> [String: Any] {
            ["name": name, "body": body, "expect": "ok", "canonical": canonical]
        }
        func bad(_ name: String, _ body: String) -> [String: Any] { ["name": name, "body": body, "expect": "envelope_invalid_body"] }
        func one(_ overrides: [String: Any]) -> String { fileBody([referenceMembers(overrides)]) }
        let preview = ["media_type": "image/jpeg", "data": Base64URL.encode(filePlaintext(4096))]
        let maxSize = FileCipher.size(plainSize: 1 << 40)!
        let key31 = Base64URL.encode(Array(blake2b(Array("k".utf8), length: 32).prefix(31)))
        let keyText = secretBase64(fileKey("two").bytes)
        let nonCanonicalKey = String(keyText.dropLast()) + String(Array("BCDEFGHIJKLMNOPQRSTUVWXYZ".map(String.init)).first {
            Base64URL.decode(String(keyText.dropLast()) + $0) == nil
        }!)
        let media127 = "a" + String(repeating: "b", count: 126)
        return [
            ok("a file with every member", one(["preview": preview])),
            ok("the required members only, no caption", fileBody([referenceMembers(["name": absent])], text: nil)),
            ok("32 files", fileBody(Array(repeating: referenceMembers(), count: 32))),
            ok("files in a text message", fileBody([referenceMembers()], type: "text")),
            ok("blob id of 16 characters", one(["blob": "0123456789abcdef"])),
            ok("blob id of 64 characters", one(["blob": String(repeating: "A-_z", count: 16)])),
            ok("media_type of 255 bytes", one(["media_type": media127 + "/" + media127])),
            ok("media_type with every allowed character", one(["media_type": "Vnd.A-b_c+d!e#f$g&h^i/x.Y-1+2"])),
            ok("name of 255 bytes", one(["name": String(repeating: "é", count: 127) + "a"])),
            ok("preview of 4096 bytes", one(["preview": preview])),
            ok("plain_size 2^40", one(["plain_size": 1 << 40, "size": maxSize])),
            ok("plain_size 0", one(["plain_size": 0, "size": 65_577])),
            ok("an unknown member in a reference is ignored", one(["thumbhash": "x"]), canonical: false),
            ok("name null is absent", one(["name": NSNull()]), canonical: false),
            bad("a file message without files", fileBody(nil)),
            bad("files empty", fileBody([])),
            bad("33 files", fileBody(Array(repeating: referenceMembers(), count: 33))),
            bad("files not an array", fileBody(referenceMembers())),
            bad("a reference not an object", fileBody(["x"])),
            bad("a bad reference in a text message", fileBody([referenceMembers(["size": 1])], type: "text")),
            bad("blob id of 15 characters", one(["blob": "0123456789abcde"])),
            bad("blob id of 65 characters", one(["blob": String(repeating: "A", count: 65)])),
            bad("blob id with a dot", one(["blob": "0123456789abcdef.x"])),
            bad("blob missing", one(["blob": absent])),
            bad("key of 31 bytes", one(["key": key31])),
            bad("key with padding", one(["key": keyText + "="])),
            bad("key with non-canonical trailing bits", one(["key": nonCanonicalKey])),
            bad("key null", one(["key": NSNull()])),
            bad("digest of 33 bytes", one(["digest": Base64URL.encode(blake2b([], length: 33))])),
            bad("size one more than the plain size's", one(["size": 131_131])),
            bad("size of another class", one(["size": 65_577])),
            bad("plain_size -1", one(["plain_size": -1, "size": 65_577])),
            bad("plain_size 2^40 + 1", one(["plain_size": (1 << 40) + 1, "size": maxSize])),
            bad("plain_size a string", one(["plain_size": "100000"])),
            bad("plain_size with a fraction", one(["plain_size": 100_000.5])),
            bad("media_type empty", one(["media_type": ""])),
            bad("media_type without a subtype", one(["media_type": "video"])),
            bad("media_type with an empty subtype", one(["media_type": "video/"])),
            bad("media_type with parameters", one(["media_type": "text/plain;charset=utf-8"])),
            bad("media_type subtype starting with a dot", one(["media_type": "video/.mp4"])),
            bad("media_type of 256 bytes", one(["media_type": media127 + "/" + media127 + "c"])),
            bad("media_type subtype of 128 bytes", one(["media_type": "a/" + media127 + "c"])),
            bad("name empty", one(["name": ""])),
            bad("name of 256 bytes", one(["name": String(repeating: "é", count: 128)])),
            bad("preview of 4097 bytes", one(["preview": ["media_type": "image/jpeg", "data": Base64URL.encode(filePlaintext(4097))]])),
            bad("preview empty", one(["preview": ["media_type": "image/jpeg", "data": ""]])),
            bad("preview without media_type", one(["preview": ["data": "AAEC"]])),
            bad("preview media_type invalid", one(["preview": ["media_type": "jpeg", "data": "AAEC"]])),
            bad("preview data not base64url", one(["preview": ["media_type": "image/jpeg", "data": "AA=="]])),
        ]
    }

    static func fileVectors() -> [String: Any] {
        [
            "description": "Encrypted files and their references (spec/attachments.md). Byte i of every file is i mod 251. `sizes`: plain_size → padded_size and size (null: outside 0…2^40). `valid_sizes`: FileCipher.isValidSize. `sealed`: seal the file of plain_size bytes with `key`, starting the stream from `header` (crypto_secretstream init_pull with that header gives the state init_push would); the ciphertext has `size` bytes and BLAKE2b-256 `digest`, and opens to the file. `cases`: take stream `stream`, truncate it to `truncate_to` bytes, append `append`, flip bit 0 of byte `flip_byte`, then open it with key, digest, size and plain_size: `expect` is \"ok\" (the file) or the error code. `references`: chat message bodies: \"ok\" or the error code; a `canonical` body re-encodes to itself.",
            "plaintext": "byte i = i mod 251",
            "sizes": filePlainSizes.map { plain -> [String: Any] in
                ["plain_size": plain, "padded_size": FileCipher.paddedSize(plainSize: plain).map { $0 as Any } ?? NSNull(),
                 "size": FileCipher.size(plainSize: plain).map { $0 as Any } ?? NSNull()]
            },
            "valid_sizes": fileCiphertextSizes.map { ["size": $0, "valid": FileCipher.isValidSize($0)] },
            "sealed": fileSealedSizes.map { plain -> [String: Any] in
                let name = "sealed \(plain)"
                let stream = fileStream(name, plainSize: plain)
                return ["plain_size": plain, "key": secretBase64(fileKey(name).bytes), "header": Base64URL.encode(fileHeader(name)),
                        "size": stream.count, "digest": Base64URL.encode(FileDigest(of: stream).bytes)]
            },
            "streams": Dictionary(uniqueKeysWithValues: fileStreams().map { stream in
                (stream.name, ["plain_size": stream.plainSize, "construction": stream.construction, "key": secretBase64(fileKey(stream.name).bytes),
                               "header": Base64URL.encode(fileHeader(stream.name)), "ciphertext": Base64URL.encode(stream.ciphertext)] as [String: Any])
            }),
            "cases": fileCases(),
            "references": referenceCases(),
        ]
    }

    @Test func files() throws {
        if Self.writing { try Self.write("files.json", Self.fileVectors()) }
        let vectors = try Self.read("files.json")
        try Self.checkFiles(vectors)
        #expect(try Self.same(Self.fileVectors(), vectors), "files.json is what the generator makes")
    }

    /// The bytes of a base64url member; throws when it is missing or not base64url.
    static func vectorBytes(_ value: Any?) throws -> [UInt8] {
        try #require((value as? String).flatMap { Base64URL.decode($0) }, "a base64url member")
    }

    /// Every vector of files.json, through the in-memory opener and the one that writes to disk.
    static func checkFiles(_ vectors: [String: Any]) throws {
        for entry in try #require(vectors["sizes"] as? [[String: Any]]) {
            let plain = Int64(entry["plain_size"] as! Int)
            #expect(FileCipher.paddedSize(plainSize: plain).map { Int($0) } == entry["padded_size"] as? Int, "padded size of \(plain)")
            #expect(FileCipher.size(plainSize: plain).map { Int($0) } == entry["size"] as? Int, "size of \(plain)")
        }
        for entry in try #require(vectors["valid_sizes"] as? [[String: Any]]) {
            #expect(FileCipher.isValidSize(Int64(entry["size"] as! Int)) == entry["valid"] as? Bool, "isValidSize(\(entry["size"]!))")
        }
        for entry in try #require(vectors["sealed"] as? [[String: Any]]) {
            let plain = entry["plain_size"] as! Int
            let key = FileKey(bytes: SecretBytes(copying: try vectorBytes(entry["key"])))!
            let encryptor = try #require(FileEncryptor(key: key, plainSize: Int64(plain), header: try vectorBytes(entry["header"])))
            var source = ByteSource(filePlaintext(plain)), sink = ByteSink()
            let file = try FileCipher.encrypt(from: &source, with: encryptor, to: &sink)
            #expect(file.size == Int64(entry["size"] as! Int) && Int64(sink.bytes.count) == file.size, "sealed \(plain): size")
            #expect(file.digest.description == entry["digest"] as? String, "sealed \(plain): digest")
            #expect(try FileCipher.open(sink.bytes, file) == filePlaintext(plain), "sealed \(plain): opens to the file")
        }
        let streams = try #require(vectors["streams"] as? [String: [String: Any]])
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("mailslot-file-vectors-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let cases = try #require(vectors["cases"] as? [[String: Any]])
        #expect(cases.count >= 20)
        for (index, vector) in cases.enumerated() {
            let name = vector["name"] as! String, expect = vector["expect"] as! String
            var ciphertext = try vectorBytes(streams[vector["stream"] as! String]?["ciphertext"])
            if let cut = vector["truncate_to"] as? Int { ciphertext.removeSubrange(cut...) }
            if let more = vector["append"] as? String { ciphertext += try vectorBytes(more) }
            if let flip = vector["flip_byte"] as? Int { ciphertext[flip] ^= 1 }
            let file = SealedFile(key: FileKey(bytes: SecretBytes(copying: try vectorBytes(vector["key"])))!,
                                  digest: FileDigest(bytes: try vectorBytes(vector["digest"]))!,
                                  size: Int64(vector["size"] as! Int), plainSize: Int64(vector["plain_size"] as! Int))
            do {
                let opened = try FileCipher.open(ciphertext, file)
                #expect(expect == "ok", "\(name): opened, expected \(expect)")
                #expect(opened == filePlaintext(Int(file.plainSize)), "\(name): the file's bytes")
            } catch {
                #expect(error.code == expect, "\(name)")
            }
            // The same through the disk: the outcome, and no file under the name unless it opened.
            let input = folder.appendingPathComponent("case-\(index).enc"), output = folder.appendingPathComponent("case-\(index).bin")
            try Data(ciphertext).write(to: input)
            do {
                try FileCipher.decryptFile(at: input, file, to: output)
                #expect(expect == "ok", "\(name) on disk: opened, expected \(expect)")
                #expect(try Data(contentsOf: output) == Data(filePlaintext(Int(file.plainSize))), "\(name) on disk: the file's bytes")
            } catch {
                #expect((error as? FileError)?.code == expect, "\(name) on disk")
                #expect(!FileManager.default.fileExists(atPath: output.path), "\(name) on disk: nothing under the name")
            }
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path).allSatisfy { !$0.hasPrefix(".") }, "no temporary file left")
        let references = try #require(vectors["references"] as? [[String: Any]])
        for vector in references {
            let name = vector["name"] as! String, expect = vector["expect"] as! String
            let body = Array((vector["body"] as! String).utf8)
            do {
                let message = try ChatMessage.decode(body)
                #expect(expect == "ok", "reference '\(name)': accepted, expected \(expect)")
                if vector["canonical"] as? Bool == true { #expect(try message.encoded() == body, "reference '\(name)' re-encodes to itself") }
            } catch {
                #expect(error.code == expect, "reference '\(name)'")
            }
        }
    }
}
