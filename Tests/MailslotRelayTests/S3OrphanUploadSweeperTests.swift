import Foundation
import MailslotTestSupport
import NIOHTTP1
import Synchronization
import Testing
@testable import MailslotRelay

/// The sweeper of orphan multipart uploads (issue 27) against a fake endpoint that keeps a list
/// of uploads and forgets those aborted, with the blob rows in an SQLite store: which uploads it
/// aborts (only old ones under the blobs' prefix whose storage key no row names), paging, its
/// bounds and its period. (S3BlobStorageTests.orphanUploadsAreAbortedOnARealServer runs it
/// against rclone.)
@Suite struct S3OrphanUploadSweeperTests {
    /// The fake store's upload list: object key, upload id, `Initiated`.
    final class Uploads: Sendable {
        let state: Mutex<[(key: String, id: String, initiated: String)]>
        let aborted = Mutex<[String]>([])
        let pageSize: Int

        init(_ uploads: [(key: String, id: String, initiated: String)], pageSize: Int) {
            state = Mutex(uploads)
            self.pageSize = pageSize
        }

        /// The answer to a list (`GET ?uploads`, from `key-marker`/`upload-id-marker`) or an abort (`DELETE ?uploadId=`).
        func answer(_ head: HTTPRequestHead) -> FakeS3.Answer {
            let components = URLComponents(string: head.uri)
            let query = Dictionary((components?.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { a, _ in a })
            if head.method == .DELETE, let id = query["uploadId"] {
                aborted.withLock { $0.append(id) }
                state.withLock { $0.removeAll { $0.id == id } }
                return .init(.noContent)
            }
            guard head.method == .GET, query["uploads"] != nil else { return .init(.badRequest) }
            // As S3 lists: by key, then upload id; after the markers; at most max-uploads.
            let all = state.withLock { $0 }.sorted { ($0.key, $0.id) < ($1.key, $1.id) }
            let after = all.filter { upload in
                guard let key = query["key-marker"] else { return true }
                guard let id = query["upload-id-marker"] else { return upload.key > key }
                return (upload.key, upload.id) > (key, id)
            }
            let size = min(pageSize, Int(query["max-uploads"] ?? "") ?? 1000)
            let page = Array(after.prefix(size))
            let truncated = after.count > size
            return .init(.ok, body: S3ClientAnswerTests.uploadList(page.map { ($0.key, $0.id, $0.initiated) }, truncated: truncated,
                                                                    nextKey: truncated ? page.last?.key : nil, nextID: truncated ? page.last?.id : nil))
        }
    }

    /// A clock the test moves (milliseconds).
    final class TestClock: Sendable {
        let value: Mutex<Int64>
        init(_ value: Int64) { self.value = Mutex(value) }
        func read() -> Int64 { value.withLock { $0 } }
        func advance(_ milliseconds: Int64) { value.withLock { $0 += milliseconds } }
    }

    typealias Outcome = S3OrphanUploadSweeper.Outcome

    /// 2026-11-26T20:48:33Z, in milliseconds.
    static let then: Int64 = 1_795_726_113_000
    static let old = "2026-11-26T20:48:33.000Z"

    static func key(_ n: Int) -> String { String(repeating: String(n), count: 32) }

    /// Runs `body` with a sweeper over a fake store holding `uploads` and an SQLite store in which
    /// blobs with the storage keys `owned` exist; the clock reads `clock`.
    static func withSweeper(_ uploads: Uploads, owned: [String], clock: TestClock, limits: S3OrphanUploadSweeper.Limits,
                            _ body: (S3OrphanUploadSweeper) async throws -> Void) async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("orphans-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let store = try SQLiteStore(path: folder.appendingPathComponent("relay.sqlite").path)
        for (n, key) in owned.enumerated() {
            let blob = NewBlob(id: "blob-owned-\(n)-000000", author: "alice", size: 3000, partSize: 1024, parts: 3, storageKey: key,
                               ttlSeconds: 60, uploadExpiresAt: then + 86_400_000, recipients: ["bob"])
            let outcome = try await store.createBlob(blob, limits: BlobLimits(maxAuthorBytes: 1 << 40, maxUploading: 100), now: then)
            guard case .created = outcome else { Issue.record("\(blob.id) was not created"); return }
        }
        try await FakeS3.with({ uploads.answer($0) }) { client, _ in
            let storage = try S3BlobStorage(client: client, dataDirectory: folder.path, minFreeBytes: 0, logger: TestRelay.logger)
            try await body(S3OrphanUploadSweeper(storage: storage, records: store, clock: { clock.read() }, limits: limits))
        }
    }

    /// Only an upload under `blobs/<storage key>` that no row names and that is older than the
    /// grace period is aborted: not one a blob owns (uploading or not), not a fresh one (another
    /// relay's create racing the listing could look like it), not one without a start time, not
    /// a key of another form. Every page is read.
    @Test func onlyOldUnownedUploadsAreAborted() async throws {
        let uploads = Uploads([
            ("blobs/\(Self.key(1))", "orphan-1", Self.old),
            ("blobs/\(Self.key(2))", "owned", Self.old),
            ("blobs/\(Self.key(3))", "fresh", "2026-11-26T22:30:00Z"),
            ("blobs/\(Self.key(4))", "no-time", "yesterday"),
            ("blobs/not-a-storage-key", "foreign", Self.old),
            ("blobs/\(Self.key(5))/x", "nested", Self.old),
            ("blobs/\(Self.key(6))", "orphan-2", Self.old),
        ], pageSize: 2)
        let clock = TestClock(Self.then + 2 * 3_600_000)  // 22:48:33
        try await Self.withSweeper(uploads, owned: [Self.key(2)], clock: clock, limits: S3OrphanUploadSweeper.Limits()) { sweeper async throws in
            let outcome = try await sweeper.sweep()
            #expect(outcome == Outcome(listed: 7, aborted: 2, capped: false))
            #expect(uploads.aborted.withLock { $0 } == ["orphan-1", "orphan-2"])
            // The grace period is measured from the store's start time: an hour later the fresh one goes too.
            clock.advance(3_600_000)
            #expect(try await sweeper.sweep() == Outcome(listed: 5, aborted: 1, capped: false))
            #expect(uploads.aborted.withLock { $0 } == ["orphan-1", "orphan-2", "fresh"])
        }
    }

    /// A pass aborts at most `maxAborted` and lists at most `maxListed`; the next goes on where
    /// it stopped, and one that reached the end starts over.
    @Test func passesAreBounded() async throws {
        let uploads = Uploads((1...5).map { ("blobs/\(Self.key($0))", "orphan-\($0)", Self.old) }, pageSize: 2)
        let clock = TestClock(Self.then + 2 * 3_600_000)
        var limits = S3OrphanUploadSweeper.Limits()
        limits.maxAborted = 3
        try await Self.withSweeper(uploads, owned: [], clock: clock, limits: limits) { sweeper async throws in
            #expect(try await sweeper.sweep() == Outcome(listed: 4, aborted: 3, capped: true))
            #expect(uploads.aborted.withLock { $0 } == ["orphan-1", "orphan-2", "orphan-3"])
            #expect(try await sweeper.sweep() == Outcome(listed: 2, aborted: 2, capped: false))
            #expect(uploads.aborted.withLock { $0 }.count == 5)
        }
        let many = Uploads((1...5).map { ("blobs/\(Self.key($0))", "owned-\($0)", Self.old) }, pageSize: 2)
        limits = S3OrphanUploadSweeper.Limits()
        limits.maxListed = 3
        try await Self.withSweeper(many, owned: (1...5).map { Self.key($0) }, clock: clock, limits: limits) { sweeper async throws in
            #expect(try await sweeper.sweep() == Outcome(listed: 3, aborted: 0, capped: true))
            #expect(try await sweeper.sweep() == Outcome(listed: 2, aborted: 0, capped: false))
            #expect(try await sweeper.sweep() == Outcome(listed: 3, aborted: 0, capped: true))
        }
    }

    /// From the eraser: a pass at the first call (the relay's start), then none until the
    /// interval has passed.
    @Test func passesRunAtStartThenHourly() async throws {
        let uploads = Uploads([("blobs/\(Self.key(1))", "orphan-1", Self.old)], pageSize: 10)
        let clock = TestClock(Self.then + 2 * 3_600_000)
        try await Self.withSweeper(uploads, owned: [], clock: clock, limits: S3OrphanUploadSweeper.Limits()) { sweeper async throws in
            await sweeper.passIfDue(logger: TestRelay.logger)
            #expect(uploads.aborted.withLock { $0 } == ["orphan-1"])
            uploads.state.withLock { $0.append(("blobs/\(Self.key(2))", "orphan-2", Self.old)) }
            clock.advance(3_599_000)
            await sweeper.passIfDue(logger: TestRelay.logger)
            #expect(uploads.aborted.withLock { $0 } == ["orphan-1"])
            clock.advance(1000)
            await sweeper.passIfDue(logger: TestRelay.logger)
            #expect(uploads.aborted.withLock { $0 } == ["orphan-1", "orphan-2"])
        }
    }
}
