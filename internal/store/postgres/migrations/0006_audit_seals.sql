-- A seal's place and hashes for each record, in rows of their own, and the pending records found
-- by the transaction that wrote them (docs/adr/0017-postgres-seals-beside-records.md). A seal
-- used to set them in the record's own row: it rewrote every record it sealed, and the
-- transaction doing so ran long enough that vacuum could not clean the jobs the claims and
-- completions had just changed meanwhile, which made every claim slower. A seal now inserts rows
-- of a few hundred bytes and never touches a record.

-- A replica of the previous build still sealing would set the columns dropped below: it waits
-- instead, then fails without effect.
LOCK TABLE audit_records, audit_head IN ACCESS EXCLUSIVE MODE;

CREATE TABLE audit_seals (
    -- The seq of the record's first event: the record holding event n is the one whose seal has
    -- the greatest seq <= n.
    seq        bigint PRIMARY KEY,
    -- The record sealed, once: a second seal of it fails, and with it the whole seal. Its xid
    -- too, by which it is found (audit_records has no index on id alone).
    record_xid xid8   NOT NULL,
    record_id  bigint NOT NULL UNIQUE,
    -- The chain's hash before the record's first event, and each event's hash, 32 bytes each.
    prev_hash  bytea,
    hashes     bytea
);

INSERT INTO audit_seals (seq, record_xid, record_id, prev_hash, hashes)
SELECT seq, '0', id, prev_hash, hashes FROM audit_records WHERE seq IS NOT NULL;

-- The transaction that wrote the record. Every transaction below the oldest one still running
-- has ended, so the records of those xids are all there is of them: a seal takes pending records
-- in (xid, id) order, only below that bound, and goes on from the last one it sealed, which
-- audit_head keeps. The records written before this migration all get xid 0 (an instant
-- default), and those not sealed yet 1: both below any real transaction's, and the pending ones
-- after every sealed one.
ALTER TABLE audit_records ADD COLUMN xid xid8 NOT NULL DEFAULT '0';
UPDATE audit_records SET xid = '1' WHERE seq IS NULL;
ALTER TABLE audit_records ALTER COLUMN xid SET DEFAULT pg_current_xact_id();
CREATE INDEX audit_records_order ON audit_records (xid, id);

ALTER TABLE audit_head ADD COLUMN last_xid xid8 NOT NULL DEFAULT '0';
ALTER TABLE audit_head ADD COLUMN last_id bigint NOT NULL DEFAULT 0;
UPDATE audit_head SET last_id = coalesce((SELECT max(id) FROM audit_records WHERE seq IS NOT NULL), 0);

-- The view that replicas of a build before schema 5 read (0005_audit_records.sql), on the new
-- columns: the same columns, the same answers.
CREATE OR REPLACE VIEW audit_events AS
SELECT r.id,
       'epoch'::timestamptz + ((e.event->>'t') || ' microseconds')::interval AS time,
       e.event->>'p' AS principal,
       e.event->>'h' AS holder,
       e.event->>'a' AS action,
       e.event->>'s' AS subject,
       (e.event->'d')::text AS details,
       s.seq + e.n - 1 AS seq,
       CASE WHEN s.seq IS NULL THEN NULL
            WHEN e.n = 1 THEN s.prev_hash
            ELSE substring(s.hashes FROM ((e.n - 2) * 32 + 1)::int FOR 32) END AS prev_hash,
       CASE WHEN s.seq IS NOT NULL THEN substring(s.hashes FROM ((e.n - 1) * 32 + 1)::int FOR 32) END AS hash
FROM audit_records r
LEFT JOIN audit_seals s ON s.record_id = r.id AND s.record_xid = r.xid,
json_array_elements(r.events::json) WITH ORDINALITY AS e(event, n);

DROP INDEX audit_records_seq;
DROP INDEX audit_records_pending;
ALTER TABLE audit_records DROP COLUMN seq, DROP COLUMN prev_hash, DROP COLUMN hashes;

-- lz4 compresses a record about four times faster than pglz, to the same size
-- (docs/benchmarks.md), and every claim and completion compresses one. A server built without
-- lz4 keeps pglz.
DO $$
BEGIN
    ALTER TABLE audit_records ALTER COLUMN events SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    NULL;
END
$$;
