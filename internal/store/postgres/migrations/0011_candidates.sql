-- The parallel gate (docs/adr/0023-speculative-queue.md). A candidate is one tree the queue asked
-- a worker to validate: its parent (the mainline, or the candidate ahead of it) with the edits of
-- one change or of a batch. Several may validate at once; the mainline moves only to one whose
-- validation passed, once every one ahead of it has landed.
CREATE TABLE candidates (
    seq                bigserial   PRIMARY KEY,
    id                 text        NOT NULL UNIQUE,
    repository         text        NOT NULL REFERENCES repositories (name),
    state              text        NOT NULL CHECK (state IN ('validating', 'passed', 'failed', 'landed',
                                                             'rejected', 'split', 'superseded', 'cancelled')),
    revision           text        NOT NULL,
    parent_revision    text        NOT NULL,
    job_id             text        NOT NULL,
    attestation_digest text        NOT NULL DEFAULT '',
    reason             text        NOT NULL DEFAULT '',
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL
);
-- Every advance reads the live ones: few, however long the history.
CREATE INDEX candidates_live ON candidates (repository, seq) WHERE state IN ('validating', 'passed', 'failed');

-- Which changes each candidate validated, in order: a change's history of validations.
CREATE TABLE candidate_changes (
    candidate_id text    NOT NULL REFERENCES candidates (id),
    change_id    text    NOT NULL,
    position     integer NOT NULL,
    PRIMARY KEY (candidate_id, position)
);
CREATE INDEX candidate_changes_change ON candidate_changes (change_id);

-- The live candidate a VALIDATING change is in.
ALTER TABLE changes ADD COLUMN candidate_id text NOT NULL DEFAULT '';
-- Not 0 once a batch the change was in failed: the largest batch it may be validated in now.
ALTER TABLE changes ADD COLUMN batch_limit integer NOT NULL DEFAULT 0;

-- A change validating when the server stopped becomes the one candidate it was.
INSERT INTO candidates (id, repository, state, revision, parent_revision, job_id, created_at, updated_at)
    SELECT 'cnd_' || c.id, c.repository, 'validating', c.candidate_revision, r.parent, c.job_id, c.updated_at, c.updated_at
    FROM changes c JOIN revisions r ON r.id = c.candidate_revision
    WHERE c.state = 'validating'
    ORDER BY c.seq;
INSERT INTO candidate_changes (candidate_id, change_id, position)
    SELECT 'cnd_' || c.id, c.id, 0 FROM changes c JOIN candidates k ON k.id = 'cnd_' || c.id WHERE c.state = 'validating';
UPDATE changes c SET candidate_id = 'cnd_' || c.id
    FROM candidates k WHERE k.id = 'cnd_' || c.id AND c.state = 'validating';
