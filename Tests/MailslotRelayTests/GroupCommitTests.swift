import Foundation
import GRDB
import Synchronization
import Testing
@testable import MailslotRelay

/// Group commit: writes that share a transaction still succeed or fail one by one, and the
/// commit hooks run in the order the writes were applied.
@Suite struct GroupCommitTests {
    struct Refused: Error {}

    /// The rows the commit hooks reported, in the order they ran.
    final class HookLog: Sendable {
        private let rows = Mutex<[Int64]>([])
        func append(_ row: Int64) { rows.withLock { $0.append(row) } }
        var all: [Int64] { rows.withLock { $0 } }
    }

    private func pool() throws -> (DatabasePool, URL) {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("groupcommit-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let pool = try DatabasePool(path: folder.appendingPathComponent("db.sqlite").path)
        try pool.write { db in try db.execute(sql: "CREATE TABLE t (n INTEGER PRIMARY KEY AUTOINCREMENT, v INTEGER NOT NULL)") }
        return (pool, folder)
    }

    @Test func aRefusedWriteUndoesOnlyItselfAndHooksFollowInsertOrder() async throws {
        let (pool, folder) = try pool()
        defer { try? FileManager.default.removeItem(at: folder) }
        let group = GroupCommit(pool: pool)
        let hooks = HookLog()
        // Many writes at once, so that most share transactions; every third one writes, then
        // refuses — its row must not survive, and its neighbours' must.
        let outcomes = await withTaskGroup(of: (Int, Bool).self) { tasks in
            for value in 0..<300 {
                tasks.addTask {
                    do {
                        _ = try await group.submit({ db -> Int64 in
                            try db.execute(sql: "INSERT INTO t (v) VALUES (?)", arguments: [value])
                            if value % 3 == 0 { throw Refused() }
                            return db.lastInsertedRowID
                        }, committed: { row in hooks.append(row) }).value
                        return (value, true)
                    } catch {
                        return (value, false)
                    }
                }
            }
            var outcomes: [Int: Bool] = [:]
            for await (value, stored) in tasks { outcomes[value] = stored }
            return outcomes
        }
        for (value, stored) in outcomes { #expect(stored == (value % 3 != 0), "write \(value)") }
        let values = try await pool.read { db in try Int.fetchAll(db, sql: "SELECT v FROM t ORDER BY n") }
        #expect(Set(values) == Set((0..<300).filter { $0 % 3 != 0 }), "exactly the writes that succeeded are stored")
        let rows = try await pool.read { db in try Int64.fetchAll(db, sql: "SELECT n FROM t ORDER BY n") }
        #expect(hooks.all == rows, "one hook per stored row, in row order")
    }
}
