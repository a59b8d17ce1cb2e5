import Foundation
import GRDB
import GRDBSQLite

/// A value bound to one `?` of a statement run with ``GRDB/Statement/run(_:)``.
enum SQLArgument {
    case integer(Int64)
    case text(String)
    case blob(Data)
    case null
}

/// The current row of a statement run with ``GRDB/Statement/run(_:row:)``, read by column position.
struct SQLRow: ~Copyable {
    fileprivate let statement: SQLiteStatement

    func isNull(_ column: Int32) -> Bool { sqlite3_column_type(statement, column) == SQLITE_NULL }
    func int64(_ column: Int32) -> Int64 { sqlite3_column_int64(statement, column) }
    func optionalInt64(_ column: Int32) -> Int64? { isNull(column) ? nil : int64(column) }

    func text(_ column: Int32) -> String {
        guard let bytes = sqlite3_column_text(statement, column) else { return "" }
        let count = Int(sqlite3_column_bytes(statement, column))
        return String(decoding: UnsafeBufferPointer(start: bytes, count: count), as: UTF8.self)
    }

    func optionalText(_ column: Int32) -> String? { isNull(column) ? nil : text(column) }

    func blob(_ column: Int32) -> Data {
        // Read the pointer first: sqlite3_column_bytes after it gives the blob's size.
        guard let bytes = sqlite3_column_blob(statement, column) else { return Data() }
        return Data(bytes: bytes, count: Int(sqlite3_column_bytes(statement, column)))
    }
}

extension Statement {
    /// Runs the statement with `arguments` bound in order, straight through SQLite's C API, and
    /// returns what `row` reads from its first result row (nil when there is none).
    ///
    /// For the handful of statements every message runs (the savepoints, the create's lookups
    /// and insert, the ack's delete): for a one-row statement, GRDB's general arguments and
    /// cursors cost more than SQLite's own work. Call it only where GRDB gives access to the
    /// database (a read or write closure), like any other use of the statement.
    func run<T>(_ arguments: SQLArgument..., row: (borrowing SQLRow) -> T) throws -> T? {
        try run(arguments, row: row)
    }

    /// Runs the statement with `arguments` bound in order; see ``run(_:row:)``.
    func run(_ arguments: SQLArgument...) throws {
        _ = try run(arguments, row: { _ in () })
    }

    private func run<T>(_ arguments: [SQLArgument], row: (borrowing SQLRow) -> T) throws -> T? {
        let statement = sqliteStatement
        defer {
            sqlite3_reset(statement)
            sqlite3_clear_bindings(statement)
        }
        let transient = unsafeBitCast(OpaquePointer(bitPattern: -1), to: sqlite3_destructor_type.self)
        for (index, argument) in zip(Int32(1)..., arguments) {
            let code: Int32 = switch argument {
            case .integer(let value): sqlite3_bind_int64(statement, index, value)
            case .text(let value):
                // The UTF-8 bytes in place, with their length (no NUL-terminated copy).
                value.utf8.withContiguousStorageIfAvailable { bytes in
                    guard let start = bytes.baseAddress else { return sqlite3_bind_text(statement, index, "", 0, transient) }
                    return start.withMemoryRebound(to: CChar.self, capacity: bytes.count) {
                        sqlite3_bind_text(statement, index, $0, Int32(bytes.count), transient)
                    }
                } ?? sqlite3_bind_text(statement, index, value, -1, transient)
            case .blob(let value):
                value.withUnsafeBytes { sqlite3_bind_blob(statement, index, $0.baseAddress, Int32($0.count), transient) }
            case .null: sqlite3_bind_null(statement, index)
            }
            guard code == SQLITE_OK else { throw error(code) }
        }
        var first: T?
        while true {
            // Stepped to the end even after the first row, so a write with RETURNING completes.
            switch sqlite3_step(statement) {
            case SQLITE_ROW: if first == nil { first = row(SQLRow(statement: statement)) }
            case SQLITE_DONE: return first
            case let code: throw error(code)
            }
        }
    }

    private func error(_ code: Int32) -> DatabaseError {
        let message = sqlite3_db_handle(sqliteStatement).flatMap { sqlite3_errmsg($0) }.map { String(cString: $0) }
        return DatabaseError(resultCode: ResultCode(rawValue: code), message: message, sql: sql)
    }
}
