import Logging
import PostgresNIO

/// The PostgreSQL store's tables, as versioned migrations recorded in a table of their own
/// (`mailslot_migrations`). A migration, once released, never changes: add a new one instead.
/// spec/protocol.md §Storage describes what each column holds; the tables mirror the SQLite ones
/// (``Schema``), in their latest form.
///
/// Several relays may start at once against one database: each applies the migrations it lacks
/// inside one transaction holding a transaction-level advisory lock, so nodes migrate one at a
/// time and a node that waited finds the work done. A database migrated by a newer binary (a
/// version this one does not know) is refused: this binary would misread its tables.
enum PostgresSchema {
    /// One step of the schema.
    struct Migration: Sendable {
        let version: Int32
        let name: String
        let sql: [String]
    }

    /// The advisory lock key every node takes to migrate ("mailslot" in ASCII, as a number).
    static let lockKey: Int64 = 0x6D61_696C_736C_6F74
    /// The advisory lock key of the VACUUM after erasures: one node at a time runs it.
    static let vacuumLockKey: Int64 = lockKey + 1
    /// The advisory lock key of writes that change sizes (``PostgresStore/takeWriteLock(_:_:)``).
    static let writeLockKey: Int64 = lockKey + 2

    /// The newest version this binary knows.
    static var latestVersion: Int32 { migrations.last!.version }

    /// Why a database cannot be used.
    struct Refusal: Error, CustomStringConvertible {
        let description: String
    }

    static let migrations: [Migration] = [
        Migration(version: 1, name: "documents, key bundles, messages, block lists, sessions, sizes", sql: [
            """
            CREATE TABLE documents (
                uid TEXT PRIMARY KEY,
                body BYTEA NOT NULL,
                updated_at BIGINT NOT NULL
            )
            """,
            // key_id: the bundle's KeyBundle.keyID, so that a create naming keys is checked with one lookup.
            """
            CREATE TABLE key_bundles (
                uid TEXT PRIMARY KEY,
                bundle BYTEA NOT NULL,
                key_id TEXT,
                updated_at BIGINT NOT NULL
            )
            """,
            // seq orders each mailbox and is the list cursor; it comes from one sequence, so it is
            // never reused after a delete. A sequence alone does not order a mailbox: a
            // transaction may draw a seq early and commit late, after a reader saw a higher seq
            // and moved its cursor past the lower one. So creates run under the write lock
            // (PostgresStore.takeWriteLock, since migration 2; before it, each create locked its
            // mailbox's mailbox_sizes row first): they commit one after another, in seq order.
            """
            CREATE TABLE messages (
                seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                recipient TEXT NOT NULL,
                id TEXT NOT NULL,
                author TEXT NOT NULL,
                created_at BIGINT NOT NULL,
                expires_at BIGINT NOT NULL,
                size BIGINT NOT NULL,
                envelope TEXT NOT NULL,
                lease_until BIGINT,
                lease_holder TEXT,
                UNIQUE (recipient, id)
            )
            """,
            "CREATE INDEX messages_by_mailbox ON messages (recipient, seq)",
            "CREATE INDEX messages_by_expiry ON messages (expires_at)",
            // author in byte order (collation "C"), as SQLite pages it.
            """
            CREATE TABLE blocked (
                owner TEXT NOT NULL,
                author TEXT COLLATE "C" NOT NULL,
                created_at BIGINT NOT NULL,
                PRIMARY KEY (owner, author)
            )
            """,
            // Only hashes of session secrets are stored. kind: 0 = access, 1 = refresh; no row of
            // another kind can be read as an access session. family ties a sign-in's sessions
            // together, so reuse of a spent refresh token can revoke them all.
            """
            CREATE TABLE sessions (
                hash BYTEA PRIMARY KEY,
                kind SMALLINT NOT NULL CHECK (kind IN (0, 1)),
                uid TEXT NOT NULL,
                family BYTEA NOT NULL,
                expires_at BIGINT NOT NULL,
                spent SMALLINT NOT NULL DEFAULT 0 CHECK (spent IN (0, 1))
            )
            """,
            "CREATE INDEX sessions_by_family ON sessions (family)",
            "CREATE INDEX sessions_by_expiry ON sessions (expires_at)",
            "CREATE INDEX sessions_by_uid ON sessions (uid)",
            // Each mailbox's stored rows and each author's stored bytes, kept by the triggers
            // below, so that the pending limit and the author quota are one lookup per create. A
            // row is gone with the last message: no trace of a mailbox or author with nothing
            // stored.
            """
            CREATE TABLE mailbox_sizes (
                recipient TEXT PRIMARY KEY,
                stored BIGINT NOT NULL
            )
            """,
            """
            CREATE TABLE author_sizes (
                author TEXT PRIMARY KEY,
                bytes BIGINT NOT NULL
            )
            """,
            """
            CREATE FUNCTION mailslot_message_stored() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                INSERT INTO mailbox_sizes (recipient, stored) VALUES (NEW.recipient, 1)
                    ON CONFLICT (recipient) DO UPDATE SET stored = mailbox_sizes.stored + 1;
                INSERT INTO author_sizes (author, bytes) VALUES (NEW.author, NEW.size)
                    ON CONFLICT (author) DO UPDATE SET bytes = author_sizes.bytes + NEW.size;
                RETURN NULL;
            END $$
            """,
            """
            CREATE FUNCTION mailslot_message_erased() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                UPDATE mailbox_sizes SET stored = stored - 1 WHERE recipient = OLD.recipient;
                DELETE FROM mailbox_sizes WHERE recipient = OLD.recipient AND stored <= 0;
                UPDATE author_sizes SET bytes = bytes - OLD.size WHERE author = OLD.author;
                DELETE FROM author_sizes WHERE author = OLD.author AND bytes <= 0;
                RETURN NULL;
            END $$
            """,
            "CREATE TRIGGER messages_stored AFTER INSERT ON messages FOR EACH ROW EXECUTE FUNCTION mailslot_message_stored()",
            "CREATE TRIGGER messages_erased AFTER DELETE ON messages FOR EACH ROW EXECUTE FUNCTION mailslot_message_erased()",
        ]),
        Migration(version: 2, name: "subscription generations; erasure-minded autovacuum", sql: [
            // A new subscription's generation: the highest one, on any node, is the live one
            // (PostgresNotifications.announceSubscription).
            "CREATE SEQUENCE subscription_generations AS BIGINT",
            // Each mailbox's newest subscription generation, so that a node that missed
            // announcements (its listening connection dropped) can still end its older ones.
            """
            CREATE TABLE live_subscriptions (
                uid TEXT PRIMARY KEY,
                generation BIGINT NOT NULL
            )
            """,
            // The triggers name their tables unqualified: they must find them whoever deletes a
            // message (an operator as another role, a restore), not only under the relay's search_path.
            "ALTER FUNCTION mailslot_message_stored() SET search_path FROM CURRENT",
            "ALTER FUNCTION mailslot_message_erased() SET search_path FROM CURRENT",
            // An erased message's bytes stay in the table's pages until VACUUM frees the space and
            // a later write overwrites it (SECURITY.md "Erasure on PostgreSQL"). Tables of
            // short-lived rows are vacuumed after a fixed number of dead rows rather than a
            // fraction of the table, and without the cost pauses that let autovacuum fall behind.
            """
            ALTER TABLE messages SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 500,
                autovacuum_vacuum_cost_delay = 0, autovacuum_vacuum_insert_scale_factor = 0,
                autovacuum_vacuum_insert_threshold = 5000)
            """,
            // A create in one statement (one round trip instead of eight), with the refusals of
            // SQLiteStore in the same order, every one decided before anything is written, so that a
            // refusal changes nothing and leaves the surrounding transaction (shared with other
            // writes) usable. It must run under the write lock (PostgresStore.takeWriteLock): writes
            // that change sizes run one at a time across all nodes, which is also what keeps each
            // mailbox's seq in commit order, and the quota and pending limit exact.
            // outcome: created, duplicate, conflict, blocked, stale_keys, mailbox_full, author_quota.
            """
            CREATE FUNCTION mailslot_create_message(p_recipient TEXT, p_id TEXT, p_author TEXT, p_envelope TEXT,
                p_size BIGINT, p_key_id TEXT, p_now BIGINT, p_expires_at BIGINT, p_max_pending BIGINT,
                p_max_author_bytes BIGINT,
                OUT outcome TEXT, OUT seq BIGINT, OUT created_at BIGINT, OUT expires_at BIGINT,
                OUT lease_until BIGINT, OUT lease_holder TEXT, OUT erased_expired BOOLEAN)
            LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
            DECLARE
                v_existing messages%ROWTYPE;
                v_expired_seq BIGINT;
                v_stored BIGINT;
                v_author_bytes BIGINT;
            BEGIN
                erased_expired := false;
                SELECT * INTO v_existing FROM messages m WHERE m.recipient = p_recipient AND m.id = p_id;
                IF FOUND THEN
                    IF v_existing.expires_at <= p_now THEN
                        -- Expired but not swept yet: gone for every purpose; erased below if the create goes ahead.
                        v_expired_seq := v_existing.seq;
                    ELSIF v_existing.author = p_author AND v_existing.envelope = p_envelope THEN
                        outcome := 'duplicate';
                        seq := v_existing.seq; created_at := v_existing.created_at; expires_at := v_existing.expires_at;
                        lease_until := v_existing.lease_until; lease_holder := v_existing.lease_holder;
                        RETURN;
                    ELSE
                        outcome := 'conflict';
                        RETURN;
                    END IF;
                END IF;
                IF EXISTS (SELECT 1 FROM blocked b WHERE b.owner = p_recipient AND b.author = p_author) THEN
                    outcome := 'blocked';
                    RETURN;
                END IF;
                IF p_key_id IS NOT NULL AND (SELECT k.key_id FROM key_bundles k WHERE k.uid = p_recipient) IS DISTINCT FROM p_key_id THEN
                    outcome := 'stale_keys';
                    RETURN;
                END IF;
                v_stored := coalesce((SELECT s.stored FROM mailbox_sizes s WHERE s.recipient = p_recipient), 0);
                IF v_stored >= p_max_pending THEN
                    -- Near the limit only: expired messages the sweeper has not erased yet do not count.
                    v_stored := v_stored - (SELECT count(*) FROM messages m WHERE m.recipient = p_recipient AND m.expires_at <= p_now);
                    IF v_stored >= p_max_pending THEN
                        outcome := 'mailbox_full';
                        RETURN;
                    END IF;
                END IF;
                v_author_bytes := coalesce((SELECT a.bytes FROM author_sizes a WHERE a.author = p_author), 0);
                IF v_expired_seq IS NOT NULL AND v_existing.author = p_author THEN
                    v_author_bytes := v_author_bytes - v_existing.size;
                END IF;
                IF v_author_bytes + p_size > p_max_author_bytes THEN
                    outcome := 'author_quota';
                    RETURN;
                END IF;
                IF v_expired_seq IS NOT NULL THEN
                    DELETE FROM messages m WHERE m.seq = v_expired_seq;
                    erased_expired := true;
                END IF;
                INSERT INTO messages (recipient, id, author, created_at, expires_at, size, envelope)
                    VALUES (p_recipient, p_id, p_author, p_now, p_expires_at, p_size, p_envelope) RETURNING messages.seq INTO seq;
                outcome := 'created';
                created_at := p_now;
                expires_at := p_expires_at;
            END $$
            """,
            """
            ALTER TABLE documents SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 50,
                autovacuum_vacuum_cost_delay = 0)
            """,
            """
            ALTER TABLE key_bundles SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 50,
                autovacuum_vacuum_cost_delay = 0)
            """,
        ]),
        // SQLite's v7. A prekey is no message: it changes no size, so its writes do not take the
        // write lock. Uploads and claims hold the owner's advisory lock (prekeys) while they
        // count, so the counts are exact (PostgresStore.claimPrekey); a claim deletes the lowest
        // row no other claim has locked (SKIP LOCKED), so concurrent claims, on any node, each
        // get another key or none.
        Migration(version: 3, name: "one-time prekeys, identity keys", sql: [
            """
            CREATE TABLE prekeys (
                uid TEXT NOT NULL,
                id BIGINT NOT NULL CHECK (id BETWEEN 1 AND 4294967295),
                key TEXT NOT NULL CHECK (length(key) = 43),
                created_at BIGINT NOT NULL,
                PRIMARY KEY (uid, id)
            )
            """,
            """
            ALTER TABLE prekeys SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 50,
                autovacuum_vacuum_cost_delay = 0)
            """,
            // Beside each bundle its identity key, so that a bundle of another identity erases the
            // old identity's prekeys with one lookup; read from the stored bundles' JSON. One that
            // cannot be read gets none, and its identity counts as another one.
            "ALTER TABLE key_bundles ADD COLUMN identity_key TEXT",
            """
            DO $$
            DECLARE
                v_uid TEXT;
            BEGIN
                FOR v_uid IN SELECT uid FROM key_bundles LOOP
                    BEGIN
                        UPDATE key_bundles SET identity_key = convert_from(bundle, 'UTF8')::jsonb ->> 'identity_key' WHERE uid = v_uid;
                    EXCEPTION WHEN others THEN
                        NULL;
                    END;
                END LOOP;
            END $$
            """,
        ]),
        // A group-commit batch in one statement (PostgresGroupCommit): a statement and its
        // executor start cost more than a row, so the writes of a batch go in together, and the size
        // counters are kept per statement rather than per row. The row triggers become statement
        // triggers over transition tables (one grouped upsert per statement, whoever writes:
        // batches, sweeps, an operator); the counters stay exact, as before.
        Migration(version: 4, name: "write batches in one statement; size counters per statement", sql: [
            // Dropping a trigger locks `messages` outright, behind any open transaction on it (a
            // relay of the previous version at work, a VACUUM): give up after a while rather than
            // hold every relay's reads and writes queued behind the wait (migrate tries again).
            "SET LOCAL lock_timeout = '5s'",
            "DROP TRIGGER messages_stored ON messages",
            "DROP TRIGGER messages_erased ON messages",
            "DROP FUNCTION mailslot_message_stored()",
            "DROP FUNCTION mailslot_message_erased()",
            """
            CREATE FUNCTION mailslot_messages_stored() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
            BEGIN
                IF NOT EXISTS (SELECT 1 FROM stored_rows) THEN
                    RETURN NULL;
                END IF;
                INSERT INTO mailbox_sizes AS s (recipient, stored) SELECT n.recipient, count(*) FROM stored_rows n GROUP BY n.recipient
                    ON CONFLICT (recipient) DO UPDATE SET stored = s.stored + excluded.stored;
                INSERT INTO author_sizes AS a (author, bytes) SELECT n.author, sum(n.size) FROM stored_rows n GROUP BY n.author
                    ON CONFLICT (author) DO UPDATE SET bytes = a.bytes + excluded.bytes;
                RETURN NULL;
            END $$
            """,
            // A row is gone with the mailbox's (the author's) last message, as before.
            """
            CREATE FUNCTION mailslot_messages_erased() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
            BEGIN
                -- Most statements that erase nothing are acknowledgements repeated and sweeps that found nothing.
                IF NOT EXISTS (SELECT 1 FROM erased_rows) THEN
                    RETURN NULL;
                END IF;
                UPDATE mailbox_sizes s SET stored = s.stored - e.n
                    FROM (SELECT o.recipient, count(*) AS n FROM erased_rows o GROUP BY o.recipient) e WHERE s.recipient = e.recipient;
                DELETE FROM mailbox_sizes s WHERE s.stored <= 0 AND s.recipient IN (SELECT o.recipient FROM erased_rows o);
                UPDATE author_sizes a SET bytes = a.bytes - e.n
                    FROM (SELECT o.author, sum(o.size) AS n FROM erased_rows o GROUP BY o.author) e WHERE a.author = e.author;
                DELETE FROM author_sizes a WHERE a.bytes <= 0 AND a.author IN (SELECT o.author FROM erased_rows o);
                RETURN NULL;
            END $$
            """,
            """
            CREATE TRIGGER messages_stored AFTER INSERT ON messages REFERENCING NEW TABLE AS stored_rows
                FOR EACH STATEMENT EXECUTE FUNCTION mailslot_messages_stored()
            """,
            """
            CREATE TRIGGER messages_erased AFTER DELETE ON messages REFERENCING OLD TABLE AS erased_rows
                FOR EACH STATEMENT EXECUTE FUNCTION mailslot_messages_erased()
            """,
            // One batch of writes, in order (kinds: create, ack — the owner's erase —, unsend — the
            // author's). Every array has one element per write; '' stands for none (a create's
            // key id, an ack's author). Answers one row per write, `ord` its position (from 1):
            // outcome created, duplicate, conflict, blocked, stale_keys, mailbox_full, author_quota
            // (a create), erased or absent (an erase, with the erased row's expires_at). Takes the
            // write lock (PostgresStore.takeWriteLock) and sends `p_notify` to the other relays
            // (the caller passes it when the batch holds a create or an unsend: a refused one only
            // costs the listeners a needless look), inside the caller's transaction.
            //
            // Two ways, one result. When the writes cannot affect one another — no id twice, no id
            // already stored, no limit within reach even if every create succeeds — and are three
            // or more, they go in as one INSERT and one DELETE. Otherwise one by one, with
            // mailslot_create_message's checks in its order (migration 2; written out here rather
            // than called, since a call per write, with its search_path switch, cost more), so that
            // the answers are exactly those of the writes applied in submission order. Either way a refusal is decided before anything
            // is written. seq values are drawn in submission order, under the write lock, so each
            // mailbox's order is the order its creates were submitted and committed in.
            """
            CREATE FUNCTION mailslot_write_batch(p_kinds TEXT[], p_recipients TEXT[], p_ids TEXT[], p_authors TEXT[],
                p_envelopes TEXT[], p_sizes BIGINT[], p_key_ids TEXT[], p_now BIGINT[], p_expires_at BIGINT[],
                p_max_pending BIGINT[], p_max_author_bytes BIGINT[], p_notify TEXT)
            RETURNS TABLE (ord BIGINT, outcome TEXT, seq BIGINT, created_at BIGINT, expires_at BIGINT, lease_until BIGINT,
                lease_holder TEXT, erased_expired BOOLEAN)
            LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
            DECLARE
                v_creates INTEGER;
                v_erasures INTEGER;
                v_seqs BIGINT[];
                v_existing messages%ROWTYPE;
                v_expired_seq BIGINT;
                v_stored BIGINT;
                v_author_bytes BIGINT;
            BEGIN
                -- What the relay never sends is refused, not guessed at (simple expressions: no query).
                IF cardinality(p_kinds) <> ANY (ARRAY[cardinality(p_recipients), cardinality(p_ids), cardinality(p_authors),
                       cardinality(p_envelopes), cardinality(p_sizes), cardinality(p_key_ids), cardinality(p_now),
                       cardinality(p_expires_at), cardinality(p_max_pending), cardinality(p_max_author_bytes)])
                   OR NOT p_kinds <@ ARRAY['create', 'ack', 'unsend']
                   OR array_position(p_kinds, NULL) IS NOT NULL OR array_position(p_recipients, NULL) IS NOT NULL
                   OR array_position(p_ids, NULL) IS NOT NULL OR array_position(p_authors, NULL) IS NOT NULL
                   OR array_position(p_envelopes, NULL) IS NOT NULL OR array_position(p_sizes, NULL) IS NOT NULL
                   OR array_position(p_key_ids, NULL) IS NOT NULL OR array_position(p_now, NULL) IS NOT NULL
                   OR array_position(p_expires_at, NULL) IS NOT NULL OR array_position(p_max_pending, NULL) IS NOT NULL
                   OR array_position(p_max_author_bytes, NULL) IS NOT NULL THEN
                    RAISE EXCEPTION 'mailslot_write_batch: arrays of unequal lengths, an unknown kind or a null';
                END IF;
                PERFORM pg_advisory_xact_lock(\(writeLockKey));
                SELECT count(*) FILTER (WHERE k = 'create'), count(*) FILTER (WHERE k <> 'create')
                    INTO v_creates, v_erasures FROM unnest(p_kinds) AS k;
                -- Set-wise costs a few statements more than write by write, worth it from three writes on.
                IF v_creates + v_erasures >= 3
                   AND NOT EXISTS (SELECT 1 FROM unnest(p_recipients, p_ids) AS w(recipient, id) GROUP BY w.recipient, w.id HAVING count(*) > 1)
                   AND (v_creates = 0 OR NOT EXISTS (
                    WITH c AS (SELECT w.*,
                                      count(*) OVER (PARTITION BY w.recipient ORDER BY w.ord) AS mailbox_rank,
                                      sum(w.size) OVER (PARTITION BY w.author ORDER BY w.ord) AS author_sum
                               FROM unnest(p_kinds, p_recipients, p_ids, p_authors, p_sizes, p_max_pending, p_max_author_bytes)
                                    WITH ORDINALITY AS w(kind, recipient, id, author, size, max_pending, max_author_bytes, ord)
                               WHERE w.kind = 'create')
                    SELECT 1 FROM c JOIN messages m ON m.recipient = c.recipient AND m.id = c.id
                    UNION ALL
                    SELECT 1 FROM c
                    WHERE coalesce((SELECT s.stored FROM mailbox_sizes s WHERE s.recipient = c.recipient), 0) + c.mailbox_rank > c.max_pending
                       OR coalesce((SELECT a.bytes FROM author_sizes a WHERE a.author = c.author), 0) + c.author_sum > c.max_author_bytes))
                THEN
                    IF v_creates > 0 THEN
                        v_seqs := ARRAY(SELECT nextval(pg_get_serial_sequence('messages', 'seq')) FROM generate_series(1, v_creates));
                        RETURN QUERY
                        WITH c AS (SELECT w.*, row_number() OVER (ORDER BY w.ord) AS rank,
                                       CASE WHEN EXISTS (SELECT 1 FROM blocked b WHERE b.owner = w.recipient AND b.author = w.author) THEN 'blocked'
                                            WHEN w.key_id <> '' AND (SELECT k.key_id FROM key_bundles k WHERE k.uid = w.recipient)
                                                 IS DISTINCT FROM w.key_id THEN 'stale_keys'
                                            ELSE 'created' END AS outcome
                                   FROM unnest(p_kinds, p_recipients, p_ids, p_authors, p_envelopes, p_sizes, p_key_ids, p_now, p_expires_at)
                                        WITH ORDINALITY AS w(kind, recipient, id, author, envelope, size, key_id, now, expires_at, ord)
                                   WHERE w.kind = 'create'),
                             -- Run to completion although nothing reads it, as every data-modifying WITH is.
                             inserted AS (
                                INSERT INTO messages (seq, recipient, id, author, created_at, expires_at, size, envelope) OVERRIDING SYSTEM VALUE
                                SELECT v_seqs[c.rank], c.recipient, c.id, c.author, c.now, c.expires_at, c.size, c.envelope
                                FROM c WHERE c.outcome = 'created')
                        SELECT c.ord, c.outcome, CASE WHEN c.outcome = 'created' THEN v_seqs[c.rank] END, c.now, c.expires_at,
                               NULL::BIGINT, NULL::TEXT, false
                        FROM c;
                    END IF;
                    IF v_erasures > 0 THEN
                        RETURN QUERY
                        WITH w AS (SELECT * FROM unnest(p_kinds, p_recipients, p_ids, p_authors)
                                            WITH ORDINALITY AS w(kind, recipient, id, author, ord) WHERE w.kind <> 'create'),
                             erased AS (DELETE FROM messages m USING w
                                        WHERE m.recipient = w.recipient AND m.id = w.id AND (w.kind = 'ack' OR m.author = w.author)
                                        RETURNING w.ord, w.kind, m.expires_at)
                        SELECT w.ord, CASE WHEN e.ord IS NULL THEN 'absent' ELSE 'erased' END, NULL::BIGINT, NULL::BIGINT, e.expires_at,
                               NULL::BIGINT, NULL::TEXT, false
                        FROM w LEFT JOIN erased e ON e.ord = w.ord;
                    END IF;
                ELSE
                    FOR i IN 1 .. coalesce(array_length(p_kinds, 1), 0) LOOP
                        ord := i; outcome := NULL; seq := NULL; created_at := NULL; expires_at := NULL;
                        lease_until := NULL; lease_holder := NULL; erased_expired := false;
                        IF p_kinds[i] = 'create' THEN
                            <<create>>
                            BEGIN
                                v_expired_seq := NULL;
                                SELECT * INTO v_existing FROM messages m WHERE m.recipient = p_recipients[i] AND m.id = p_ids[i];
                                IF FOUND THEN
                                    IF v_existing.expires_at <= p_now[i] THEN
                                        v_expired_seq := v_existing.seq;
                                    ELSIF v_existing.author = p_authors[i] AND v_existing.envelope = p_envelopes[i] THEN
                                        outcome := 'duplicate';
                                        seq := v_existing.seq; created_at := v_existing.created_at; expires_at := v_existing.expires_at;
                                        lease_until := v_existing.lease_until; lease_holder := v_existing.lease_holder;
                                        EXIT create;
                                    ELSE
                                        outcome := 'conflict';
                                        EXIT create;
                                    END IF;
                                END IF;
                                IF EXISTS (SELECT 1 FROM blocked b WHERE b.owner = p_recipients[i] AND b.author = p_authors[i]) THEN
                                    outcome := 'blocked';
                                    EXIT create;
                                END IF;
                                IF p_key_ids[i] <> '' AND (SELECT k.key_id FROM key_bundles k WHERE k.uid = p_recipients[i])
                                   IS DISTINCT FROM p_key_ids[i] THEN
                                    outcome := 'stale_keys';
                                    EXIT create;
                                END IF;
                                v_stored := coalesce((SELECT s.stored FROM mailbox_sizes s WHERE s.recipient = p_recipients[i]), 0);
                                IF v_stored >= p_max_pending[i] THEN
                                    v_stored := v_stored - (SELECT count(*) FROM messages m
                                                            WHERE m.recipient = p_recipients[i] AND m.expires_at <= p_now[i]);
                                    IF v_stored >= p_max_pending[i] THEN
                                        outcome := 'mailbox_full';
                                        EXIT create;
                                    END IF;
                                END IF;
                                v_author_bytes := coalesce((SELECT a.bytes FROM author_sizes a WHERE a.author = p_authors[i]), 0);
                                IF v_expired_seq IS NOT NULL AND v_existing.author = p_authors[i] THEN
                                    v_author_bytes := v_author_bytes - v_existing.size;
                                END IF;
                                IF v_author_bytes + p_sizes[i] > p_max_author_bytes[i] THEN
                                    outcome := 'author_quota';
                                    EXIT create;
                                END IF;
                                IF v_expired_seq IS NOT NULL THEN
                                    DELETE FROM messages m WHERE m.seq = v_expired_seq;
                                    erased_expired := true;
                                END IF;
                                INSERT INTO messages (recipient, id, author, created_at, expires_at, size, envelope)
                                    VALUES (p_recipients[i], p_ids[i], p_authors[i], p_now[i], p_expires_at[i], p_sizes[i], p_envelopes[i])
                                    RETURNING messages.seq INTO seq;
                                outcome := 'created';
                                created_at := p_now[i];
                                expires_at := p_expires_at[i];
                            END;
                        ELSIF p_kinds[i] IN ('ack', 'unsend') THEN
                            DELETE FROM messages m WHERE m.recipient = p_recipients[i] AND m.id = p_ids[i]
                                AND (p_kinds[i] = 'ack' OR m.author = p_authors[i])
                                RETURNING m.expires_at INTO expires_at;
                            outcome := CASE WHEN FOUND THEN 'erased' ELSE 'absent' END;
                        ELSE
                            RAISE EXCEPTION 'mailslot_write_batch: unknown kind %', p_kinds[i];
                        END IF;
                        RETURN NEXT;
                    END LOOP;
                END IF;
                IF p_notify IS NOT NULL THEN
                    PERFORM pg_notify('mailslot', p_notify);
                END IF;
            END $$
            """,
        ]),
        // SQLite's v8: blobs (issue 27, spec/protocol.md §4.15–§4.21), what the relay keeps about
        // the files its blob storage holds; docs/design/attachments.md §3.2. Blob writes change
        // no mailbox or message size, so none takes the write lock: a create holds its author's
        // advisory lock while it counts (PostgresStore.createBlob), a completion the blob's
        // while the storage completes, and the writes that erase lock the blob's row first. Ids,
        // uids and authors in byte order (collation "C"), as SQLite pages them. The per-author
        // counters are kept by a row trigger: blob writes are one row each, few beside messages.
        Migration(version: 5, name: "blobs", sql: [
            // state: 0 uploading, 1 complete. storage_key: where the storage keeps the bytes,
            // random, so an id created again after an erasure never meets the old bytes.
            // upload_handle: the object store's multipart upload id while uploading.
            """
            CREATE TABLE blobs (
                id TEXT COLLATE "C" PRIMARY KEY,
                author TEXT COLLATE "C" NOT NULL,
                size BIGINT NOT NULL CHECK (size > 0),
                part_size BIGINT NOT NULL CHECK (part_size > 0),
                parts BIGINT NOT NULL CHECK (parts > 0),
                state SMALLINT NOT NULL CHECK (state IN (0, 1)),
                storage_key TEXT NOT NULL UNIQUE,
                upload_handle TEXT,
                ttl_seconds BIGINT NOT NULL,
                created_at BIGINT NOT NULL,
                upload_expires_at BIGINT NOT NULL,
                completed_at BIGINT,
                expires_at BIGINT
            )
            """,
            "CREATE INDEX blobs_by_author ON blobs (author, id)",
            "CREATE INDEX blobs_uploading_by_expiry ON blobs (upload_expires_at) WHERE state = 0",
            "CREATE INDEX blobs_complete_by_expiry ON blobs (expires_at) WHERE state = 1",
            // Those yet to acknowledge.
            """
            CREATE TABLE blob_recipients (
                blob_id TEXT COLLATE "C" NOT NULL,
                uid TEXT COLLATE "C" NOT NULL,
                PRIMARY KEY (blob_id, uid)
            )
            """,
            "CREATE INDEX blob_recipients_by_uid ON blob_recipients (uid, blob_id)",
            """
            CREATE TABLE blob_parts (
                blob_id TEXT COLLATE "C" NOT NULL,
                number BIGINT NOT NULL CHECK (number > 0),
                digest BYTEA NOT NULL CHECK (length(digest) = 32),
                etag TEXT,
                PRIMARY KEY (blob_id, number)
            )
            """,
            // Each author's blob bytes (finished and unfinished) and unfinished uploads, so that
            // the bounds of a create are one lookup; a row is gone with the author's last blob.
            """
            CREATE TABLE blob_author_sizes (
                author TEXT COLLATE "C" PRIMARY KEY,
                bytes BIGINT NOT NULL,
                uploading BIGINT NOT NULL
            )
            """,
            """
            CREATE FUNCTION mailslot_blob_sizes() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
            BEGIN
                IF TG_OP = 'INSERT' THEN
                    INSERT INTO blob_author_sizes AS a (author, bytes, uploading)
                        VALUES (NEW.author, NEW.size, CASE WHEN NEW.state = 0 THEN 1 ELSE 0 END)
                        ON CONFLICT (author) DO UPDATE SET bytes = a.bytes + excluded.bytes, uploading = a.uploading + excluded.uploading;
                ELSIF TG_OP = 'UPDATE' THEN
                    IF OLD.state = 0 AND NEW.state = 1 THEN
                        UPDATE blob_author_sizes a SET uploading = a.uploading - 1 WHERE a.author = NEW.author;
                    END IF;
                ELSE
                    UPDATE blob_author_sizes a SET bytes = a.bytes - OLD.size,
                        uploading = a.uploading - CASE WHEN OLD.state = 0 THEN 1 ELSE 0 END
                        WHERE a.author = OLD.author;
                    DELETE FROM blob_author_sizes a WHERE a.author = OLD.author AND a.bytes <= 0 AND a.uploading <= 0;
                END IF;
                RETURN NULL;
            END $$
            """,
            """
            CREATE TRIGGER blobs_sizes AFTER INSERT OR DELETE OR UPDATE OF state ON blobs
                FOR EACH ROW EXECUTE FUNCTION mailslot_blob_sizes()
            """,
            // Storage keys whose bytes are still to be removed from the storage, queued by the
            // transaction that deleted their blob's rows.
            """
            CREATE TABLE blob_erasures (
                storage_key TEXT PRIMARY KEY,
                upload_handle TEXT,
                queued_at BIGINT NOT NULL,
                attempts INTEGER NOT NULL DEFAULT 0
            )
            """,
            "CREATE INDEX blob_erasures_by_age ON blob_erasures (queued_at, storage_key)",
        ] + ["blobs", "blob_recipients", "blob_parts", "blob_author_sizes", "blob_erasures"].map { table in
            // Erased rows' bytes stay in the pages until VACUUM: vacuumed after a few dead rows, as documents are.
            """
            ALTER TABLE \(table) SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 50,
                autovacuum_vacuum_cost_delay = 0)
            """
        }),
        // SQLite's v9: wake-ups (issue 29, docs/design/wakeups.md §1.4–§2.4). Push registrations
        // and at most one pending wake-up per registration, as on SQLite; uids, ids and routes in
        // byte order (collation "C"). Which node holds each mailbox's live subscription
        // (`live_subscriptions.node`) and which nodes are alive (`relay_nodes`, a heartbeat every
        // 10 s), so that a claim on any node can tell whether the owner is connected anywhere.
        Migration(version: 6, name: "push registrations and wake-ups", sql: [
            """
            CREATE TABLE push_registrations (
                uid TEXT COLLATE "C" NOT NULL,
                id TEXT COLLATE "C" NOT NULL,
                family BYTEA NOT NULL,
                provider SMALLINT NOT NULL CHECK (provider IN (1, 2, 3, 4)),
                target TEXT NOT NULL,
                route TEXT COLLATE "C" NOT NULL,
                tag TEXT NOT NULL DEFAULT '',
                version BIGINT NOT NULL,
                created_at BIGINT NOT NULL,
                updated_at BIGINT NOT NULL,
                woken_at BIGINT NOT NULL DEFAULT 0,
                failures INTEGER NOT NULL DEFAULT 0,
                PRIMARY KEY (uid, id)
            )
            """,
            "CREATE INDEX push_registrations_by_family ON push_registrations (family)",
            // event: the webhook id every attempt of one wake-up shares, drawn at its first claim.
            """
            CREATE TABLE push_wakeups (
                uid TEXT COLLATE "C" NOT NULL,
                id TEXT COLLATE "C" NOT NULL,
                provider SMALLINT NOT NULL,
                route TEXT COLLATE "C" NOT NULL,
                first_seq BIGINT NOT NULL,
                due_at BIGINT NOT NULL,
                attempt INTEGER NOT NULL DEFAULT 0,
                event TEXT,
                PRIMARY KEY (uid, id)
            )
            """,
            "CREATE INDEX push_wakeups_by_due ON push_wakeups (due_at)",
            // Its rows live seconds: vacuumed like messages.
            """
            ALTER TABLE push_wakeups SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 500,
                autovacuum_vacuum_cost_delay = 0, autovacuum_vacuum_insert_scale_factor = 0,
                autovacuum_vacuum_insert_threshold = 5000)
            """,
            "ALTER TABLE push_registrations SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 50, autovacuum_vacuum_cost_delay = 0)",
            // The node holding the mailbox's newest subscription; NULL once it ended there.
            "ALTER TABLE live_subscriptions ADD COLUMN node TEXT",
            "CREATE TABLE relay_nodes (node TEXT PRIMARY KEY, seen_at BIGINT NOT NULL)",
            // mailslot_write_batch with wake-ups (design §2.2): the writes as the migration-4
            // function applies them (that signature stays, for relays of the previous version
            // during a rolling upgrade: their creates wake nothing), then one set-wise insert of a
            // wake-up per registration of each created, waking write's recipient — the first such
            // message of the batch per registration; a registration with a pending wake-up keeps
            // it. Due at once, or an interval after the registration's last wake-up. Nothing here
            // can refuse a message: no foreign key, no constraint but the one ON CONFLICT handles.
            """
            CREATE FUNCTION mailslot_write_batch(p_kinds TEXT[], p_recipients TEXT[], p_ids TEXT[], p_authors TEXT[],
                p_envelopes TEXT[], p_sizes BIGINT[], p_key_ids TEXT[], p_now BIGINT[], p_expires_at BIGINT[],
                p_max_pending BIGINT[], p_max_author_bytes BIGINT[], p_notify TEXT, p_wake BOOLEAN[], p_wake_interval BIGINT)
            RETURNS TABLE (ord BIGINT, outcome TEXT, seq BIGINT, created_at BIGINT, expires_at BIGINT, lease_until BIGINT,
                lease_holder TEXT, erased_expired BOOLEAN)
            LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
            BEGIN
                IF cardinality(p_wake) <> cardinality(p_kinds) OR array_position(p_wake, NULL) IS NOT NULL OR p_wake_interval IS NULL THEN
                    RAISE EXCEPTION 'mailslot_write_batch: wake flags of another length, a null flag or no interval';
                END IF;
                RETURN QUERY
                WITH written AS MATERIALIZED (
                        SELECT * FROM mailslot_write_batch(p_kinds, p_recipients, p_ids, p_authors, p_envelopes, p_sizes, p_key_ids,
                                                           p_now, p_expires_at, p_max_pending, p_max_author_bytes, p_notify)),
                     queued AS (
                        INSERT INTO push_wakeups (uid, id, provider, route, first_seq, due_at, attempt)
                        SELECT DISTINCT ON (r.uid, r.id) r.uid, r.id, r.provider, r.route, w.seq,
                               greatest(w.created_at, r.woken_at + p_wake_interval), 0
                        FROM written w JOIN push_registrations r ON r.uid = p_recipients[w.ord]
                        WHERE w.outcome = 'created' AND p_wake[w.ord]
                        ORDER BY r.uid, r.id, w.seq
                        ON CONFLICT DO NOTHING)
                SELECT w.ord, w.outcome, w.seq, w.created_at, w.expires_at, w.lease_until, w.lease_holder, w.erased_expired
                FROM written w;
            END $$
            """,
            // The claim (design §2.4): up to p_limit due wake-ups, none of an excluded route or
            // provider, locked with SKIP LOCKED (two nodes never take one row) and deleted before
            // anything is sent. Each is then dropped when its mailbox holds no unexpired message
            // from first_seq on (the owner received them: a row with w_skip 'received'), put back
            // an interval later when a subscription to the mailbox is live on a node seen within
            // p_presence ms (w_skip 'connected'), or else returned with its registration as it is
            // now, whose woken_at becomes p_now (w_skip NULL). The skipped rows let the dispatcher
            // count its decisions (`mailslot_push_skipped_total`).
            """
            CREATE FUNCTION mailslot_claim_wakeups(p_now BIGINT, p_limit INTEGER, p_routes TEXT[], p_providers SMALLINT[],
                p_interval BIGINT, p_presence BIGINT)
            RETURNS TABLE (w_skip TEXT, w_uid TEXT, w_id TEXT, w_provider SMALLINT, w_target TEXT, w_route TEXT, w_tag TEXT,
                w_version BIGINT, w_first_seq BIGINT, w_attempt INTEGER, w_event TEXT)
            LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
            DECLARE
                t push_wakeups%ROWTYPE;
                v_registration RECORD;
                v_woken BIGINT;
            BEGIN
                FOR t IN
                    WITH due AS (SELECT d.uid, d.id FROM push_wakeups d
                                 WHERE d.due_at <= p_now AND NOT (d.route = ANY (p_routes)) AND NOT (d.provider = ANY (p_providers))
                                 ORDER BY d.due_at LIMIT p_limit FOR UPDATE SKIP LOCKED)
                    DELETE FROM push_wakeups w USING due WHERE w.uid = due.uid AND w.id = due.id
                    RETURNING w.uid, w.id, w.provider, w.route, w.first_seq, w.due_at, w.attempt, w.event
                LOOP
                    w_skip := NULL; w_uid := t.uid; w_id := t.id; w_provider := t.provider; w_target := NULL; w_route := t.route;
                    w_tag := NULL; w_version := NULL; w_first_seq := t.first_seq; w_attempt := t.attempt; w_event := t.event;
                    IF NOT EXISTS (SELECT 1 FROM messages m WHERE m.recipient = t.uid AND m.seq >= t.first_seq AND m.expires_at > p_now) THEN
                        w_skip := 'received';
                        RETURN NEXT;
                        CONTINUE;
                    END IF;
                    IF EXISTS (SELECT 1 FROM live_subscriptions l JOIN relay_nodes n ON n.node = l.node
                               WHERE l.uid = t.uid AND n.seen_at > p_now - p_presence) THEN
                        INSERT INTO push_wakeups AS p (uid, id, provider, route, first_seq, due_at, attempt, event)
                            VALUES (t.uid, t.id, t.provider, t.route, t.first_seq, p_now + p_interval, t.attempt, t.event)
                            ON CONFLICT (uid, id) DO UPDATE SET first_seq = least(p.first_seq, excluded.first_seq);
                        w_skip := 'connected';
                        RETURN NEXT;
                        CONTINUE;
                    END IF;
                    -- A first attempt goes only if the registration was not woken within the
                    -- interval. The create that made this row may have read an older woken_at
                    -- while another node's claim was committing; the UPDATE's condition is checked
                    -- again on the row as that claim left it, so one interval holds across nodes.
                    UPDATE push_registrations r SET woken_at = p_now
                        WHERE r.uid = t.uid AND r.id = t.id AND (t.attempt > 0 OR r.woken_at <= p_now - p_interval)
                        RETURNING r.provider, r.target, r.route, r.tag, r.version INTO v_registration;
                    IF NOT FOUND THEN
                        SELECT r.woken_at INTO v_woken FROM push_registrations r WHERE r.uid = t.uid AND r.id = t.id;
                        IF FOUND THEN
                            INSERT INTO push_wakeups AS p (uid, id, provider, route, first_seq, due_at, attempt, event)
                                VALUES (t.uid, t.id, t.provider, t.route, t.first_seq, v_woken + p_interval, t.attempt, t.event)
                                ON CONFLICT (uid, id) DO UPDATE SET first_seq = least(p.first_seq, excluded.first_seq);
                        END IF;
                        CONTINUE;
                    END IF;
                    w_provider := v_registration.provider; w_target := v_registration.target;
                    w_route := v_registration.route; w_tag := v_registration.tag; w_version := v_registration.version;
                    RETURN NEXT;
                END LOOP;
            END $$
            """,
        ]),
    ]

    /// Attempts of a migration that gave up waiting for a lock on its tables (`lock_timeout`).
    static let migrationAttempts = 6

    /// Applies the migrations the database lacks, one node at a time; refuses a database whose
    /// version is newer than ``latestVersion``. A migration that gave up waiting for a lock (its
    /// own `lock_timeout`, so that relays at work are not held behind it) is tried again.
    static func migrate(_ pool: PostgresPool, logger: Logger) async throws {
        var attempt = 1
        while true {
            do {
                return try await migrateOnce(pool, logger: logger)
            } catch let error as PSQLError where error.serverInfo?[.sqlState] == "55P03" && attempt < migrationAttempts {
                logger.warning("a migration waited too long for a lock on its tables; trying again", metadata: ["attempt": "\(attempt)"])
                attempt += 1
                try await Task.sleep(for: .seconds(1))
            }
        }
    }

    private static func migrateOnce(_ pool: PostgresPool, logger: Logger) async throws {
        try await PostgresStore.transaction(pool, logger: logger) { connection, logger in
            // Held until this transaction ends: a second node waits here, then finds the work done.
            try await connection.query("SELECT pg_advisory_xact_lock(\(lockKey))", logger: logger)
            try await connection.query("""
                CREATE TABLE IF NOT EXISTS mailslot_migrations (
                    version INTEGER PRIMARY KEY,
                    name TEXT NOT NULL,
                    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
                )
                """, logger: logger)
            let current = try await version(connection, logger: logger)
            guard current <= latestVersion else {
                throw Refusal(description: """
                    the database's schema is version \(current), newer than this relay knows (\(latestVersion)): \
                    upgrade the relay, or point it at another database
                    """)
            }
            for migration in migrations where migration.version > current {
                for statement in migration.sql {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                try await connection.query("INSERT INTO mailslot_migrations (version, name) VALUES (\(migration.version), \(migration.name))",
                                           logger: logger)
                logger.info("database migrated", metadata: ["version": "\(migration.version)"])
            }
        }
    }

    /// The database's schema version: 0 when nothing was migrated.
    static func version(_ connection: PostgresConnection, logger: Logger) async throws -> Int32 {
        let rows = try await connection.query("SELECT coalesce(max(version), 0) FROM mailslot_migrations", logger: logger)
        for try await version in rows.decode(Int32.self) { return version }
        return 0
    }
}
