import GRDB
import Synchronization

/// Counts the client store's committed write transactions and WAL checkpoints: what one
/// operation costs the disk, which tests hold to a bound (a group send of 1,000 copies commits
/// one transaction and makes one checkpoint, docs/design/groups.md §7.4).
final class StoreCounters: TransactionObserver, Sendable {
    private let counts = Mutex<(commits: Int, checkpoints: Int)>((0, 0))

    /// Write transactions committed so far (migrations included).
    var commits: Int { counts.withLock { $0.commits } }
    /// WAL checkpoints made so far (``ClientStore/checkpoint()``).
    var checkpoints: Int { counts.withLock { $0.checkpoints } }

    /// Counts one checkpoint.
    func checkpointed() { counts.withLock { $0.checkpoints += 1 } }

    // TransactionObserver: no change events are needed, only commits (GRDB tells every
    // observer of every commit).
    func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool { false }
    func databaseDidChange(with event: DatabaseEvent) {}
    func databaseDidCommit(_ db: Database) { counts.withLock { $0.commits += 1 } }
    func databaseDidRollback(_ db: Database) {}
}
