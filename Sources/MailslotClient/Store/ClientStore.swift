import Foundation
import GRDB
import MailslotWire

/// The client's local state on SQLite: identity and mailbox keys, the sign-in session, contacts with
/// their pinned keys, the inbox, sent messages with the outbox, and rejected messages. The
/// database file is created readable by its owner only.
final class ClientStore: Sendable {
    let pool: DatabasePool
    /// How many transactions and checkpoints this store has made (tests check a group send's cost).
    let counters = StoreCounters()

    init(path: String) throws {
        let folder = (path as NSString).deletingLastPathComponent
        if !folder.isEmpty {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        }
        if !FileManager.default.fileExists(atPath: path) {
            _ = FileManager.default.createFile(atPath: path, contents: nil, attributes: [.posixPermissions: 0o600])
        }
        var configuration = Configuration()
        configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA secure_delete = ON") }
        configuration.busyMode = .timeout(5)
        pool = try DatabasePool(path: path, configuration: configuration)
        try Self.migrator.migrate(pool)
        pool.add(transactionObserver: counters, extent: .databaseLifetime)
        for suffix in ["-wal", "-shm"] { chmod(path + suffix, 0o600) }
    }

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1: identity, session, contacts, inbox, sent, rejected") { db in
            try db.execute(sql: """
                CREATE TABLE identity (
                    id INTEGER PRIMARY KEY CHECK (id = 1),
                    uid TEXT NOT NULL,
                    identity_secret BLOB NOT NULL,
                    mailbox_secret BLOB NOT NULL,
                    published INTEGER NOT NULL DEFAULT 0
                );
                CREATE TABLE session (
                    id INTEGER PRIMARY KEY CHECK (id = 1),
                    session TEXT NOT NULL,
                    refresh TEXT NOT NULL,
                    expires_at REAL NOT NULL
                );
                -- trust: 'pinned' (first use), 'verified' (fingerprint compared), or 'changed' (the
                -- relay served another identity key: refused until the user trusts it).
                CREATE TABLE contacts (
                    uid TEXT PRIMARY KEY,
                    identity_key BLOB NOT NULL,
                    mailbox_key BLOB NOT NULL,
                    trust TEXT NOT NULL,
                    offered_bundle BLOB,
                    updated_at REAL NOT NULL
                ) WITHOUT ROWID;
                CREATE TABLE inbox (
                    id TEXT PRIMARY KEY,
                    sender TEXT NOT NULL,
                    type TEXT NOT NULL,
                    body BLOB NOT NULL,
                    received_at REAL NOT NULL
                ) WITHOUT ROWID;
                -- Sent messages. state: 'queued' (the outbox) or 'sent'. The sealed envelope is kept
                -- while queued so that every retry sends the same bytes (the relay's create is
                -- idempotent only for identical envelopes), and wiped once sent.
                CREATE TABLE sent (
                    id TEXT PRIMARY KEY,
                    recipient TEXT NOT NULL,
                    type TEXT NOT NULL,
                    body BLOB NOT NULL,
                    envelope BLOB,
                    state TEXT NOT NULL,
                    attempts INTEGER NOT NULL DEFAULT 0,
                    next_attempt_at REAL NOT NULL DEFAULT 0,
                    last_error TEXT,
                    created_at REAL NOT NULL
                ) WITHOUT ROWID;
                CREATE TABLE rejected (
                    id TEXT PRIMARY KEY,
                    author TEXT NOT NULL,
                    reason TEXT NOT NULL,
                    received_at REAL NOT NULL
                ) WITHOUT ROWID;
                """)
        }
        // Keys that stay current (spec/envelope.md §4.2): the outbox remembers which of the
        // recipient's keys an envelope was sealed to, and two more states — 'held' (the recipient's
        // identity key changed: waits for `trust`, no envelope yet) and 'undelivered' (the recipient
        // said it could not open it: shown, and sent again by `resend`). Mailbox secret keys
        // replaced by a rotation are kept for the longest message lifetime, so messages sealed to
        // them before the rotation still open. `identity.published` (from v1, unused until now)
        // says whether the relay has been given the current mailbox key.
        migrator.registerMigration("v2: key ids, held and undelivered messages, previous mailbox keys") { db in
            try db.execute(sql: """
                ALTER TABLE sent ADD COLUMN key_id TEXT;
                -- Sealed again under its id (to new keys): a conflict then means an older copy is
                -- still on the relay, to be waited out, not a refusal.
                ALTER TABLE sent ADD COLUMN resealed INTEGER NOT NULL DEFAULT 0;
                -- For a message that did not open: the id of the notice that told its author.
                ALTER TABLE rejected ADD COLUMN notice_id TEXT;
                CREATE TABLE previous_mailbox_keys (
                    public_key BLOB PRIMARY KEY,
                    secret_key BLOB NOT NULL,
                    retired_at REAL NOT NULL
                ) WITHOUT ROWID;
                """)
        }
        // Ratchets with forward secrecy (spec/ratchet.md): this device's signed prekeys (the
        // current one has no `retired_at`; replaced ones are kept for the longest message lifetime)
        // and one-time prekeys (erased when a ratchet start uses them); the ratchets with each
        // contact, one of them active for sending; and per contact the signed prekey of its bundle
        // and whether a version 2 message was accepted from it (version 1 is refused after that).
        // The table `sessions`, its index and `contacts.sessions_used` keep the word these ratchets
        // had before sign-in and ratchet got a word each: renaming them would take a migration.
        migrator.registerMigration("v3: prekeys, sessions") { db in
            try db.execute(sql: """
                CREATE TABLE signed_prekeys (
                    id INTEGER PRIMARY KEY,
                    secret_key BLOB NOT NULL,
                    created_at REAL NOT NULL,
                    retired_at REAL
                );
                CREATE TABLE one_time_prekeys (
                    id INTEGER PRIMARY KEY,
                    secret_key BLOB NOT NULL,
                    created_at REAL NOT NULL
                );
                CREATE TABLE sessions (
                    id BLOB PRIMARY KEY,
                    contact TEXT NOT NULL,
                    peer_identity BLOB NOT NULL,
                    state BLOB NOT NULL,
                    active INTEGER NOT NULL DEFAULT 0,
                    used_at REAL NOT NULL
                ) WITHOUT ROWID;
                CREATE INDEX sessions_by_contact ON sessions (contact, active);
                ALTER TABLE contacts ADD COLUMN signed_prekey_id INTEGER;
                ALTER TABLE contacts ADD COLUMN signed_prekey BLOB;
                ALTER TABLE contacts ADD COLUMN sessions_used INTEGER NOT NULL DEFAULT 0;
                """)
        }
        // Notices only to contacts (spec/envelope.md §4.2 item 4): when this device's keys were
        // made, so that a message stored on the relay before then — sealed to a previous install's
        // keys — can still be answered. NULL for identities made before this column: no such
        // exception for them.
        migrator.registerMigration("v4: identity.created_at") { db in
            try db.execute(sql: "ALTER TABLE identity ADD COLUMN created_at REAL")
        }
        // Attachments (issue 27, docs/design/attachments.md §6). `uploads`: a file send until its
        // blob is complete on the relay, each step persisted before the next so that `flush`
        // resumes it (stage 'created': the blob not yet created on the relay; 'registered':
        // created, the file not yet encrypted; 'encrypted': the ciphertext is in `spool_path` and
        // the message body, with the file's reference, is in `sent`, which holds the send in the
        // new state 'uploading' meanwhile). `attachments`: one row per file a stored message
        // carries (inline ones first, then the blobs), and where it stands on this device.
        migrator.registerMigration("v5: uploads, received attachments") { db in
            try db.execute(sql: """
                CREATE TABLE uploads (
                    message_id TEXT PRIMARY KEY,
                    blob_id TEXT NOT NULL UNIQUE,
                    recipient TEXT NOT NULL,
                    source_path TEXT NOT NULL,
                    spool_path TEXT NOT NULL,
                    plain_size INTEGER NOT NULL,
                    size INTEGER NOT NULL,
                    media_type TEXT NOT NULL,
                    name TEXT,
                    preview BLOB,
                    caption TEXT,
                    sender_name TEXT,
                    stage TEXT NOT NULL,
                    created_at REAL NOT NULL
                ) WITHOUT ROWID;
                CREATE TABLE attachments (
                    message_id TEXT NOT NULL,
                    idx INTEGER NOT NULL,
                    blob_id TEXT,
                    plain_size INTEGER NOT NULL,
                    media_type TEXT NOT NULL,
                    name TEXT,
                    state TEXT NOT NULL,
                    path TEXT,
                    reason TEXT,
                    PRIMARY KEY (message_id, idx)
                ) WITHOUT ROWID;
                """)
        }
        // v6: what an upload was sealed with (file key, secretstream header) and what its source
        // looked like then, stored before the first part goes up: encryption and upload run as a
        // pipeline, and a send resumed before encryption finished seals the same file again into
        // the same ciphertext, so the parts the relay holds stay valid.
        migrator.registerMigration("v6: uploads.file_key, stream_header, source_stamp") { db in
            try db.execute(sql: """
                ALTER TABLE uploads ADD COLUMN file_key BLOB;
                ALTER TABLE uploads ADD COLUMN stream_header BLOB;
                ALTER TABLE uploads ADD COLUMN source_stamp TEXT;
                """)
        }
        // v7: each part's ciphertext digest (BLAKE2b-256, its `Mailslot-Digest`), stored before
        // the part goes up. A resumed sealing compares every part it makes again with it: the
        // source stamp of v6 misses a file changed within the modification time's granularity,
        // and other bytes sealed under the same key and header would repeat the keystream
        // (spec/attachments.md §6.1). Rows go with their upload.
        migrator.registerMigration("v7: upload_parts") { db in
            try db.execute(sql: """
                CREATE TABLE upload_parts (
                    message_id TEXT NOT NULL,
                    part INTEGER NOT NULL,
                    digest BLOB NOT NULL,
                    PRIMARY KEY (message_id, part)
                ) WITHOUT ROWID;
                """)
        }
        // v8: at-least-once handling (``MailslotClient/messages(onState:)``). A received message
        // is `handled` once the app is done with it; until then the stream yields it again, after
        // a restart too. Rows stored before this column were handed to the app already: handled.
        migrator.registerMigration("v8: inbox.handled") { db in
            try db.execute(sql: """
                ALTER TABLE inbox ADD COLUMN handled INTEGER NOT NULL DEFAULT 1;
                CREATE INDEX inbox_unhandled ON inbox (received_at, id) WHERE handled = 0;
                """)
        }
        // v9: wake-ups (docs/design/wakeups.md §7.1, spec/push.md). `push_targets`: each push
        // target this device registered, as the provider members of its `PUT` body (JSON, without
        // the tag), so that every sign-in registers them again — the relay drops a registration
        // with the sign-in that wrote it. `tag` is the one given at registration, NULL for the
        // account's own tag. `push_account`: that tag, random, made once per store (one store,
        // one account). `sent.wake`: a create that is not worth waking a phone (NULL: decided by
        // the message's type, as for every row written before this column).
        migrator.registerMigration("v9: push_targets, push_account, sent.wake") { db in
            try db.execute(sql: """
                CREATE TABLE push_targets (
                    id TEXT PRIMARY KEY,
                    provider TEXT NOT NULL,
                    target TEXT NOT NULL,
                    tag TEXT,
                    updated_at REAL NOT NULL
                ) WITHOUT ROWID;
                CREATE TABLE push_account (
                    id INTEGER PRIMARY KEY CHECK (id = 1),
                    tag TEXT NOT NULL
                );
                ALTER TABLE sent ADD COLUMN wake INTEGER;
                """)
        }
        // v10: groups (issue 30, docs/design/groups.md §7.1; the design's "v7", taken by then).
        // The relay keeps no group state: all of it is here. `groups`: the folded state of each
        // group this device knows, as JSON (spec/groups.md §1), with the version this device folds
        // from (`origin`: 1, or the version of the change that welcomed it, whose `base` is kept)
        // and whether this user is still in it. `group_changes`: every verified signed change,
        // accepted by the fold or not (authority is decided in the fold, never at arrival).
        // `group_states`: every state hash this device reached, to tell "a state I never had"
        // from "one I have passed". `group_held`: group messages not decided yet — stored, opened,
        // in the transaction that advances their ratchet, then decided (shown, held for a change
        // not seen yet, or rejected). `group_copies`: one row per member per group message sent,
        // each with its own envelope (every copy is sealed in its own pairwise ratchet); the
        // `sent` row of a group send has recipient '' and summarises them. `group_asks`: when this
        // device last asked a peer for changes, and last answered one (the bounds of §3.3–§3.4).
        migrator.registerMigration("v10: groups") { db in
            try db.execute(sql: """
                CREATE TABLE groups (
                    id TEXT PRIMARY KEY,
                    state BLOB NOT NULL,
                    state_hash BLOB NOT NULL,
                    version INTEGER NOT NULL,
                    origin INTEGER NOT NULL,
                    base BLOB,
                    status TEXT NOT NULL,
                    removed_by TEXT,
                    updated_at REAL NOT NULL
                ) WITHOUT ROWID;
                CREATE TABLE group_changes (
                    group_id TEXT NOT NULL,
                    change_id BLOB NOT NULL,
                    version INTEGER NOT NULL,
                    author TEXT NOT NULL,
                    change BLOB NOT NULL,
                    accepted INTEGER NOT NULL,
                    received_at REAL NOT NULL,
                    PRIMARY KEY (group_id, change_id)
                ) WITHOUT ROWID;
                CREATE INDEX group_changes_by_version ON group_changes (group_id, version);
                CREATE TABLE group_states (
                    group_id TEXT NOT NULL,
                    version INTEGER NOT NULL,
                    state_hash BLOB NOT NULL,
                    PRIMARY KEY (group_id, version, state_hash)
                ) WITHOUT ROWID;
                CREATE TABLE group_held (
                    message_id TEXT PRIMARY KEY,
                    group_id TEXT NOT NULL,
                    version INTEGER NOT NULL,
                    sender TEXT NOT NULL,
                    body BLOB NOT NULL,
                    received_at REAL NOT NULL
                ) WITHOUT ROWID;
                CREATE INDEX group_held_by_group ON group_held (group_id, version);
                CREATE TABLE group_copies (
                    message_id TEXT NOT NULL,
                    recipient TEXT NOT NULL,
                    envelope BLOB,
                    key_id TEXT,
                    state TEXT NOT NULL,
                    attempts INTEGER NOT NULL DEFAULT 0,
                    next_attempt_at REAL NOT NULL DEFAULT 0,
                    last_error TEXT,
                    resealed INTEGER NOT NULL DEFAULT 0,
                    PRIMARY KEY (message_id, recipient)
                ) WITHOUT ROWID;
                CREATE INDEX group_copies_due ON group_copies (state, next_attempt_at);
                CREATE TABLE group_asks (
                    group_id TEXT NOT NULL,
                    peer TEXT NOT NULL,
                    asked_at REAL NOT NULL,
                    answered_at REAL,
                    PRIMARY KEY (group_id, peer)
                ) WITHOUT ROWID;
                ALTER TABLE inbox ADD COLUMN group_id TEXT;
                ALTER TABLE sent ADD COLUMN group_id TEXT;
                ALTER TABLE rejected ADD COLUMN group_id TEXT;
                ALTER TABLE uploads ADD COLUMN group_id TEXT;
                """)
        }
        return migrator
    }
}
