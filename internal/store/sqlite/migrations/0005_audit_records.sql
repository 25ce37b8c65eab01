-- The audit log in appended rows (docs/adr/0015-audit-records.md; store/auditrecord.go): one
-- row per transaction that wrote events, holding all of them, and one row of tree hashes per
-- seal. A seal used to update every event's row and insert two rows per event into
-- audit_tree_hashes, holding the one writer all the while.

CREATE TABLE audit_records (
    -- Insertion order, which is commit order: writes are serialized. The pending records are
    -- those after audit_head.last_id (see 0004_audit.sql).
    id        INTEGER PRIMARY KEY,
    -- The events as a JSON array, written by store.AuditRecordBuilder.
    events    TEXT    NOT NULL,
    -- NULL until sealed; then the seq of the first event.
    seq       INTEGER,
    -- The chain's hash before the first event, and each event's hash, 32 bytes each.
    prev_hash BLOB,
    hashes    BLOB
);

CREATE UNIQUE INDEX audit_records_seq ON audit_records (seq) WHERE seq IS NOT NULL;

-- The Merkle tree hashes a seal stored, from index first on (tlog.StoredHashIndex numbering).
CREATE TABLE audit_tree_blocks (
    first  INTEGER PRIMARY KEY,
    hashes BLOB    NOT NULL
);

-- Each event of the old layout becomes a record of its own, keeping its id (so audit_head.last_id
-- still names the last sealed one), its place and its hashes. The details are copied as
-- written: the hashes cover them.
INSERT INTO audit_records (id, events, seq, prev_hash, hashes)
SELECT id,
       '[{"t":' || time || ',"p":' || json_quote(principal) || ',"h":' || json_quote(holder) ||
       ',"a":' || json_quote(action) || ',"s":' || json_quote(subject) ||
       coalesce(',"d":' || details, '') || '}]',
       seq, prev_hash, hash
FROM audit_events;

-- Each old tree hash becomes a block of one.
INSERT INTO audit_tree_blocks (first, hashes) SELECT idx, hash FROM audit_tree_hashes;

DROP TABLE audit_events;
DROP TABLE audit_tree_hashes;
