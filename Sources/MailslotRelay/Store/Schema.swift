import GRDB

/// The relay's tables, as versioned migrations. A migration, once released, never changes:
/// add a new one instead. spec/protocol.md §Storage describes what each column holds.
enum Schema {
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1: documents, key bundles, messages, block lists, sessions") { db in
            try db.execute(sql: """
                CREATE TABLE documents (
                    uid TEXT PRIMARY KEY,
                    body BLOB NOT NULL,
                    updated_at INTEGER NOT NULL
                ) WITHOUT ROWID;

                CREATE TABLE key_bundles (
                    uid TEXT PRIMARY KEY,
                    bundle BLOB NOT NULL,
                    updated_at INTEGER NOT NULL
                ) WITHOUT ROWID;

                -- seq orders each mailbox and is the list cursor. AUTOINCREMENT: a seq is never
                -- reused after a delete, so a cursor never skips a newer message.
                CREATE TABLE messages (
                    seq INTEGER PRIMARY KEY AUTOINCREMENT,
                    recipient TEXT NOT NULL,
                    id TEXT NOT NULL,
                    author TEXT NOT NULL,
                    created_at INTEGER NOT NULL,
                    expires_at INTEGER NOT NULL,
                    size INTEGER NOT NULL,
                    envelope BLOB NOT NULL,
                    lease_until INTEGER,
                    lease_holder TEXT,
                    UNIQUE (recipient, id)
                );
                CREATE INDEX messages_by_mailbox ON messages (recipient, seq);
                CREATE INDEX messages_by_expiry ON messages (expires_at);

                CREATE TABLE blocked (
                    owner TEXT NOT NULL,
                    author TEXT NOT NULL,
                    created_at INTEGER NOT NULL,
                    PRIMARY KEY (owner, author)
                ) WITHOUT ROWID;

                -- Only hashes of session secrets are stored. kind: 0 = access, 1 = refresh.
                -- family ties a sign-in's sessions together, so reuse of a spent refresh token can
                -- revoke them all.
                CREATE TABLE sessions (
                    hash BLOB PRIMARY KEY,
                    kind INTEGER NOT NULL,
                    uid TEXT NOT NULL,
                    family BLOB NOT NULL,
                    expires_at INTEGER NOT NULL,
                    spent INTEGER NOT NULL DEFAULT 0
                ) WITHOUT ROWID;
                CREATE INDEX sessions_by_family ON sessions (family);
                CREATE INDEX sessions_by_expiry ON sessions (expires_at);
                """)
        }
        // Every create counts the mailbox's unexpired messages (the pending limit). Through
        // (recipient, seq) that read each row, envelope pages included, so creates slowed as a
        // backlog grew; this index answers the count from the index alone.
        migrator.registerMigration("v2: messages by mailbox and expiry") { db in
            try db.execute(sql: "CREATE INDEX messages_by_mailbox_expiry ON messages (recipient, expires_at)")
        }
        return migrator
    }
}
