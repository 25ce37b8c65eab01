-- Tasks, their claims and the messages between agents (proto/agwp/v1/task.proto,
-- store.TaskStore). A claim is fenced as a job's is (ADR-0012): its number is the task's
-- attempts after the claim. As for changes and leases, the repository is checked by the
-- statements, not by a foreign key, whose share lock would wait for every integration.
CREATE TABLE tasks (
    -- seq orders a repository's tasks by creation: oldest first among the ready, newest first
    -- in lists and their page tokens.
    seq              bigserial   PRIMARY KEY,
    id               text        NOT NULL UNIQUE,
    repository       text        NOT NULL,
    title            text        NOT NULL,
    body             text        NOT NULL DEFAULT '',
    labels           text[]      NOT NULL DEFAULT '{}',
    paths            text[]      NOT NULL DEFAULT '{}', -- lease paths, a hint
    depends_on       text[]      NOT NULL DEFAULT '{}', -- task ids of the same repository
    priority         integer     NOT NULL DEFAULT 0,
    -- 'claimed' is the latest claim being current; once its claim_expires_at passed the task
    -- reads as open (store.StateAt), without a sweep. 'open' after a claim: it was released.
    state            text        NOT NULL CHECK (state IN ('open', 'claimed', 'done', 'cancelled')),
    created_by       text        NOT NULL,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    -- The claims ever made: the latest claim's number.
    attempts         bigint      NOT NULL DEFAULT 0,
    -- The latest claim's holder and times, kept after it ended.
    claimant         text        NOT NULL DEFAULT '',
    claimed_at       timestamptz,
    claim_expires_at timestamptz,
    change_id        text        NOT NULL DEFAULT '', -- the change whose landing finished it
    done_at          timestamptz
);
CREATE INDEX tasks_repository ON tasks (repository, seq);
-- The creation rate counts a principal's tasks of the last minute.
CREATE INDEX tasks_created_by ON tasks (created_by, created_at);
-- The ready listing and the first ready task of ClaimTask walk the tasks that may be open.
CREATE INDEX tasks_ready ON tasks (repository, priority DESC, seq) WHERE state IN ('open', 'claimed');

-- The last message number of each repository. A message takes the next under this row's lock,
-- held until it commits, so that messages commit in the order of their numbers and a reader
-- paging by seq never misses one committed late.
CREATE TABLE message_seqs (
    repository text   PRIMARY KEY,
    last_seq   bigint NOT NULL
);

CREATE TABLE messages (
    id         text        PRIMARY KEY,
    repository text        NOT NULL,
    -- The repository's message number: every later message has a larger one.
    seq        bigint      NOT NULL,
    author     text        NOT NULL, -- "<principal>|<label>" or "<principal>"
    principal  text        NOT NULL,
    text       text        NOT NULL,
    -- The address: one of to_holder, task_id, change_id, to_all.
    to_holder  text        NOT NULL DEFAULT '',
    task_id    text        NOT NULL DEFAULT '',
    change_id  text        NOT NULL DEFAULT '',
    to_all     boolean     NOT NULL DEFAULT false,
    -- The holder it reached when sent ('' for to_all, or a task nobody held).
    recipient  text        NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL
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
ALTER TABLE changes ADD COLUMN task_id text NOT NULL DEFAULT '';
ALTER TABLE changes ADD COLUMN task_claim_number bigint NOT NULL DEFAULT 0;
