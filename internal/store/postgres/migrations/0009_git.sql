-- Content speaks git (docs/adr/0022-git-content-store.md). Trees, one per directory, and commits
-- are git objects with git's own ids; blobs stay in blobs, found by their git id beside their
-- sha256 digest, so that no content is stored twice. A revision names its git tree and, once it
-- is on the mainline, its commit. Its sha256 tree digest (the encoding of its flat file list,
-- what the API calls tree_digest) is computed when its file list is first read, not by Integrate,
-- whose cost must follow the change rather than the repository. The git ids of the rows written
-- before are filled in by the store right after this migration, in its transaction.

CREATE TABLE git_objects (
    id   bytea    PRIMARY KEY, -- 20 bytes
    type smallint NOT NULL,    -- 1 commit, 2 tree (go-git's plumbing.ObjectType)
    data bytea    NOT NULL     -- the object's content, without git's "<type> <size>\0" header
);

ALTER TABLE blobs ADD COLUMN git_id bytea;
CREATE UNIQUE INDEX blobs_git_id ON blobs (git_id);

ALTER TABLE revisions ALTER COLUMN tree_digest SET DEFAULT '';
ALTER TABLE revisions ADD COLUMN git_tree text NOT NULL DEFAULT '';
ALTER TABLE revisions ADD COLUMN git_commit text NOT NULL DEFAULT '';

ALTER TABLE changes ADD COLUMN fencing_tokens text NOT NULL DEFAULT '[]';
