-- Times are unix microseconds (INTEGER); NULL where the Go field is the zero time.
-- Durations are microseconds. Booleans are 0/1.

CREATE TABLE jobs (
    -- seq orders jobs by creation (claim ties, ListJobs, page tokens); AUTOINCREMENT so that a
    -- seq is never reused even if old jobs are pruned one day, which keeps page tokens honest.
    seq                INTEGER PRIMARY KEY AUTOINCREMENT,
    id                 TEXT    NOT NULL UNIQUE,
    kind               TEXT    NOT NULL,
    state              TEXT    NOT NULL CHECK (state IN ('queued', 'claimed', 'completed', 'failed', 'cancelled')),
    payload            BLOB,
    priority           INTEGER NOT NULL DEFAULT 0,
    attempts           INTEGER NOT NULL DEFAULT 0,
    max_attempts       INTEGER NOT NULL CHECK (max_attempts > 0),
    claimed_by         TEXT    NOT NULL DEFAULT '',
    lease_us           INTEGER NOT NULL DEFAULT 0,
    lease_expires_at   INTEGER,
    run_after          INTEGER NOT NULL,
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    finished_at        INTEGER,
    last_error         TEXT    NOT NULL DEFAULT '',
    result             BLOB,
    output             TEXT    NOT NULL DEFAULT '',
    output_digest      TEXT    NOT NULL DEFAULT '',
    attestation_digest TEXT    NOT NULL DEFAULT '',
    cancel_requested   INTEGER NOT NULL DEFAULT 0,
    progress           TEXT    NOT NULL DEFAULT '',
    enqueued_by        TEXT    NOT NULL DEFAULT '',
    unique_key         TEXT    NOT NULL DEFAULT ''
);

-- The claim walks this in claim order and stops at the first row whose run_after has come.
CREATE INDEX jobs_queued_claim_order ON jobs (priority DESC, run_after, seq) WHERE state = 'queued';

-- Expired claims: the claim's second candidate and the settling of ExpireJobs.
CREATE INDEX jobs_claimed_lease ON jobs (lease_expires_at) WHERE state = 'claimed';

-- At most one live job per unique key; a finished job frees its key.
CREATE UNIQUE INDEX jobs_live_unique_key ON jobs (unique_key)
    WHERE unique_key <> '' AND state IN ('queued', 'claimed');

CREATE INDEX jobs_state ON jobs (state);

CREATE TABLE attestations (
    digest     TEXT    PRIMARY KEY,
    envelope   BLOB    NOT NULL,
    job_id     TEXT    NOT NULL REFERENCES jobs (id),
    created_at INTEGER NOT NULL
);

CREATE TABLE principals (
    id         TEXT    PRIMARY KEY,
    name       TEXT    NOT NULL UNIQUE,
    role       TEXT    NOT NULL CHECK (role IN ('admin', 'agent', 'worker', 'reader')),
    disabled   INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL
);

CREATE TABLE tokens (
    id         TEXT    PRIMARY KEY,
    principal  TEXT    NOT NULL REFERENCES principals (name),
    hash       BLOB    NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);

CREATE INDEX tokens_principal ON tokens (principal);

CREATE TABLE worker_keys (
    key_id     TEXT    PRIMARY KEY,
    principal  TEXT    NOT NULL REFERENCES principals (name),
    public_key BLOB    NOT NULL,
    created_at INTEGER NOT NULL
);

CREATE INDEX worker_keys_principal ON worker_keys (principal, created_at);
