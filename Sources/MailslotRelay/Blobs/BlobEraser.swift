import Logging
import ServiceLifecycle

/// Removes the bytes of erased blobs from the storage (docs/design/attachments.md §3.5). Every
/// erasure — the last acknowledgement, the author's delete, expiry — deletes the blob's rows and
/// queues its storage key in one transaction; this service sweeps expired blobs into that queue,
/// erases each queued key from the storage, then forgets it. It runs every `interval` seconds,
/// and at once when woken (``wake()``) after an acknowledgement or a delete erased something.
/// Erasing is idempotent, so several relays sharing a store may erase the same key. Over an
/// object store, a pass also runs the ``S3OrphanUploadSweeper`` when it is due (at start, then
/// hourly): uploads no blob owns are aborted.
final class BlobEraser: Sendable {
    private let records: any BlobRecords
    private let storage: any BlobStorage
    private let erasure: ErasureScheduler
    private let metrics: RelayMetrics
    private let clock: @Sendable () -> Int64
    private let interval: Double
    private let orphans: S3OrphanUploadSweeper?
    private let requests: AsyncStream<Void>.Continuation
    private let stream: AsyncStream<Void>

    /// Blobs expired per transaction, and storage keys erased per look at the queue.
    static let batch = 64

    init(records: any BlobRecords, storage: any BlobStorage, erasure: ErasureScheduler, metrics: RelayMetrics,
         clock: @escaping @Sendable () -> Int64, interval: Double, orphans: S3OrphanUploadSweeper? = nil) {
        self.records = records
        self.storage = storage
        self.erasure = erasure
        self.metrics = metrics
        self.clock = clock
        self.interval = interval
        self.orphans = orphans
        (stream, requests) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// Something was erased, or may have expired: run a pass soon.
    func wake() { requests.yield() }

    /// Runs passes until cancelled: one at start (erasures a stopped relay left queued), then
    /// one per wake or interval.
    func run(logger: Logger) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { [requests, interval] in
                while !Task.isCancelled {
                    requests.yield()
                    try? await Task.sleep(for: .seconds(interval))
                }
            }
            for await _ in stream {
                if Task.isCancelled { break }
                await pass(logger: logger)
            }
            group.cancelAll()
        }
    }

    /// Sweeps expired blobs into the queue, then empties the queue. Failures are logged and
    /// left for the next pass: a key stays queued until its bytes are gone.
    func pass(logger: Logger) async {
        do {
            var expired = 0
            while true {
                let count = try await records.sweepExpiredBlobs(now: clock(), batch: Self.batch)
                expired += count
                if count < Self.batch || Task.isCancelled { break }
            }
            if expired > 0 {
                logger.info("expired blobs erased", metadata: ["count": "\(expired)"])
                metrics.blobsExpired.increment(by: expired)
            }
            var erased = 0
            while !Task.isCancelled {
                let queued = try await records.blobErasures(limit: Self.batch)
                var progressed = false
                for item in queued {
                    do {
                        try await storage.erase(key: item.storageKey, upload: item.uploadHandle)
                        try await records.finishBlobErasure(storageKey: item.storageKey)
                        erased += 1
                        progressed = true
                    } catch {
                        logger.warning("could not erase a blob's bytes; retrying later", metadata: ["error.type": "\(type(of: error))"])
                    }
                }
                if queued.count < Self.batch || !progressed { break }
            }
            // The rows are gone: make their pages leave the database files too.
            if erased > 0 || expired > 0 { erasure.erased() }
        } catch {
            logger.error("blob erasure failed", metadata: ["error.type": "\(type(of: error))"])
        }
        if !Task.isCancelled { await orphans?.passIfDue(logger: logger) }
    }
}

/// Runs the ``BlobEraser`` for the relay's lifetime.
struct BlobEraserService: Service {
    let eraser: BlobEraser
    let logger: Logger

    func run() async throws {
        await cancelWhenGracefulShutdown { await eraser.run(logger: logger) }
    }
}
