-- The integration queue ("validation gate"). A change integrated into a repository with a
-- validation policy waits QUEUED until AdvanceQueue builds its candidate on the mainline of
-- its turn, which may be later than the one it was rebased on: so it keeps its edits.

-- The edits (JSON of []repo.FileEdit) of a change that went through the queue; NULL for a change
-- integrated directly.
ALTER TABLE changes ADD COLUMN edits jsonb;

-- A repository's queue in order: its head, each change's position, and the repositories with
-- pending work are read from these rows alone, however many changes are finished.
CREATE INDEX changes_queue ON changes (repository, seq) WHERE state IN ('queued', 'validating');
