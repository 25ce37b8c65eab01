-- Content speaks git (docs/adr/0022-git-content-store.md). Trees, one per directory, and commits
-- are git objects with git's own ids; blobs stay in blobs, found by their git id beside their
-- sha256 digest, so that no content is stored twice. A revision names its git tree and, once it
-- is on the mainline, its commit. Its sha256 tree digest (the encoding of its flat file list,
-- what the API calls tree_digest) is computed when its file list is first read, not by Integrate,
-- whose cost must follow the change rather than the repository. The git ids of the rows written
-- before are filled in by the store right after this migration, in its transaction.

CREATE TABLE git_objects (
    id   BLOB    PRIMARY KEY, -- 20 bytes
    type INTEGER NOT NULL,    -- 1 commit, 2 tree (go-git's plumbing.ObjectType)
    data BLOB    NOT NULL     -- the object's content, without git's "<type> <size>\0" header
) WITHOUT ROWID;

ALTER TABLE blobs ADD COLUMN git_id BLOB;
CREATE UNIQUE INDEX blobs_git_id ON blobs (git_id);

-- tree_digest loses its reference to trees: a revision written from here on has no row there.
CREATE TABLE revisions_git (
    id          TEXT    PRIMARY KEY,
    repository  TEXT    NOT NULL REFERENCES repositories (name),
    parent      TEXT    NOT NULL DEFAULT '',
    change_id   TEXT    NOT NULL DEFAULT '',
    author      TEXT    NOT NULL,
    tree_digest TEXT    NOT NULL DEFAULT '', -- '' until computed
    git_tree    TEXT    NOT NULL DEFAULT '', -- 40 hex
    git_commit  TEXT    NOT NULL DEFAULT '', -- 40 hex; '' for a revision not on the mainline
    created_at  INTEGER NOT NULL
);
INSERT INTO revisions_git (id, repository, parent, change_id, author, tree_digest, created_at)
    SELECT id, repository, parent, change_id, author, tree_digest, created_at FROM revisions;
DROP TABLE revisions;
ALTER TABLE revisions_git RENAME TO revisions;
CREATE INDEX revisions_repository ON revisions (repository);

-- The lease tokens a change was integrated under, named by its commit (JSON array).
ALTER TABLE changes ADD COLUMN fencing_tokens TEXT NOT NULL DEFAULT '[]';
