-- A repository's forge mirror (ADR-0030): the server pushes the mainline to it after every
-- landing. The credential stays here, never in an answer, an event or a log.
CREATE TABLE mirrors (
    repository    TEXT    PRIMARY KEY REFERENCES repositories (name),
    url           TEXT    NOT NULL,
    branch        TEXT    NOT NULL,
    credential    BLOB,
    state         TEXT    NOT NULL, -- pending, current, diverged, failing
    pushed_commit TEXT    NOT NULL DEFAULT '',
    last_error    TEXT    NOT NULL DEFAULT '',
    updated_at    INTEGER NOT NULL
) WITHOUT ROWID;
