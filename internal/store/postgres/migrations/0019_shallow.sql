-- Shallow histories (docs/git.md#shallow-histories). A repository imported from a shallow clone
-- keeps the commits its history stops at, whose parents it does not hold: 40 hex each, sorted,
-- separated by spaces; '' for a whole history. git clones of it are shallow there.
ALTER TABLE repositories ADD COLUMN shallow text NOT NULL DEFAULT '';

-- The commits UploadGitObjects stored without their parents. Every other stored object names
-- only stored objects, so a history can stop only at one of these: CreateRepository walks a
-- history to check where it stops only once this table holds a row.
CREATE TABLE git_shallow_commits (
    id bytea PRIMARY KEY -- 20 bytes
);
