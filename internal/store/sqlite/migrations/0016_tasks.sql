-- Tasks, their claims and the messages between agents (proto/agwp/v1/task.proto,
-- store.TaskStore). A claim is fenced as a job's is (ADR-0012): its number is the task's
-- attempts after the claim.
CREATE TABLE tasks (
    -- seq orders a repository's tasks by creation: oldest first among the ready, newest first
    -- in lists and their page tokens.
    seq              INTEGER PRIMARY KEY AUTOINCREMENT,
    id               TEXT    NOT NULL UNIQUE,
    repository       TEXT    NOT NULL REFERENCES repositories (name),
    title            TEXT    NOT NULL,
    body             TEXT    NOT NULL DEFAULT '',
    labels           TEXT    NOT NULL DEFAULT '[]', -- JSON array
    paths            TEXT    NOT NULL DEFAULT '[]', -- JSON array of lease paths, a hint
    depends_on       TEXT    NOT NULL DEFAULT '[]', -- JSON array of task ids of the same repository
    priority         INTEGER NOT NULL DEFAULT 0,
    -- 'claimed' is the latest claim being current; once its claim_expires_at passed the task
    -- reads as open (store.StateAt), without a sweep. 'open' after a claim: it was released.
    state            TEXT    NOT NULL CHECK (state IN ('open', 'claimed', 'done', 'cancelled')),
    created_by       TEXT    NOT NULL,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    -- The claims ever made: the latest claim's number.
    attempts         INTEGER NOT NULL DEFAULT 0,
    -- The latest claim's holder and times, kept after it ended.
    claimant         TEXT    NOT NULL DEFAULT '',
    claimed_at       INTEGER,
    claim_expires_at INTEGER,
    change_id        TEXT    NOT NULL DEFAULT '', -- the change whose landing finished it
    done_at          INTEGER
);
CREATE INDEX tasks_repository ON tasks (repository, seq);
-- The creation rate counts a principal's tasks of the last minute.
CREATE INDEX tasks_created_by ON tasks (created_by, created_at);
-- The ready listing and the first ready task of ClaimTask walk the tasks that may be open.
CREATE INDEX tasks_ready ON tasks (repository, priority DESC, seq) WHERE state IN ('open', 'claimed');

CREATE TABLE messages (
    id         TEXT    PRIMARY KEY,
    repository TEXT    NOT NULL REFERENCES repositories (name),
    -- The repository's message number, taken under the one writer: every later message has a
    -- larger one.
    seq        INTEGER NOT NULL,
    author     TEXT    NOT NULL, -- "<principal>|<label>" or "<principal>"
    principal  TEXT    NOT NULL,
    text       TEXT    NOT NULL,
    -- The address: one of to_holder, task_id, change_id, to_all.
    to_holder  TEXT    NOT NULL DEFAULT '',
    task_id    TEXT    NOT NULL DEFAULT '',
    change_id  TEXT    NOT NULL DEFAULT '',
    to_all     INTEGER NOT NULL DEFAULT 0,
    -- The holder it reached when sent ('' for to_all, or a task nobody held).
    recipient  TEXT    NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX messages_repository_seq ON messages (repository, seq);
-- A holder's inbox: what reached it, and what was sent to all (recipient '').
CREATE INDEX messages_recipient ON messages (repository, recipient, seq);
-- The threads of a task and of a change.
CREATE INDEX messages_task ON messages (task_id, seq) WHERE task_id <> '';
CREATE INDEX messages_change ON messages (change_id, seq) WHERE change_id <> '';
-- A principal's messages of the last minute: its rate.
CREATE INDEX messages_principal ON messages (principal, created_at);

-- The task claim a change carries ('' and 0 for none): landing it finishes the task.
ALTER TABLE changes ADD COLUMN task_id TEXT NOT NULL DEFAULT '';
ALTER TABLE changes ADD COLUMN task_claim_number INTEGER NOT NULL DEFAULT 0;
