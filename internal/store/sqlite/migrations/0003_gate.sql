-- The integration queue (validation gate), and ListJobs by claimant.

-- The edits of a change that waits in a queue (JSON array of repo.FileEdit): its candidate is
-- built on whatever the mainline is when its turn comes, and built again if the mainline moved
-- while it was validated. NULL for a change integrated by Integrate itself.
ALTER TABLE changes ADD COLUMN edits TEXT;

-- The changes still in a queue. Changes end in it, so it stays small however long the history;
-- the queue's head, the queue positions and PendingQueues are all read from it.
CREATE INDEX changes_queue ON changes (repository, seq) WHERE state IN ('queued', 'validating');

-- ListJobs of one claimant, or of every label of a principal (a range of claimed_by). A queued
-- job has no claimant and is left out, so the index costs nothing until a job is claimed.
CREATE INDEX jobs_claimed_by ON jobs (claimed_by, seq) WHERE claimed_by <> '';
