import PostgresNIO

// The statements every message runs, prepared once per connection (postgres-nio keeps them by
// name): an unnamed statement is parsed and planned by the server at every call, which was a
// large part of the database's CPU per message. Their results are read by position, in the
// order their SQL names the columns.

/// A create: `mailslot_create_message` (``PostgresSchema``, migration 2).
struct CreateMessageStatement: PostgresPreparedStatement {
    typealias Row = (outcome: String, seq: Int64?, createdAt: Int64?, expiresAt: Int64?, leaseUntil: Int64?, leaseHolder: String?,
                     erasedExpired: Bool)

    static let name = "mailslot_create_message_v2"
    static let sql = """
        SELECT outcome, seq, created_at, expires_at, lease_until, lease_holder, erased_expired
        FROM mailslot_create_message($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
        """
    static let bindingDataTypes: [PostgresDataType] = [.text, .text, .text, .text, .int8, .text, .int8, .int8, .int8, .int8]

    let recipient: String, id: String, author: String, envelope: String
    let size: Int64
    let keyID: String?
    let now: Int64, expiresAt: Int64, maxPending: Int64, maxAuthorBytes: Int64

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 10)
        bindings.append(recipient)
        bindings.append(id)
        bindings.append(author)
        bindings.append(envelope)
        bindings.append(size)
        bindings.append(keyID)
        bindings.append(now)
        bindings.append(expiresAt)
        bindings.append(maxPending)
        bindings.append(maxAuthorBytes)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row {
        let (outcome, seq, createdAt, expiresAt, leaseUntil, leaseHolder, erasedExpired) =
            try row.decode((String, Int64?, Int64?, Int64?, Int64?, String?, Bool).self)
        return (outcome, seq, createdAt, expiresAt, leaseUntil, leaseHolder, erasedExpired)
    }
}

/// The erasure of a message by the mailbox's owner (an acknowledgement): its `expires_at`, if it was there.
struct AcknowledgeStatement: PostgresPreparedStatement {
    typealias Row = Int64

    static let name = "mailslot_acknowledge_v1"
    static let sql = "DELETE FROM messages WHERE recipient = $1 AND id = $2 RETURNING expires_at"
    static let bindingDataTypes: [PostgresDataType] = [.text, .text]

    let recipient: String, id: String

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 2)
        bindings.append(recipient)
        bindings.append(id)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Int64 { try row.decode(Int64.self) }
}

/// Unexpired messages of a mailbox after a `seq`, oldest first, at most `limit` rows.
struct MailboxPageStatement: PostgresPreparedStatement {
    typealias Row = StoredMessage

    static let name = "mailslot_mailbox_page_v1"
    static let sql = """
        SELECT \(StoredMessage.columns) FROM messages
        WHERE recipient = $1 AND seq > $2 AND expires_at > $3 ORDER BY seq LIMIT $4
        """
    static let bindingDataTypes: [PostgresDataType] = [.text, .int8, .int8, .int8]

    let recipient: String
    let after: Int64, now: Int64, limit: Int64

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 4)
        bindings.append(recipient)
        bindings.append(after)
        bindings.append(now)
        bindings.append(limit)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> StoredMessage { try StoredMessage(postgres: row) }
}
