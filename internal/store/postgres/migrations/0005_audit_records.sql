-- The audit log in appended rows (docs/adr/0015-audit-records.md; store/auditrecord.go): one row
-- per statement that wrote events, holding all of them, and one row of tree hashes per seal. A
-- seal used to update every event's row and insert two rows per event into audit_tree_hashes,
-- which cost about a quarter of the claims and completions the server could make.

-- A replica of the old build still writing would lose its events to the copy below: it waits
-- instead, then reads and writes through the views at the end.
LOCK TABLE audit_events, audit_tree_hashes IN ACCESS EXCLUSIVE MODE;

-- An insert updates one index, audit_records_pending, as an insert into audit_events did.
CREATE TABLE audit_records (
    -- Insertion order, internal to the store: the order in which pending records are sealed.
    id        bigserial NOT NULL,
    -- The events as a JSON array (store.DecodeAuditRecord). text, not jsonb: the hashes cover
    -- the details as written, and an insert need not parse them.
    events    text      NOT NULL,
    -- NULL until sealed; then the seq of the first event, the others following it.
    seq       bigint,
    -- The chain's hash before the first event, and each event's hash, 32 bytes each.
    prev_hash bytea,
    hashes    bytea
);
-- The sealed log by the seq of each record's first event: the record holding seq n is the one
-- with the greatest seq <= n. A pending record has no entry.
CREATE UNIQUE INDEX audit_records_seq ON audit_records (seq) WHERE seq IS NOT NULL;
-- The records waiting for a seal, in insertion order; it holds only them.
CREATE INDEX audit_records_pending ON audit_records (id) WHERE seq IS NULL;

-- The Merkle tree hashes a seal stored, from index first on (tlog.StoredHashIndex numbering,
-- contiguous), 32 bytes each: index i is in the block with the greatest first <= i.
CREATE TABLE audit_tree_blocks (
    first  bigint PRIMARY KEY,
    hashes bytea  NOT NULL
);

-- Each old event becomes a record of its own, keeping its id, its place and its hashes. The
-- details are copied as written (the hashes cover them; a seal refused details that are not
-- JSON); extract answers numeric, so the microseconds are exact.
INSERT INTO audit_records (id, events, seq, prev_hash, hashes)
SELECT id,
       '[{"t":' || (extract(epoch FROM time) * 1000000)::bigint ||
       ',"p":' || to_json(principal::text)::text || ',"h":' || to_json(holder::text)::text ||
       ',"a":' || to_json(action::text)::text || ',"s":' || to_json(subject::text)::text ||
       coalesce(',"d":' || details, '') || '}]',
       seq, prev_hash, hash
FROM audit_events;
SELECT setval(pg_get_serial_sequence('audit_records', 'id'), max(id)) FROM audit_records;

-- Each old tree hash becomes a block of one.
INSERT INTO audit_tree_blocks (first, hashes) SELECT idx, hash FROM audit_tree_hashes;

DROP TABLE audit_events;
DROP TABLE audit_tree_hashes;

-- During a rollout, replicas of a build before this migration still run (docs/deploy.md: they
-- may, until they are stopped). They find their old tables as views of the new ones: reads
-- answer the same events, hashes and tree hashes (slowly: only for the rollout), and an event
-- they insert becomes a record of its own. Their sealer fails without effect (a view cannot be
-- updated), which leaves sealing to the new replicas. A later migration drops the views.
CREATE VIEW audit_events AS
SELECT r.id,
       'epoch'::timestamptz + ((e.event->>'t') || ' microseconds')::interval AS time,
       e.event->>'p' AS principal,
       e.event->>'h' AS holder,
       e.event->>'a' AS action,
       e.event->>'s' AS subject,
       -- json, not jsonb: -> answers the member as it was written.
       (e.event->'d')::text AS details,
       r.seq + e.n - 1 AS seq,
       CASE WHEN r.seq IS NULL THEN NULL
            WHEN e.n = 1 THEN r.prev_hash
            ELSE substring(r.hashes FROM ((e.n - 2) * 32 + 1)::int FOR 32) END AS prev_hash,
       CASE WHEN r.seq IS NOT NULL THEN substring(r.hashes FROM ((e.n - 1) * 32 + 1)::int FOR 32) END AS hash
FROM audit_records r, json_array_elements(r.events::json) WITH ORDINALITY AS e(event, n);

CREATE FUNCTION audit_events_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO audit_records (events) VALUES (
        '[{"t":' || (extract(epoch FROM NEW.time) * 1000000)::bigint ||
        ',"p":' || to_json(NEW.principal::text)::text || ',"h":' || to_json(coalesce(NEW.holder, '')::text)::text ||
        ',"a":' || to_json(NEW.action::text)::text || ',"s":' || to_json(NEW.subject::text)::text ||
        coalesce(',"d":' || NEW.details, '') || '}]');
    RETURN NEW;
END
$$;
CREATE TRIGGER audit_events_insert INSTEAD OF INSERT ON audit_events
    FOR EACH ROW EXECUTE FUNCTION audit_events_insert();

CREATE VIEW audit_tree_hashes AS
SELECT b.first + i AS idx, substring(b.hashes FROM i * 32 + 1 FOR 32) AS hash
FROM audit_tree_blocks b, generate_series(0, length(b.hashes) / 32 - 1) AS i;
