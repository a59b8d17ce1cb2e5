import Foundation
import GRDB
import Testing
@testable import MailslotRelay

/// DirectStatement: what it binds and reads is what GRDB would bind and read, a failing
/// statement throws GRDB's error and leaves nothing half-done, and a cached statement can be
/// run again at once.
@Suite struct DirectStatementTests {
    private func queue() throws -> DatabaseQueue {
        let queue = try DatabaseQueue()
        try queue.write { db in
            try db.execute(sql: "CREATE TABLE t (n INTEGER PRIMARY KEY, name TEXT UNIQUE, data BLOB, note TEXT)")
        }
        return queue
    }

    @Test func valuesGoInAndComeOutAsGRDBSeesThem() throws {
        let queue = try queue()
        let blob = Data((0...255).map { UInt8($0) } + [0, 0])  // zero bytes inside and at the end
        let name = "émile \u{1F4EC}"
        try queue.write { db in
            try db.cachedStatement(sql: "INSERT INTO t (n, name, data, note) VALUES (?, ?, ?, ?)")
                .run(.integer(Int64.max), .text(name), .blob(blob), .null)
            try db.cachedStatement(sql: "INSERT INTO t (n, name, data, note) VALUES (?, ?, ?, ?)")
                .run(.integer(-1), .text(""), .blob(Data()), .text("x"))
            let row = try #require(try Row.fetchOne(db, sql: "SELECT n, name, data, note FROM t WHERE n = ?", arguments: [Int64.max]))
            #expect(row[0] as Int64 == Int64.max)
            #expect(row[1] as String == name)
            #expect(row[2] as Data == blob)
            #expect(row[3] as String? == nil)

            let statement = try db.cachedStatement(sql: "SELECT n, name, data, note FROM t WHERE n = ?")
            let read = try statement.run(.integer(Int64.max), row: {
                ($0.int64(0), $0.text(1), $0.blob(2), $0.optionalText(3), $0.optionalInt64(3))
            })
            #expect(read?.0 == Int64.max)
            #expect(read?.1 == name)
            #expect(read?.2 == blob)
            #expect(read?.3 == nil)
            #expect(read?.4 == nil)
            // The same cached statement, again at once, with other arguments.
            #expect(try statement.run(.integer(-1), row: { $0.optionalText(3) }) == "x")
            #expect(try statement.run(.integer(7), row: { $0.int64(0) }) == nil, "no row: nil")
        }
    }

    @Test func aWriteWithReturningCompletesAndAnswersItsFirstRow() throws {
        let queue = try queue()
        try queue.write { db in
            for n in 1...3 { try db.execute(sql: "INSERT INTO t (n, name) VALUES (?, ?)", arguments: [n, "r\(n)"]) }
            let first = try db.cachedStatement(sql: "DELETE FROM t WHERE n >= ? RETURNING n").run(.integer(2), row: { $0.int64(0) })
            #expect(first == 2 || first == 3)
            #expect(try Int.fetchOne(db, sql: "SELECT count(*) FROM t") == 1, "every row was deleted, not only the first returned")
        }
    }

    @Test func aFailingStatementThrowsGRDBsErrorAndTheStatementStaysUsable() throws {
        let queue = try queue()
        try queue.write { db in
            let insert = try db.cachedStatement(sql: "INSERT INTO t (n, name) VALUES (?, ?)")
            try insert.run(.integer(1), .text("taken"))
            #expect {
                try insert.run(.integer(2), .text("taken"))
            } throws: { error in
                (error as? DatabaseError)?.resultCode == .SQLITE_CONSTRAINT
            }
            #expect(try Int.fetchOne(db, sql: "SELECT count(*) FROM t") == 1)
            try insert.run(.integer(2), .text("free"))
            #expect(try Int.fetchOne(db, sql: "SELECT count(*) FROM t") == 2)
            // More arguments than the statement has is an error too, not a silent drop.
            #expect(throws: DatabaseError.self) { try insert.run(.integer(3), .text("c"), .text("extra")) }
        }
    }
}
