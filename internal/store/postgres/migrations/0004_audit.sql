-- The audit log (docs/audit.md). Writers only insert into audit_events, in the transaction of
-- the change they record; a sealer, on any replica, later gives the events their place in the
-- hash chain and the Merkle tree, holding audit_head's row, which serializes the sealers.

-- An insert updates one index, audit_events_pending: the claims and completions that insert
-- their events in their own statements pay for nothing more. (No primary key on id: it is unique
-- by its sequence, and only the pending events are looked up by it.)
CREATE TABLE audit_events (
    -- Insertion order, internal to the store: the order in which pending events are sealed.
    id        bigserial   NOT NULL,
    time      timestamptz NOT NULL,
    principal text        NOT NULL,
    holder    text        NOT NULL DEFAULT '',
    action    text        NOT NULL,
    subject   text        NOT NULL,
    -- text, not jsonb: the hashes cover the details as written, numbers as they were given
    -- (jsonb would rewrite 1e2 as 100), and an insert need not parse them.
    details   text,
    -- NULL until sealed; then 1, 2, ... in seal order, each once.
    seq       bigint,
    prev_hash bytea,
    hash      bytea
);
-- The sealed log by seq; a pending event has no entry.
CREATE UNIQUE INDEX audit_events_seq ON audit_events (seq) WHERE seq IS NOT NULL;
-- The events waiting for a seal, in insertion order; it holds only them.
CREATE INDEX audit_events_pending ON audit_events (id) WHERE seq IS NULL;

-- The end of the sealed chain: one row, locked by a seal for its whole transaction.
CREATE TABLE audit_head (
    one  boolean PRIMARY KEY DEFAULT true CHECK (one),
    size bigint  NOT NULL,
    hash bytea
);
INSERT INTO audit_head (size, hash) VALUES (0, NULL);

-- The stored hashes of the Merkle tree, by tlog.StoredHashIndex.
CREATE TABLE audit_tree_hashes (
    idx  bigint PRIMARY KEY,
    hash bytea  NOT NULL
);

-- One signed checkpoint per seal.
CREATE TABLE audit_checkpoints (
    size       bigint      PRIMARY KEY,
    root_hash  bytea       NOT NULL,
    head_hash  bytea       NOT NULL,
    note       bytea       NOT NULL,
    created_at timestamptz NOT NULL
);
