import Foundation
import Logging
import MailslotAudit
import MailslotTestSupport
import NIOCore
import Synchronization
import Testing
@testable import MailslotRelay
import MailslotWire

/// How blob bodies travel: `100 Continue`, bodies refused for their declared size before they are
/// read, part bodies streamed to disk through one buffer, the bound on transfers per uid, and
/// the free-space watermark (new uploads refused, downloads and acknowledgements going on).
@Suite struct BlobTransferTests {
    /// A raw part upload's head.
    static func partHead(_ blob: TestBlob, _ number: Int, session: String?, length: String? = nil, extra: String = "") -> String {
        var head = "PUT /v1/blobs/\(blob.id)/parts/\(number) HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\n"
        if let session { head += "Authorization: Bearer \(session)\r\n" }
        head += "Mailslot-Digest: \(blob.digest(number))\r\n"
        if let length { head += "Content-Length: \(length)\r\n" }
        return head + extra + "\r\n"
    }

    @Test func expectContinueIsAnsweredAtOnce() async throws {
        try await withTestRelay(configure: BlobTests.smallParts) { relay in
            let alice = try await relay.signIn("alice").session
            let blob = TestBlob(plainSize: 1_500_000)
            #expect(try await relay.call("POST", "/v1/blobs", session: alice, body: blob.create(["bob"])).status == 201)
            let connection = try RawConnection(port: relay.port)
            connection.send(Self.partHead(blob, 1, session: alice, length: String(blob.part(1).count), extra: "Expect: 100-continue\r\n"))
            // Within half a second: a client waiting for it would otherwise wait its own timeout (curl: 1 s).
            let interim = await connection.receive(attempts: 1)
            #expect(interim?.hasPrefix("HTTP/1.1 100 Continue\r\n") == true, "\(interim ?? "nothing")")
            #expect(await connection.send(bytes: blob.part(1)))
            #expect(await connection.status() == 200)
        }
    }

    /// curl sends `Expect: 100-continue` with a large `PUT` and waits a second for the answer
    /// before sending the body anyway: with the relay's `100 Continue` it does not wait.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/curl"), "no curl here"))
    func curlUploadsAPartWithoutWaiting() async throws {
        try await withTestRelay(configure: { $0.blobPartBytes = 2 << 20 }) { relay in
            let alice = try await relay.signIn("alice").session
            let blob = TestBlob(plainSize: 3_000_000, partSize: 2 << 20)
            #expect(try await relay.call("POST", "/v1/blobs", session: alice, body: blob.create(["bob"])).status == 201)
            let file = relay.folder + "/part1"
            try Data(blob.part(1)).write(to: URL(fileURLWithPath: file))
            let result = try await ProcessRunner.run(URL(fileURLWithPath: "/usr/bin/curl"), [
                "-sS", "-v", "-o", "/dev/null", "-w", "%{http_code}", "-T", file,
                "-H", "Authorization: Bearer \(alice)", "-H", "Content-Type: application/octet-stream",
                "-H", "Mailslot-Digest: \(blob.digest(1))", "\(relay.url.absoluteString)/v1/blobs/\(blob.id)/parts/1",
            ])
            let fields = result.stdout.split(separator: " ")
            #expect(fields.first == "200", "\(result.stdout) \(result.stderr.suffix(400))")
            #expect(result.stderr.contains("Expect: 100-continue") && result.stderr.contains("HTTP/1.1 100 Continue"))
            // curl says so when its wait for the interim answer ran out (a time would be a timed assertion).
            #expect(!result.stderr.contains("Done waiting for 100-continue"), "curl waited for a 100 Continue: \(result.stdout)")
        }
    }

    @Test func aBodyLargerThanAnyRouteTakesIsRefusedBeforeItIsRead() async throws {
        // Parts and sends to many of 1 MiB at most, so that a part of 1 MiB + 1 byte is larger
        // than any route takes.
        try await withTestRelay(configure: { BlobTests.smallParts(&$0); $0.maxBatchBytes = 1 << 20 }) { relay in
            let alice = try await relay.signIn("alice").session
            let blob = TestBlob(plainSize: 1_500_000)
            #expect(relay.relay.configuration.maxRequestBodyBytes == 1 << 20)
            for head in [Self.partHead(blob, 1, session: nil, length: "10000000000"),
                         "POST /v1/blobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(alice)\r\nContent-Type: application/json\r\nContent-Length: 10000000000\r\n\r\n",
                         Self.partHead(blob, 1, session: alice, length: String((1 << 20) + 1), extra: "Expect: 100-continue\r\n")] {
                let connection = try RawConnection(port: relay.port)
                connection.send(head)
                await connection.send(bytes: [UInt8](repeating: 7, count: 64 * 1024))
                let answer = await connection.receive(attempts: 4) ?? ""
                #expect(answer.hasPrefix("HTTP/1.1 413 "), "\(answer.prefix(60))")
                #expect(answer.contains("\"code\":\"body_too_large\""))
                #expect(!answer.contains("100 Continue"), "no one is invited to send what is refused")
                // Then the relay closes, rather than reading 10 GB.
                var closed = false
                for _ in 0..<10 where !closed {
                    await connection.send(bytes: [UInt8](repeating: 7, count: 64 * 1024))
                    closed = await connection.receive(attempts: 1) == ""
                }
                #expect(closed, "the connection was closed after the answer")
            }
            // Chunked part bodies are refused: the part's length must be declared.
            let chunked = try RawConnection(port: relay.port)
            #expect(try await relay.call("POST", "/v1/blobs", session: alice, body: blob.create(["bob"])).status == 201)
            chunked.send(Self.partHead(blob, 1, session: alice, extra: "Transfer-Encoding: chunked\r\n") + "5\r\nhello\r\n0\r\n\r\n")
            let answer = await chunked.receive(attempts: 4) ?? ""
            #expect(answer.hasPrefix("HTTP/1.1 411 ") && answer.contains("length_required"), "\(answer.prefix(60))")
        }
    }

    @Test func transfersPerUIDAreBounded() async throws {
        try await withTestRelay(configure: { $0.maxTransfersPerUID = 1 }) { relay in
            let alice = try await relay.signIn("alice").session
            let bob = try await relay.signIn("bob").session
            let blob = TestBlob(plainSize: 16 << 20, partSize: 8 << 20)
            try await relay.uploadBlob(blob, session: alice, to: ["bob"])
            // A download whose reader does not read holds its transfer.
            var slow: RawConnection? = try RawConnection(port: relay.port, receiveBuffer: 4096)
            slow?.send("GET /v1/blobs/\(blob.id)/content HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(bob)\r\n\r\n")
            // Once the relay serves it (its transfer is held; asked without a request of Bob's,
            // which could take the one permit first), Bob's next download is refused.
            try await eventually("the slow download holds bob's transfer") { relay.relay.blobs.transfers.count("bob") == 1 }
            let refused = try await relay.call("GET", "/v1/blobs/\(blob.id)/content", session: bob)
            #expect(refused.problem == .tooManyTransfers && refused.headers["retry-after"] == "1")
            #expect(try await relay.call("GET", "/v1/blobs/\(blob.id)/content", session: alice).status == 200, "another uid's are its own")
            slow = nil
            try await eventually("the transfer ends with its connection") {
                try await relay.call("GET", "/v1/blobs/\(blob.id)/content", session: bob, headers: ["Range": "bytes=0-9"]).status == 206
            }
        }
    }

    @Test func belowTheWatermarkNewUploadsAreRefusedDownloadsGoOn() async throws {
        let free = Atomic<Int64>(1 << 40)
        try await withTestRelay(configure: { configuration in
            BlobTests.smallParts(&configuration)
            configuration.minFreeBytes = 64 << 20
            configuration.diskSpaceProbe = { _ in free.load(ordering: .relaxed) }
        }) { relay in
            let alice = try await relay.signIn("alice").session
            let bob = try await relay.signIn("bob").session
            let done = TestBlob(plainSize: 1_500_000)
            try await relay.uploadBlob(done, session: alice, to: ["bob"])
            let started = TestBlob(plainSize: 1_500_000)
            #expect(try await relay.call("POST", "/v1/blobs", session: alice, body: started.create(["bob"])).status == 201)
            free.store((64 << 20) + 1000, ordering: .relaxed)
            let refused = try await relay.call("POST", "/v1/blobs", session: alice, body: TestBlob(plainSize: 1_500_000).create(["bob"]))
            #expect(refused.status == 507 && refused.problem == .storageFull && refused.headers["retry-after"] == "60")
            #expect(relay.blobFiles.count == 2, "nothing kept of the refused create")
            // Their room is reserved already: parts of a started upload, downloads, acks go on.
            #expect(try await relay.putPart(started, 1, session: alice).status == 200)
            let download = try await relay.call("GET", "/v1/blobs/\(done.id)/content", session: bob)
            #expect(download.status == 200 && [UInt8](download.body) == done.bytes)
            #expect(try await relay.call("POST", "/v1/blobs/\(done.id)/ack", session: bob).status == 204)
            free.store(1 << 40, ordering: .relaxed)
            #expect(try await relay.call("POST", "/v1/blobs", session: alice, body: TestBlob(plainSize: 1000).create(["bob"])).status == 201)
        }
    }

    /// A part of 16 MiB goes to the file as it arrives: whenever the body is asked for more, all
    /// but the last two chunks of what it gave (the one being written, the one being collected:
    /// 1 MiB, ``PartStream``) is on disk already. Relay memory per upload is those two chunks,
    /// whatever the part or file size.
    @Test func aPartStreamsToDiskThroughOneBuffer() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("blobs-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let storage = try FileBlobStorage(directory: folder)
        let key = BlobService.newStorageKey()
        let length = 16 << 20
        let path = storage.path(of: key)!
        let lagging = Atomic<Int>(0)
        let body = PatternBody(length: length, piece: 64 << 10) { given in
            // Everything given but the buffer's worth must be in the file already.
            let mustBeWritten = given - 2 * PartStream.chunkBytes
            guard mustBeWritten > 0 else { return }
            let handle = FileHandle(forReadingAtPath: path)
            defer { try? handle?.close() }
            try? handle?.seek(toOffset: UInt64(mustBeWritten - 1))
            if handle?.readData(ofLength: 1).first != PatternBody.byte(mustBeWritten - 1) { lagging.add(1, ordering: .relaxed) }
        }
        let whole = PatternBody.bytes(0..<length)
        let digest = blake2b(whole, length: 32)
        _ = try await storage.begin(key: key, size: Int64(length))
        do {
            _ = try await storage.writePart(key: key, upload: nil, number: 1, offset: 0, length: Int64(length), digest: digest, body: body)
        } catch {
            Issue.record("the part was refused: \(error)")
        }
        #expect(lagging.load(ordering: .relaxed) == 0, "the body was held rather than written as it came")
        #expect(FileManager.default.contents(atPath: path).map { [UInt8]($0) == whole } == true)
        // The wrong digest: refused, after the same streaming.
        var wrong = digest
        wrong[0] ^= 1
        await #expect(throws: BlobStorageFailure.digestMismatch) {
            _ = try await storage.writePart(key: key, upload: nil, number: 1, offset: 0, length: Int64(length), digest: wrong,
                                            body: PatternBody(length: length, piece: 64 << 10) { _ in })
        }
        await #expect(throws: BlobStorageFailure.shortBody) {
            _ = try await storage.writePart(key: key, upload: nil, number: 1, offset: 0, length: Int64(length) + 1, digest: digest,
                                            body: PatternBody(length: length, piece: 64 << 10) { _ in })
        }
        try await storage.erase(key: key, upload: nil)
        #expect(!FileManager.default.fileExists(atPath: path))
        try await storage.erase(key: key, upload: nil)  // idempotent
        #expect(storage.path(of: "../../etc/passwd") == nil)
    }
}

/// A body of `length` bytes (byte i = i mod 251 + 1) in pieces, calling `asked` with the bytes
/// given so far each time the next piece is asked for.
struct PatternBody: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let length: Int
    let piece: Int
    let asked: @Sendable (Int) -> Void

    static func byte(_ index: Int) -> UInt8 { UInt8(index % 251 + 1) }

    /// The bytes at `range` of the pattern, built a cycle at a time (a byte at a time is slow
    /// in a debug build).
    static func bytes(_ range: Range<Int>) -> [UInt8] {
        let cycle = (0..<251).map { UInt8($0 + 1) }
        var bytes = Array(cycle[(range.lowerBound % 251)...])
        while bytes.count < range.count { bytes += cycle }
        return Array(bytes.prefix(range.count))
    }

    struct AsyncIterator: AsyncIteratorProtocol {
        let body: PatternBody
        var given = 0

        mutating func next() async throws -> ByteBuffer? {
            body.asked(given)
            guard given < body.length else { return nil }
            let count = Swift.min(body.piece, body.length - given)
            let buffer = ByteBuffer(bytes: PatternBody.bytes(given..<(given + count)))
            given += count
            return buffer
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(body: self) }
}

/// The blob settings of `mailslot-relay serve` and the store they choose.
@Suite struct BlobConfigurationTests {
    @Test func blobSettingsAndTheirBounds() throws {
        let defaults = try RelayConfiguration(flags: [:], environment: [:])
        #expect(defaults.maxFileBytes == Int64(100 << 20))
        #expect(defaults.maxAuthorBlobBytes == Int64(2 << 30))
        #expect(defaults.blobPartBytes == Int64(8 << 20))
        #expect(defaults.blobStore == .files)
        #expect(defaults.maxRequestBodyBytes == 8 << 20)
        let large = try RelayConfiguration(flags: ["max-file-bytes": String(64 << 30), "max-author-blob-bytes": String(65 << 30)],
                                           environment: ["MAILSLOT_BLOB_STORE": "files"])
        #expect(large.maxFileBytes == 64 << 30)
        let gib: Int64 = 1 << 30, mib: Int64 = 1 << 20
        let refused: [[String: String]] = [
            ["max-file-bytes": "0"], ["max-file-bytes": String(64 * gib + 1)], ["blob-part-bytes": String(mib - 1)],
            ["max-file-bytes": String(4 * gib)],  // sealed, more than an author's 2 GiB
            ["max-blob-recipients": "10001"], ["blob-upload-ttl": "59"],
            ["max-file-bytes": String(64 * gib), "max-author-blob-bytes": String(65 * gib), "blob-part-bytes": String(mib)],  // > 10 000 parts
            ["blob-store": "ftp://x"],
        ]
        for flags in refused {
            #expect(throws: RelayConfigurationError.self, "\(flags)") { try RelayConfiguration(flags: flags, environment: [:]) }
        }
        #expect(try RelayConfiguration(flags: ["max-file-bytes": String(1 << 30)], environment: [:]).maxFileBytes == 1 << 30)
    }

    @Test func anS3StoreIsReadAndItsCredentialsComeFromTheEnvironment() throws {
        let url = "s3://mailslot-test?endpoint=http://127.0.0.1:9000&path_style=true"
        var configuration = try RelayConfiguration(flags: ["blob-store": url], environment: [:])
        #expect(configuration.blobStore == .s3(url))
        do {
            let error = try #require(throws: RelayConfigurationError.self) {
                try RelayConfiguration(flags: ["blob-store": "s3://AKIDEXAMPLE:wJalrXUtnFEMI@bucket?endpoint=http://127.0.0.1:9000"], environment: [:])
            }
            #expect(!error.description.contains("wJalrXUtnFEMI") && !error.description.contains("AKIDEXAMPLE"), "credentials are never echoed")
        }
        // S3 refuses parts under 5 MiB but the last: so does the configuration, with S3 only.
        #expect(throws: RelayConfigurationError.self) {
            try RelayConfiguration(flags: ["blob-store": url, "blob-part-bytes": String((5 << 20) - 1)], environment: [:])
        }
        #expect(try RelayConfiguration(flags: ["blob-store": url, "blob-part-bytes": String(5 << 20)], environment: [:]).blobPartBytes == 5 << 20)
        #expect(try RelayConfiguration(flags: ["blob-part-bytes": String(1 << 20)], environment: [:]).blobPartBytes == 1 << 20)

        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("s3-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: folder) }
        configuration.dataDirectory = folder
        configuration.issuerKeys = [IdentityKeyPair().publicKey]
        configuration.credentialEnvironment = { [:] }
        let error = try #require(throws: RelayConfigurationError.self) { try Relay(configuration: configuration, logger: TestRelay.logger) }
        #expect(error.description.contains("AWS_ACCESS_KEY_ID"), "\(error)")
        // With credentials the relay is made (and, never run, its object-store client is let go cleanly).
        configuration.credentialEnvironment = { ["AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret"] }
        _ = try Relay(configuration: configuration, logger: TestRelay.logger)
    }

    /// What `serve` warns about: an object store reached in the clear off this machine.
    @Test func configurationWarnings() throws {
        var configuration = try RelayConfiguration(flags: [:], environment: [:])
        #expect(ConfigurationCheck.warnings(configuration).isEmpty)
        configuration.blobStore = .s3("s3://bucket?endpoint=http://127.0.0.1:9000")
        #expect(ConfigurationCheck.warnings(configuration).isEmpty)
        configuration.blobStore = .s3("s3://bucket?endpoint=http://minio.internal:9000")
        #expect(ConfigurationCheck.warnings(configuration).first?.contains("minio.internal") == true)
        configuration.blobStore = .s3("s3://bucket?endpoint=https://minio.internal")
        #expect(ConfigurationCheck.warnings(configuration).isEmpty)
    }
}
