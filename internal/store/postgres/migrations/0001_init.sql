-- The first schema of ag on PostgreSQL. Migrations are additive within v1, so that older
-- replicas keep working during a rollout.

CREATE TABLE jobs (
    -- seq orders jobs by creation (claim tie-break, page tokens); id is what clients see.
    seq                bigserial   PRIMARY KEY,
    id                 text        NOT NULL UNIQUE,
    kind               text        NOT NULL,
    state              text        NOT NULL CHECK (state IN ('queued', 'claimed', 'completed', 'failed', 'cancelled')),
    -- text, not jsonb: the JSON comes back byte for byte as it was given.
    payload            text,
    priority           integer     NOT NULL DEFAULT 0,
    -- bigint: attempts and max_attempts are uint32 in the API.
    attempts           bigint      NOT NULL DEFAULT 0,
    max_attempts       bigint      NOT NULL,
    claimed_by         text        NOT NULL DEFAULT '',
    lease_ns           bigint      NOT NULL DEFAULT 0,
    lease_expires_at   timestamptz,
    run_after          timestamptz NOT NULL,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    finished_at        timestamptz,
    last_error         text        NOT NULL DEFAULT '',
    result             text,
    output             text        NOT NULL DEFAULT '',
    output_digest      text        NOT NULL DEFAULT '',
    attestation_digest text        NOT NULL DEFAULT '',
    cancel_requested   boolean     NOT NULL DEFAULT false,
    progress           text        NOT NULL DEFAULT '',
    enqueued_by        text        NOT NULL DEFAULT '',
    unique_key         text        NOT NULL DEFAULT ''
);

-- The claim walks this in claim order and stops at the first due job.
CREATE INDEX jobs_queued_claim_order ON jobs (priority DESC, run_after, seq) WHERE state = 'queued';
-- Expired claims (to hand out again or to settle) are found by lease expiry. The predicate is
-- the state, whose few claimed rows the planner counts as few even before any statistics:
-- with "lease_expires_at IS NOT NULL" a plan made on a new table scanned the whole table.
CREATE INDEX jobs_claimed_lease ON jobs (lease_expires_at) WHERE state = 'claimed';
-- At most one unfinished job per unique key; finished ones free the key.
CREATE UNIQUE INDEX jobs_unique_key ON jobs (unique_key)
    WHERE unique_key <> '' AND state IN ('queued', 'claimed');

CREATE TABLE attestations (
    digest     text        PRIMARY KEY,
    envelope   bytea       NOT NULL,
    job_id     text        NOT NULL,
    created_at timestamptz NOT NULL
);

CREATE TABLE principals (
    id         text        PRIMARY KEY,
    name       text        NOT NULL UNIQUE,
    role       text        NOT NULL,
    disabled   boolean     NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL
);

CREATE TABLE tokens (
    id         text        PRIMARY KEY,
    principal  text        NOT NULL REFERENCES principals (name),
    hash       bytea       NOT NULL UNIQUE,
    created_at timestamptz NOT NULL,
    revoked_at timestamptz
);

CREATE TABLE worker_keys (
    key_id     text        PRIMARY KEY,
    -- seq keeps "oldest first" exact when keys share a timestamp.
    seq        bigserial   NOT NULL,
    principal  text        NOT NULL,
    public_key bytea       NOT NULL,
    created_at timestamptz NOT NULL
);
CREATE INDEX worker_keys_principal ON worker_keys (principal, seq);
