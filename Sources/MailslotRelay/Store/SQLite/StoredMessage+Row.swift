import GRDB

// Reading a message from an SQLite row (PostgreSQL decodes its rows in PostgresStore).
extension StoredMessage {
    /// A row selected with ``columns``.
    init(row: Row) {
        seq = row[0]
        recipient = row[1]
        id = row[2]
        author = row[3]
        createdAt = row[4]
        expiresAt = row[5]
        size = row[6]
        envelope = row[7]
        leaseUntil = row[8]
        leaseHolder = row[9]
    }
}
