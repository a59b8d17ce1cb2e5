import GRDB

// SQLite's side of the free-space watermark: what a write does when SQLite finds the disk full.
// (``DiskSpace`` itself is shared: the blob storages read its probe too.)
extension DiskSpace {
    /// Runs `write`, one transaction. When it finds the disk full (SQLite rolled it back as a
    /// whole), the reserve is released and the transaction run once more; a disk still full is
    /// ``StoreFailure/storageFull``. The one place that handles SQLITE_FULL, for every write.
    static func retryingWhenFull<T>(_ diskSpace: DiskSpace?, _ write: () async throws -> T) async throws -> T {
        do {
            return try await write()
        } catch let error as DatabaseError where error.resultCode == .SQLITE_FULL {
            guard diskSpace?.writeFailedForSpace() == true else { throw StoreFailure.storageFull }
            do { return try await write() } catch let error as DatabaseError where error.resultCode == .SQLITE_FULL {
                throw StoreFailure.storageFull
            }
        }
    }
}
