-- Protected paths and approvals (ADR-0031): a principal may be a reviewer, and a change that
-- touches a protected path waits, once validated, in the state 'awaiting_approval' until a
-- reviewer or an admin approves it. SQLite cannot alter a CHECK constraint, so the two tables
-- are built again. Foreign keys are on during migrations: tokens and worker_keys, which name
-- a principal, are set aside while principals is rebuilt, so that no row is ever orphaned.

CREATE TEMP TABLE tokens_aside AS SELECT * FROM tokens;
CREATE TEMP TABLE worker_keys_aside AS SELECT * FROM worker_keys;
DROP TABLE tokens;
DROP TABLE worker_keys;

CREATE TABLE principals_new (
    id         TEXT    PRIMARY KEY,
    name       TEXT    NOT NULL UNIQUE,
    role       TEXT    NOT NULL CHECK (role IN ('admin', 'agent', 'worker', 'reader', 'reviewer')),
    disabled   INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL
);
INSERT INTO principals_new (id, name, role, disabled, created_at)
    SELECT id, name, role, disabled, created_at FROM principals;
DROP TABLE principals;
ALTER TABLE principals_new RENAME TO principals;

CREATE TABLE tokens (
    id         TEXT    PRIMARY KEY,
    principal  TEXT    NOT NULL REFERENCES principals (name),
    hash       BLOB    NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
INSERT INTO tokens (id, principal, hash, created_at, revoked_at)
    SELECT id, principal, hash, created_at, revoked_at FROM tokens_aside;
CREATE INDEX tokens_principal ON tokens (principal);

CREATE TABLE worker_keys (
    key_id     TEXT    PRIMARY KEY,
    principal  TEXT    NOT NULL REFERENCES principals (name),
    public_key BLOB    NOT NULL,
    created_at INTEGER NOT NULL
);
INSERT INTO worker_keys (key_id, principal, public_key, created_at)
    SELECT key_id, principal, public_key, created_at FROM worker_keys_aside;
CREATE INDEX worker_keys_principal ON worker_keys (principal, created_at);

DROP TABLE tokens_aside;
DROP TABLE worker_keys_aside;

-- approved_by is the principal who approved the change ('' for none), approved_at when.
CREATE TABLE changes_new (
    -- seq orders a repository's changes (ListChanges, page tokens).
    seq                 INTEGER PRIMARY KEY AUTOINCREMENT,
    id                  TEXT    NOT NULL UNIQUE,
    repository          TEXT    NOT NULL REFERENCES repositories (name),
    state               TEXT    NOT NULL CHECK (state IN ('queued', 'validating', 'awaiting_approval', 'integrated', 'rejected', 'cancelled')),
    base_revision       TEXT    NOT NULL,
    candidate_revision  TEXT    NOT NULL DEFAULT '',
    integrated_revision TEXT    NOT NULL DEFAULT '',
    author              TEXT    NOT NULL,
    message             TEXT    NOT NULL DEFAULT '',
    paths               TEXT    NOT NULL, -- JSON array
    job_id              TEXT    NOT NULL DEFAULT '',
    attestation_digest  TEXT    NOT NULL DEFAULT '',
    reason              TEXT    NOT NULL DEFAULT '',
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL,
    edits               TEXT,
    fencing_tokens      TEXT    NOT NULL DEFAULT '[]',
    candidate_id        TEXT    NOT NULL DEFAULT '',
    batch_limit         INTEGER NOT NULL DEFAULT 0,
    approved_by         TEXT    NOT NULL DEFAULT '',
    approved_at         INTEGER
);
INSERT INTO changes_new (seq, id, repository, state, base_revision, candidate_revision, integrated_revision,
        author, message, paths, job_id, attestation_digest, reason, created_at, updated_at, edits,
        fencing_tokens, candidate_id, batch_limit)
    SELECT seq, id, repository, state, base_revision, candidate_revision, integrated_revision,
        author, message, paths, job_id, attestation_digest, reason, created_at, updated_at, edits,
        fencing_tokens, candidate_id, batch_limit FROM changes;
DROP TABLE changes;
ALTER TABLE changes_new RENAME TO changes;
CREATE INDEX changes_repository ON changes (repository, seq);
CREATE INDEX changes_queue ON changes (repository, seq) WHERE state IN ('queued', 'validating');
-- The changes waiting for an approval (ListChanges awaiting_approval, the console).
CREATE INDEX changes_awaiting_approval ON changes (repository, seq) WHERE state = 'awaiting_approval';
