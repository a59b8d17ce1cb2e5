import Foundation
import MailslotCrypto
import MailslotTestSupport
import Testing
@testable import MailslotRelay

/// Upload lost when the store restarts: rclone keeps unfinished uploads in memory. Its own suite in
/// a file of its own, run on its own after the other S3 suites (tools/test): the restart loses every
/// unfinished upload on the server, so run beside them it broke their calls (swift test's `--filter
/// S3BlobStorageTests` also selects the tests of a file of that name, so it stays out of that file).
@Suite(.serialized) struct S3BlobStorageRestartTests {
    static let canRestart = S3ClientTests.hasServer && ProcessInfo.processInfo.environment["MAILSLOT_TEST_S3_RESTART"] != nil

    /// After a restart, a part of an upload begun before, and its completion, find the upload
    /// lost (410 for the service: the client starts over); a completed blob is still there, and
    /// the lost upload can still be erased.
    @Test(.enabled(if: S3BlobStorageRestartTests.canRestart, Comment(rawValue: S3BlobStorageTests.skipReason)))
    func uploadLostAfterRestart() async throws {
        try await S3BlobStorageTests.withStorage { storage in
            let done = S3BlobStorageTests.newKey(), whole = randomBytes(120_000)
            let doneUpload = try await storage.begin(key: done, size: Int64(whole.count))
            let donePart = try await S3BlobStorageTests.write(storage, done, doneUpload, whole, partSize: whole.count, number: 1)
            try await storage.complete(key: done, upload: doneUpload, parts: [donePart])

            let key = S3BlobStorageTests.newKey()
            let upload = try await storage.begin(key: key, size: Int64(whole.count))
            let part = try await S3BlobStorageTests.write(storage, key, upload, whole, partSize: 100_000, number: 1)

            let command = try #require(ProcessInfo.processInfo.environment["MAILSLOT_TEST_S3_RESTART"])
            let restart = try await ProcessRunner.run(URL(fileURLWithPath: "/bin/sh"), ["-c", command])
            #expect(restart.status == 0, "restart: \(restart.stderr)")

            await #expect(throws: BlobStorageFailure.uploadLost) {
                try await S3BlobStorageTests.write(storage, key, upload, whole, partSize: 100_000, number: 2)
            }
            await #expect(throws: BlobStorageFailure.uploadLost) { try await storage.complete(key: key, upload: upload, parts: [part]) }
            #expect(try await S3BlobStorageTests.read(storage, done, 0..<Int64(whole.count)).bytes == whole)
            try await storage.erase(key: key, upload: upload)
            try await storage.erase(key: done, upload: nil)
        }
    }
}
