-- Repositories, their content (blobs and trees, stored once by digest), revisions, file leases
-- with fencing tokens, and changes. Paths and names are COLLATE "C": they order by bytes, as Go
-- compares strings and as page tokens and the prefix ranges of directory leases assume.

CREATE TABLE repositories (
    name          text COLLATE "C" PRIMARY KEY,
    mainline      text        NOT NULL,
    -- The JSON of the validation policy, byte for byte, or NULL.
    validation    bytea,
    -- The last fencing token granted. Each grant increments it under the row's lock, which also
    -- serializes the grants (and renewals and integrations) of one repository.
    lease_counter bigint      NOT NULL DEFAULT 0,
    created_at    timestamptz NOT NULL
);

CREATE TABLE blobs (
    digest  text   PRIMARY KEY,
    content bytea  NOT NULL,
    size    bigint NOT NULL
);

-- A tree is kept as its canonical encoding (repo.Tree.Encode), addressed by its digest.
CREATE TABLE trees (
    digest   text  PRIMARY KEY,
    encoding bytea NOT NULL
);
ALTER TABLE trees ALTER COLUMN encoding SET STORAGE EXTERNAL;

CREATE TABLE revisions (
    id          text        PRIMARY KEY,
    repository  text        NOT NULL,
    parent      text        NOT NULL DEFAULT '',
    change_id   text        NOT NULL DEFAULT '',
    author      text        NOT NULL,
    tree_digest text        NOT NULL,
    created_at  timestamptz NOT NULL
);

CREATE TABLE leases (
    id          text        PRIMARY KEY,
    repository  text        NOT NULL,
    holder      text        NOT NULL,
    token       bigint      NOT NULL,
    -- The paths as granted, in the order given; lease_paths has one row per path for lookups.
    paths       text[]      NOT NULL,
    -- 'expired' is never stored: it is an active lease read after expires_at.
    state       text        NOT NULL CHECK (state IN ('active', 'released', 'broken')),
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    ended_at    timestamptz
);
-- One counter per repository: tokens are unique within it. Lists walk it newest first.
CREATE UNIQUE INDEX leases_repository_token ON leases (repository, token);
-- The default list (leases not ended) walks only these.
CREATE INDEX leases_active ON leases (repository, token) WHERE state = 'active';

CREATE TABLE lease_paths (
    lease_id   text             NOT NULL REFERENCES leases (id),
    repository text             NOT NULL,
    path       text COLLATE "C" NOT NULL,
    token      bigint           NOT NULL,
    -- false once the lease is released or broken, so that grants look among live rows only.
    active     boolean          NOT NULL DEFAULT true,
    PRIMARY KEY (lease_id, path)
);
-- Conflicts of a grant: the live rows at a path (the path itself and its ancestors), or in a
-- directory's range [dir, dir without its '/' followed by '0').
CREATE INDEX lease_paths_active ON lease_paths (repository, path) WHERE active;
-- Staleness of a token: the newest grant at a path, of any state.
CREATE INDEX lease_paths_token ON lease_paths (repository, path, token);

CREATE TABLE changes (
    -- seq orders changes by creation (lists, page tokens); id is what clients see.
    seq                 bigserial   PRIMARY KEY,
    id                  text        NOT NULL UNIQUE,
    repository          text        NOT NULL,
    state               text        NOT NULL CHECK (state IN ('queued', 'validating', 'integrated', 'rejected', 'cancelled')),
    base_revision       text        NOT NULL,
    candidate_revision  text        NOT NULL DEFAULT '',
    integrated_revision text        NOT NULL DEFAULT '',
    author              text        NOT NULL,
    message             text        NOT NULL DEFAULT '',
    paths               text[]      NOT NULL DEFAULT '{}',
    job_id              text        NOT NULL DEFAULT '',
    attestation_digest  text        NOT NULL DEFAULT '',
    reason              text        NOT NULL DEFAULT '',
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL
);
CREATE INDEX changes_repository ON changes (repository, seq);
