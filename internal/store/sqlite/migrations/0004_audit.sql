-- The audit log (docs/audit.md). Writers only insert into audit_events, in the transaction of
-- the change they record; SealAudit later gives the events their place in the hash chain and
-- the Merkle tree, in a write of its own, which the one writer serializes with every other.
-- Times are unix microseconds (INTEGER).
--
-- An event costs its writer one row and nothing else: no index of pending events and no
-- AUTOINCREMENT counter, each of which would add a page to every commit's WAL frames (about 10%
-- of a claim's or a completion's cost each). Both are unnecessary on SQLite: writes are
-- serialized, so ids grow in commit order, events are never deleted, and a seal takes the
-- oldest pending events; the pending events are therefore exactly those after
-- audit_head.last_id, a range of the table itself. (Were the newest sealed events deleted, by
-- tampering with the file, new events could take their ids again: a seal checks that the head's
-- event is still there and stops otherwise.)

CREATE TABLE audit_events (
    -- Insertion order, internal to the store: the order in which pending events are sealed.
    id        INTEGER PRIMARY KEY,
    time      INTEGER NOT NULL,
    principal TEXT    NOT NULL,
    holder    TEXT    NOT NULL DEFAULT '',
    action    TEXT    NOT NULL,
    subject   TEXT    NOT NULL,
    -- A JSON object as written, or NULL: the hashes cover the details as they were given.
    details   TEXT,
    -- NULL until sealed; then 1, 2, ... in seal order (unique: audit_events_seq).
    seq       INTEGER,
    prev_hash BLOB,
    hash      BLOB
);

-- The sealed events by seq, each seq once. Partial, rather than a UNIQUE column, so that an
-- insert does not put a NULL in it: it changes only when a seal appends to it.
CREATE UNIQUE INDEX audit_events_seq ON audit_events (seq) WHERE seq IS NOT NULL;

-- The end of the sealed chain: one row. last_id is the id of event size (0 before the first
-- seal): the events after it are the pending ones.
CREATE TABLE audit_head (
    one     INTEGER PRIMARY KEY CHECK (one = 1),
    size    INTEGER NOT NULL,
    hash    BLOB,
    last_id INTEGER NOT NULL
);
INSERT INTO audit_head (one, size, hash, last_id) VALUES (1, 0, NULL, 0);

-- The stored hashes of the Merkle tree, by tlog.StoredHashIndex.
CREATE TABLE audit_tree_hashes (
    idx  INTEGER PRIMARY KEY,
    hash BLOB    NOT NULL
);

-- One signed checkpoint per seal.
CREATE TABLE audit_checkpoints (
    size       INTEGER PRIMARY KEY,
    root_hash  BLOB    NOT NULL,
    head_hash  BLOB    NOT NULL,
    note       BLOB    NOT NULL,
    created_at INTEGER NOT NULL
);
