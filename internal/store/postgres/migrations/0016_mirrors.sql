-- A repository's forge mirror (ADR-0030): the server pushes the mainline to it after every
-- landing. The credential stays here, never in an answer, an event or a log.
CREATE TABLE mirrors (
    repository    text        PRIMARY KEY REFERENCES repositories (name),
    url           text        NOT NULL,
    branch        text        NOT NULL,
    credential    bytea,
    state         text        NOT NULL, -- pending, current, diverged, failing
    pushed_commit text        NOT NULL DEFAULT '',
    last_error    text        NOT NULL DEFAULT '',
    updated_at    timestamptz NOT NULL
);
