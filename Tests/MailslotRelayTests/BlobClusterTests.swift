import Foundation
import MailslotTestSupport
import MailslotWire
import Testing
@testable import MailslotRelay

/// Two relays over one PostgreSQL database and one S3 bucket (issue 27, "Done when"): a blob
/// uploaded through one is downloaded through the other, and erased — rows and object — after
/// the last recipient's acknowledgement, wherever it lands. Runs under both `tools/postgres run`
/// and `tools/s3 run` (tools/test nests them); skipped otherwise.
@Suite(.serialized) struct BlobClusterTests {
    static let environment = ProcessInfo.processInfo.environment
    static let serverless: String? = TestDatabase.unavailable ?? (S3ClientTests.hasServer ? nil : S3BlobStorageTests.skipReason)
    static let skipReason = serverless ?? ""

    /// Two relays on a new database, storing blobs under a prefix of their own in the test bucket
    /// (5 MiB parts: S3's smallest). `body` gets the relays and the folder rclone keeps the
    /// prefix's objects in.
    func withTwoRelays(_ body: (TestRelay, TestRelay, String) async throws -> Void) async throws {
        let server = try #require(S3ClientTests.serverURL)
        let prefix = "cluster-\(S3BlobStorageTests.newKey())"
        let query = try #require(server.firstIndex(of: "?"))
        let store = server[..<query] + "/" + prefix + server[query...]
        let location = try S3Location(String(store))
        let objects = try #require(Self.environment["MAILSLOT_TEST_S3_DATA"]) + "/\(location.bucket)/\(prefix)"
        try await withTestRelay(store: .cluster(2), configure: {
            $0.blobStore = .s3(String(store))
            $0.blobPartBytes = RelayConfiguration.minS3PartBytes
        }) { a in
            try await body(a, a.peers[0], objects)
        }
    }

    /// The regular files rclone keeps under `folder` (objects, and unfinished uploads' temporary files).
    static func files(under folder: String) -> [String] {
        guard let walker = FileManager.default.enumerator(atPath: folder) else { return [] }
        return walker.compactMap { $0 as? String }.filter { path in
            var isFolder: ObjCBool = false
            return FileManager.default.fileExists(atPath: folder + "/" + path, isDirectory: &isFolder) && !isFolder.boolValue
        }
    }

    /// Parts through both relays, downloads through both (whole and across the part boundary),
    /// acknowledgements through both: after the last, no row on the shared database, no object in
    /// the bucket and nothing in either relay's spool. An unfinished upload deleted by its author
    /// through the other relay is aborted and leaves nothing either.
    @Test(.enabled(if: BlobClusterTests.serverless == nil, Comment(rawValue: BlobClusterTests.skipReason)))
    func uploadedThroughOneDownloadedThroughTheOtherErasedAfterTheLastAck() async throws {
        try await withTwoRelays { a, b, objects in
            let alice = try await a.signIn("alice").session
            let bobOnB = try await b.signIn("bob").session
            let carolOnA = try await a.signIn("carol").session
            let carolOnB = try await b.signIn("carol").session
            let blob = TestBlob(plainSize: 6_000_000, partSize: Int(RelayConfiguration.minS3PartBytes))
            #expect(blob.parts == 2)

            let created = try await a.call("POST", "/v1/blobs", session: alice, body: blob.create(["bob", "carol"]))
            #expect(created.status == 201, "\(created.text)")
            #expect(try await a.putPart(blob, 2, session: alice).status == 200)
            let aliceOnB = try await b.signIn("alice").session
            let last = try await b.putPart(blob, 1, session: aliceOnB)
            #expect(last.status == 200 && last.json["state"] as? String == "complete", "completed through the other relay: \(last.text)")
            #expect(Self.files(under: objects).count == 1, "one object: \(Self.files(under: objects))")

            let whole = try await b.call("GET", "/v1/blobs/\(blob.id)/content", session: bobOnB)
            #expect(whole.status == 200 && [UInt8](whole.body) == blob.bytes, "downloaded whole through B")
            let boundary = blob.partSize
            let ranged = try await a.call("GET", "/v1/blobs/\(blob.id)/content", session: carolOnA,
                                          headers: ["Range": "bytes=\(boundary - 100)-\(boundary + 99)"])
            #expect(ranged.status == 206 && [UInt8](ranged.body) == Array(blob.bytes[(boundary - 100)..<(boundary + 100)]))

            #expect(try await a.call("POST", "/v1/blobs/\(blob.id)/ack", session: try await a.signIn("bob").session).status == 204)
            #expect(Self.files(under: objects).count == 1, "kept for the recipient still to acknowledge")
            #expect(try await b.call("GET", "/v1/blobs/\(blob.id)/content", session: carolOnB).status == 200)
            #expect(try await b.call("POST", "/v1/blobs/\(blob.id)/ack", session: carolOnB).status == 204)
            #expect(try await a.call("GET", "/v1/blobs/\(blob.id)", session: alice).status == 404)
            try await eventually("the object is erased: \(Self.files(under: objects))") { Self.files(under: objects).isEmpty }
            for relay in [a, b] {
                let records = relay.relay.blobs.records
                #expect(try await records.blob(id: blob.id, now: EpochMilliseconds.now()) == .none)
                try await eventually("the erasure is done") { try await records.blobErasures(limit: 10).isEmpty }
            }

            // An unfinished upload, deleted by its author through the other relay: aborted, nothing left.
            let unfinished = TestBlob(plainSize: 6_000_000, partSize: Int(RelayConfiguration.minS3PartBytes))
            #expect(try await a.call("POST", "/v1/blobs", session: alice, body: unfinished.create(["bob"])).status == 201)
            #expect(try await a.putPart(unfinished, 1, session: alice).status == 200)
            #expect(try await b.call("DELETE", "/v1/blobs/\(unfinished.id)", session: aliceOnB).status == 204)
            let records = b.relay.blobs.records
            try await eventually("the abort is done") { try await records.blobErasures(limit: 10).isEmpty }
            try await eventually("no object or upload left: \(Self.files(under: objects))") { Self.files(under: objects).isEmpty }
            let usage = try await records.blobUsage(author: "alice")
            #expect(usage.bytes == 0 && usage.uploading == 0)
            for relay in [a, b] {
                let spool = relay.dataDirectory + "/spool"
                #expect(((try? FileManager.default.contentsOfDirectory(atPath: spool)) ?? []).isEmpty, "the spool is empty")
            }
        }
    }
}
