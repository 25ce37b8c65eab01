-- A seal's place and hashes for each record, in rows of their own (docs/adr/0016-seals-beside-
-- records.md). A seal used to set them in the record's own row, and SQLite rewrites a whole row
-- to change any of it: every record's events, about 10 KB for a batch of claims or completions,
-- went through the one writer twice, once written and once sealed. A seal now inserts rows of a
-- few hundred bytes and never touches a record.

CREATE TABLE audit_seals (
    -- The seq of the record's first event: the record holding event n is the one whose seal has
    -- the greatest seq <= n.
    seq       INTEGER PRIMARY KEY,
    -- The record sealed, once: a second seal of it fails, and with it the whole seal.
    record_id INTEGER NOT NULL UNIQUE,
    -- The chain's hash before the record's first event, and each event's hash, 32 bytes each.
    prev_hash BLOB,
    hashes    BLOB
);

INSERT INTO audit_seals (seq, record_id, prev_hash, hashes)
SELECT seq, id, prev_hash, hashes FROM audit_records WHERE seq IS NOT NULL;

-- The pending records are still those after audit_head.last_id (0004_audit.sql).
DROP INDEX audit_records_seq;
ALTER TABLE audit_records DROP COLUMN seq;
ALTER TABLE audit_records DROP COLUMN prev_hash;
ALTER TABLE audit_records DROP COLUMN hashes;
