import PostgresNIO

// The statements every message runs, prepared once per connection (postgres-nio keeps them by
// name): an unnamed statement is parsed and planned by the server at every call, which was a
// large part of the database's CPU per message. Their results are read by position, in the
// order their SQL names the columns.

/// One write of a group-commit batch, as `mailslot_write_batch` (``PostgresSchema``, migration 4)
/// takes it: a create, the owner's erase (an acknowledgement) or the author's (an unsend).
struct PostgresWrite: Sendable {
    enum Kind: String, Sendable {
        case create, ack, unsend
    }

    let kind: Kind
    let recipient: String
    let id: String
    /// The author (a create, an unsend); empty for an acknowledgement.
    var author = ""
    var envelope = ""
    var size: Int64 = 0
    /// The key id a create names; empty when it names none.
    var keyID = ""
    var now: Int64 = 0
    var expiresAt: Int64 = 0
    var limits = CreateLimits(maxPending: 0, maxAuthorBytes: 0)
    /// Whether a create, if it creates, queues wake-ups for the recipient's push registrations
    /// (docs/design/wakeups.md §2.2); false for an erasure.
    var wake = false

    /// Whether the other relays must hear of the mailbox when this write changes it: an
    /// acknowledgement concerns only the subscription that read the message.
    var announced: Bool { kind != .ack }
}

/// What `mailslot_write_batch` answered for one write (its `outcome` column, ``PostgresSchema``).
enum WriteBatchOutcome: String, Sendable {
    // A create's.
    case created, duplicate, conflict, blocked
    case staleKeys = "stale_keys"
    case mailboxFull = "mailbox_full"
    case authorQuota = "author_quota"
    // An erasure's.
    case erased, absent
}

/// A batch of writes in one statement: `mailslot_write_batch` (the overload of migration 6, which
/// also queues the created messages' wake-ups), one row per write.
struct WriteBatchStatement: PostgresPreparedStatement {
    /// One write's answer; `ord` is its position in the batch, from 1.
    typealias Row = (ord: Int64, outcome: WriteBatchOutcome, seq: Int64?, createdAt: Int64?, expiresAt: Int64?, leaseUntil: Int64?,
                     leaseHolder: String?, erasedExpired: Bool)

    static let name = "mailslot_write_batch_v2"
    static let sql = """
        SELECT ord, outcome, seq, created_at, expires_at, lease_until, lease_holder, erased_expired
        FROM mailslot_write_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
        """
    static let bindingDataTypes: [PostgresDataType] = [.textArray, .textArray, .textArray, .textArray, .textArray, .int8Array,
                                                       .textArray, .int8Array, .int8Array, .int8Array, .int8Array, .text,
                                                       .boolArray, .int8]

    let writes: [PostgresWrite]
    /// The `NOTIFY` payload, sent if a create or an unsend of the batch changed something.
    let notify: String?
    /// The least time between two wake-ups of one registration, in ms.
    let wakeInterval: Int64

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 14)
        bindings.append(writes.map(\.kind.rawValue))
        bindings.append(writes.map(\.recipient))
        bindings.append(writes.map(\.id))
        bindings.append(writes.map(\.author))
        bindings.append(writes.map(\.envelope))
        bindings.append(writes.map(\.size))
        bindings.append(writes.map(\.keyID))
        bindings.append(writes.map(\.now))
        bindings.append(writes.map(\.expiresAt))
        bindings.append(writes.map { Int64($0.limits.maxPending) })
        bindings.append(writes.map(\.limits.maxAuthorBytes))
        bindings.append(notify)
        bindings.append(writes.map(\.wake))
        bindings.append(wakeInterval)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row {
        let (ord, outcome, seq, createdAt, expiresAt, leaseUntil, leaseHolder, erasedExpired) =
            try row.decode((Int64, String, Int64?, Int64?, Int64?, Int64?, String?, Bool).self)
        guard let known = WriteBatchOutcome(rawValue: outcome) else {
            throw PostgresSchema.Refusal(description: "mailslot_write_batch answered an unknown outcome")
        }
        return (ord, known, seq, createdAt, expiresAt, leaseUntil, leaseHolder, erasedExpired)
    }
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
