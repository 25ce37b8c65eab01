-- Pending records are sealed in the order their ids were taken, not in the order of the
-- transactions that wrote them (docs/adr/0019-postgres-seals-in-id-order.md). A transaction gets
-- its xid at its first write, which may come before it sees another transaction's commit: a
-- lease grant locked its repository's row, a release committed meanwhile, and the grant, which
-- found the paths free only because of that release, was sealed before it. A record's id is
-- taken by the statement that writes it, after everything that statement saw, so a record
-- written after another committed always has the greater id.

-- A replica of the previous build still sealing would move the head by the columns dropped
-- below: it waits instead, then fails without effect. Writers wait too, so that no record takes
-- an id while the pending ones are renumbered.
LOCK TABLE audit_records, audit_head, audit_seals IN ACCESS EXCLUSIVE MODE;

-- The records still pending take new ids after every other record's, in the order the previous
-- build would have sealed them, so that "every record up to the head's last id is sealed, and
-- those after it are pending" holds from here on. A record's id is not covered by any hash.
WITH base AS (SELECT coalesce(max(id), 0) AS id FROM audit_records),
pending AS (
    SELECT r.id, row_number() OVER (ORDER BY r.xid, r.id) AS n
    FROM audit_records r, audit_head h
    WHERE (r.xid, r.id) > (h.last_xid, h.last_id))
UPDATE audit_records r SET id = base.id + pending.n
FROM base, pending WHERE r.id = pending.id;

UPDATE audit_head SET last_id = coalesce((SELECT max(record_id) FROM audit_seals), 0);
SELECT setval(pg_get_serial_sequence('audit_records', 'id'), max(id)) FROM audit_records HAVING count(*) > 0;

-- The view that replicas of a build before schema 5 read (0005_audit_records.sql), joined by the
-- record's id alone: the same columns, the same answers.
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
LEFT JOIN audit_seals s ON s.record_id = r.id,
json_array_elements(r.events::json) WITH ORDINALITY AS e(event, n);

DROP INDEX audit_records_order;
ALTER TABLE audit_records DROP COLUMN xid;
ALTER TABLE audit_records ADD PRIMARY KEY (id);
ALTER TABLE audit_seals DROP COLUMN record_xid;
ALTER TABLE audit_head DROP COLUMN last_xid;
