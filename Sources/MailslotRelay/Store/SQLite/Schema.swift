import Foundation
import GRDB
import MailslotWire

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
        // v2's count still read every entry of the mailbox: O(pending) per create, 10,000 reads
        // when a mailbox is near full. Triggers now keep each mailbox's number of stored rows, so
        // the limit check is one lookup; only a mailbox at the limit also subtracts its expired,
        // unswept messages (through the expiry index: as many as the sweeper has yet to erase).
        // One index fewer to update on every create and erase, too. A row is gone with the
        // mailbox's last message: no trace of a mailbox that holds nothing.
        migrator.registerMigration("v3: mailbox sizes kept by triggers") { db in
            try db.execute(sql: """
                CREATE TABLE mailbox_sizes (
                    recipient TEXT PRIMARY KEY,
                    stored INTEGER NOT NULL
                ) WITHOUT ROWID;
                INSERT INTO mailbox_sizes (recipient, stored) SELECT recipient, count(*) FROM messages GROUP BY recipient;

                CREATE TRIGGER messages_stored AFTER INSERT ON messages BEGIN
                    INSERT INTO mailbox_sizes (recipient, stored) VALUES (NEW.recipient, 1)
                        ON CONFLICT (recipient) DO UPDATE SET stored = stored + 1;
                END;
                CREATE TRIGGER messages_erased AFTER DELETE ON messages BEGIN
                    UPDATE mailbox_sizes SET stored = stored - 1 WHERE recipient = OLD.recipient;
                    DELETE FROM mailbox_sizes WHERE recipient = OLD.recipient AND stored <= 0;
                END;

                DROP INDEX messages_by_mailbox_expiry;
                """)
        }
        // Envelopes are kept as the base64url text senders send and recipients receive: the
        // relay checked and decoded each one on create and encoded it again on every delivery,
        // about 6 % of its CPU per message, for bytes it cannot open. The column keeps its declared
        // type (SQLite stores a value as given under BLOB affinity); stored rows are converted
        // here, and secure_delete overwrites their old pages.
        migrator.registerMigration("v4: envelopes as base64url text") { db in
            // In batches, read before written: memory stays bounded and no cursor reads a table
            // that is changing under it.
            let update = try db.makeStatement(sql: "UPDATE messages SET envelope = ? WHERE seq = ?")
            var after: Int64 = 0
            while true {
                let rows = try Row.fetchAll(db, sql: """
                    SELECT seq, envelope FROM messages WHERE seq > ? AND typeof(envelope) = 'blob' ORDER BY seq LIMIT 1000
                    """, arguments: [after])
                guard let last = rows.last else { break }
                for row in rows {
                    let envelope: Data = row[1]
                    try update.execute(arguments: [Base64URL.encode(envelope), row[0] as Int64])
                }
                after = last[0]
            }
        }
        // Storage per author: any uid is a valid recipient, so the per-mailbox limit bounds
        // nothing for an author who spreads messages over many mailboxes. The same triggers that
        // keep mailbox sizes now keep each author's stored envelope bytes (a row per author
        // with something stored), so the quota check of a create is one lookup. And sign-ins
        // per uid are capped, which needs the sessions of a uid without a scan; the sessions
        // table is rebuilt with CHECKs on its kind and flag, so that no row of another kind can
        // be read as an access session.
        migrator.registerMigration("v5: author sizes, sessions by uid") { db in
            try db.execute(sql: """
                CREATE TABLE author_sizes (
                    author TEXT PRIMARY KEY,
                    bytes INTEGER NOT NULL
                ) WITHOUT ROWID;
                INSERT INTO author_sizes (author, bytes) SELECT author, sum(size) FROM messages GROUP BY author;

                DROP TRIGGER messages_stored;
                DROP TRIGGER messages_erased;
                CREATE TRIGGER messages_stored AFTER INSERT ON messages BEGIN
                    INSERT INTO mailbox_sizes (recipient, stored) VALUES (NEW.recipient, 1)
                        ON CONFLICT (recipient) DO UPDATE SET stored = stored + 1;
                    INSERT INTO author_sizes (author, bytes) VALUES (NEW.author, NEW.size)
                        ON CONFLICT (author) DO UPDATE SET bytes = bytes + NEW.size;
                END;
                CREATE TRIGGER messages_erased AFTER DELETE ON messages BEGIN
                    UPDATE mailbox_sizes SET stored = stored - 1 WHERE recipient = OLD.recipient;
                    DELETE FROM mailbox_sizes WHERE recipient = OLD.recipient AND stored <= 0;
                    UPDATE author_sizes SET bytes = bytes - OLD.size WHERE author = OLD.author;
                    DELETE FROM author_sizes WHERE author = OLD.author AND bytes <= 0;
                END;

                CREATE TABLE sessions_checked (
                    hash BLOB PRIMARY KEY,
                    kind INTEGER NOT NULL CHECK (kind IN (0, 1)),
                    uid TEXT NOT NULL,
                    family BLOB NOT NULL,
                    expires_at INTEGER NOT NULL,
                    spent INTEGER NOT NULL DEFAULT 0 CHECK (spent IN (0, 1))
                ) WITHOUT ROWID;
                INSERT INTO sessions_checked (hash, kind, uid, family, expires_at, spent)
                    SELECT hash, kind, uid, family, expires_at, spent FROM sessions WHERE kind IN (0, 1) AND spent IN (0, 1);
                DROP TABLE sessions;
                ALTER TABLE sessions_checked RENAME TO sessions;
                CREATE INDEX sessions_by_family ON sessions (family);
                CREATE INDEX sessions_by_expiry ON sessions (expires_at);
                CREATE INDEX sessions_by_uid ON sessions (uid);
                """)
        }
        // A bundle's key id (KeyBundle.keyID) kept beside it, so that a create naming the keys it
        // was sealed to is checked with one lookup (409 stale_keys). Computed for stored bundles.
        migrator.registerMigration("v6: key ids") { db in
            try db.execute(sql: "ALTER TABLE key_bundles ADD COLUMN key_id TEXT")
            for row in try Row.fetchAll(db, sql: "SELECT uid, bundle FROM key_bundles") {
                let uid: String = row["uid"], bundle: Data = row["bundle"]
                // Every stored bundle was verified when it was put; one that no longer decodes gets
                // no key id, so every create naming keys for it is stale until the owner re-publishes.
                let keyID = (try? KeyBundle.decode(Array(bundle), for: uid))?.keyID
                try db.execute(sql: "UPDATE key_bundles SET key_id = ? WHERE uid = ?", arguments: [keyID, uid])
            }
        }
        // One-time prekeys (spec/protocol.md §4.14): public keys an owner leaves for senders, each
        // claimed once and then erased (deleted: secure_delete overwrites it). Beside each bundle
        // its identity key, so that a bundle of another identity erases the old identity's
        // prekeys with one lookup; computed for stored bundles, as v6 computed key ids.
        migrator.registerMigration("v7: one-time prekeys, identity keys") { db in
            try db.execute(sql: """
                CREATE TABLE prekeys (
                    uid TEXT NOT NULL,
                    id INTEGER NOT NULL CHECK (id BETWEEN 1 AND 4294967295),
                    key TEXT NOT NULL CHECK (length(key) = 43),
                    created_at INTEGER NOT NULL,
                    PRIMARY KEY (uid, id)
                ) WITHOUT ROWID;
                ALTER TABLE key_bundles ADD COLUMN identity_key TEXT;
                """)
            for row in try Row.fetchAll(db, sql: "SELECT uid, bundle FROM key_bundles") {
                let uid: String = row["uid"], bundle: Data = row["bundle"]
                // A bundle that no longer decodes gets none: its identity counts as another one.
                let identityKey = (try? KeyBundle.decode(Array(bundle), for: uid)).map { Base64URL.encode($0.identityKey.bytes) }
                try db.execute(sql: "UPDATE key_bundles SET identity_key = ? WHERE uid = ?", arguments: [identityKey, uid])
            }
        }
        // Blobs (issue 27, spec/protocol.md §4.15–§4.21): what the relay keeps about the files
        // its blob storage holds. The bytes live in the storage under a random `storage_key`, so
        // an id re-created after an erasure never meets the old bytes; `blob_recipients` holds
        // those yet to acknowledge; `blob_erasures` the storage keys whose bytes are still to be
        // removed, queued in the transaction that deletes their blob's rows. The per-author bytes
        // and unfinished uploads are kept by triggers, as author_sizes is (v5): every way a blob
        // is created, completed or erased keeps them right without repeating the bookkeeping, and
        // the quota check of a create is one lookup. Deletes are explicit (no foreign keys).
        migrator.registerMigration("v8: blobs") { db in
            try db.execute(sql: """
                CREATE TABLE blobs (
                    id TEXT PRIMARY KEY,
                    author TEXT NOT NULL,
                    size INTEGER NOT NULL CHECK (size > 0),
                    part_size INTEGER NOT NULL CHECK (part_size > 0),
                    parts INTEGER NOT NULL CHECK (parts > 0),
                    state INTEGER NOT NULL CHECK (state IN (0, 1)),
                    storage_key TEXT NOT NULL UNIQUE,
                    upload_handle TEXT,
                    ttl_seconds INTEGER NOT NULL,
                    created_at INTEGER NOT NULL,
                    upload_expires_at INTEGER NOT NULL,
                    completed_at INTEGER,
                    expires_at INTEGER
                ) WITHOUT ROWID;
                CREATE INDEX blobs_by_author ON blobs (author, id);
                CREATE INDEX blobs_uploading_by_expiry ON blobs (upload_expires_at) WHERE state = 0;
                CREATE INDEX blobs_complete_by_expiry ON blobs (expires_at) WHERE state = 1;

                CREATE TABLE blob_recipients (
                    blob_id TEXT NOT NULL,
                    uid TEXT NOT NULL,
                    PRIMARY KEY (blob_id, uid)
                ) WITHOUT ROWID;
                CREATE INDEX blob_recipients_by_uid ON blob_recipients (uid, blob_id);

                CREATE TABLE blob_parts (
                    blob_id TEXT NOT NULL,
                    number INTEGER NOT NULL CHECK (number > 0),
                    digest BLOB NOT NULL CHECK (length(digest) = 32),
                    etag TEXT,
                    PRIMARY KEY (blob_id, number)
                ) WITHOUT ROWID;

                CREATE TABLE blob_author_sizes (
                    author TEXT PRIMARY KEY,
                    bytes INTEGER NOT NULL,
                    uploading INTEGER NOT NULL
                ) WITHOUT ROWID;
                CREATE TRIGGER blobs_stored AFTER INSERT ON blobs BEGIN
                    INSERT INTO blob_author_sizes (author, bytes, uploading) VALUES (NEW.author, NEW.size, NEW.state = 0)
                        ON CONFLICT (author) DO UPDATE SET bytes = bytes + NEW.size, uploading = uploading + (NEW.state = 0);
                END;
                CREATE TRIGGER blobs_completed AFTER UPDATE OF state ON blobs WHEN OLD.state = 0 AND NEW.state = 1 BEGIN
                    UPDATE blob_author_sizes SET uploading = uploading - 1 WHERE author = NEW.author;
                END;
                CREATE TRIGGER blobs_erased AFTER DELETE ON blobs BEGIN
                    UPDATE blob_author_sizes SET bytes = bytes - OLD.size, uploading = uploading - (OLD.state = 0)
                        WHERE author = OLD.author;
                    DELETE FROM blob_author_sizes WHERE author = OLD.author AND bytes <= 0 AND uploading <= 0;
                END;

                CREATE TABLE blob_erasures (
                    storage_key TEXT PRIMARY KEY,
                    upload_handle TEXT,
                    queued_at INTEGER NOT NULL,
                    attempts INTEGER NOT NULL DEFAULT 0
                ) WITHOUT ROWID;
                CREATE INDEX blob_erasures_by_age ON blob_erasures (queued_at, storage_key);
                """)
        }
        // Wake-ups (issue 29, docs/design/wakeups.md §1.4, spec/push.md): each mailbox owner's push
        // registrations, and at most one pending wake-up per registration (the primary key: a
        // message while one is pending adds nothing). A registration remembers the sign-in family
        // that wrote it, so that signing out deletes it; `version` grows with each replacement, so
        // that a provider's verdict on an older body never removes a newer one. A created message
        // inserts its wake-up rows in its own transaction; a claim deletes them before anything is
        // sent. Provider codes are PushProviderKind.storeCode (never reused).
        migrator.registerMigration("v9: push registrations and wake-ups") { db in
            try db.execute(sql: """
                CREATE TABLE push_registrations (
                    uid TEXT NOT NULL,
                    id TEXT NOT NULL,
                    family BLOB NOT NULL,
                    provider INTEGER NOT NULL CHECK (provider IN (1, 2, 3, 4)),
                    target TEXT NOT NULL,
                    route TEXT NOT NULL,
                    tag TEXT NOT NULL DEFAULT '',
                    version INTEGER NOT NULL,
                    created_at INTEGER NOT NULL,
                    updated_at INTEGER NOT NULL,
                    woken_at INTEGER NOT NULL DEFAULT 0,
                    failures INTEGER NOT NULL DEFAULT 0,
                    PRIMARY KEY (uid, id)
                ) WITHOUT ROWID;
                CREATE INDEX push_registrations_by_family ON push_registrations (family);

                CREATE TABLE push_wakeups (
                    uid TEXT NOT NULL,
                    id TEXT NOT NULL,
                    provider INTEGER NOT NULL,
                    route TEXT NOT NULL,
                    first_seq INTEGER NOT NULL,
                    due_at INTEGER NOT NULL,
                    attempt INTEGER NOT NULL DEFAULT 0,
                    event TEXT,
                    PRIMARY KEY (uid, id)
                ) WITHOUT ROWID;
                CREATE INDEX push_wakeups_by_due ON push_wakeups (due_at);
                """)
        }
        return migrator
    }
}
