-- Repositories, their content, file leases and changes (RepoStore).
-- Times are unix microseconds (INTEGER); NULL where the Go field is the zero time.

CREATE TABLE repositories (
    name          TEXT    PRIMARY KEY,
    -- The revision id of the mainline head. No foreign key: the first revision is inserted
    -- after its repository, in the same transaction.
    mainline      TEXT    NOT NULL,
    validation    BLOB,
    -- The last fencing token granted in this repository; a grant takes the next one in its
    -- own transaction.
    lease_counter INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL
);

-- Contents, stored once by "sha256:<hex>" digest, shared by every repository.
CREATE TABLE blobs (
    digest  TEXT    PRIMARY KEY,
    content BLOB    NOT NULL,
    size    INTEGER NOT NULL
);

-- Trees, stored once by digest: encoding is the canonical encoding of repo.Tree.Encode, and
-- digest its sha256.
CREATE TABLE trees (
    digest   TEXT PRIMARY KEY,
    encoding BLOB NOT NULL
);

CREATE TABLE revisions (
    id          TEXT    PRIMARY KEY,
    repository  TEXT    NOT NULL REFERENCES repositories (name),
    parent      TEXT    NOT NULL DEFAULT '',
    change_id   TEXT    NOT NULL DEFAULT '',
    author      TEXT    NOT NULL,
    tree_digest TEXT    NOT NULL REFERENCES trees (digest),
    created_at  INTEGER NOT NULL
);

CREATE INDEX revisions_repository ON revisions (repository);

-- state is 'active', 'released' or 'broken': an active lease past expires_at is reported as
-- expired, never stored as such.
CREATE TABLE leases (
    id          TEXT    PRIMARY KEY,
    repository  TEXT    NOT NULL REFERENCES repositories (name),
    holder      TEXT    NOT NULL,
    token       INTEGER NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN ('active', 'released', 'broken')),
    paths       TEXT    NOT NULL, -- JSON array, in the order of the grant
    acquired_at INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    ended_at    INTEGER
);

-- One token per grant in a repository; ListLeases walks it newest first.
CREATE UNIQUE INDEX leases_repository_token ON leases (repository, token);

-- Every path of every lease, ended ones included (a later grant makes an older token stale
-- whatever became of it). Overlaps of a path p are found by exact lookups of p and its
-- ancestor directories and, when p is a directory, by a range scan of the paths under it.
CREATE TABLE lease_paths (
    lease_id   TEXT    NOT NULL REFERENCES leases (id),
    repository TEXT    NOT NULL,
    path       TEXT    NOT NULL,
    token      INTEGER NOT NULL,
    -- 1 until the lease is released or broken, so that a grant looks only at the leases that
    -- have not ended, however long a path's history.
    live       INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (lease_id, path)
);

-- Later grants on a path (Integrate, renew and release of an expired lease).
CREATE INDEX lease_paths_overlap ON lease_paths (repository, path, token);

-- Leases that have not ended on a path (a grant's conflict check).
CREATE INDEX lease_paths_live ON lease_paths (repository, path) WHERE live = 1;

CREATE TABLE changes (
    -- seq orders a repository's changes (ListChanges, page tokens).
    seq                 INTEGER PRIMARY KEY AUTOINCREMENT,
    id                  TEXT    NOT NULL UNIQUE,
    repository          TEXT    NOT NULL REFERENCES repositories (name),
    state               TEXT    NOT NULL CHECK (state IN ('queued', 'validating', 'integrated', 'rejected', 'cancelled')),
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
    updated_at          INTEGER NOT NULL
);

CREATE INDEX changes_repository ON changes (repository, seq);
