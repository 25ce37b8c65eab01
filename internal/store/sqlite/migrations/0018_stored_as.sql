-- Contents kept compressed when that pays (docs/storage.md, "Compressed contents"): stored_as
-- says how a row keeps its bytes (store.StoredUnexamined, StoredZlib, StoredPlain). Rows written
-- before this are unexamined until the compaction rewrites them, a batch at a time: the partial
-- indexes find the ones left without scanning the rest.
ALTER TABLE blobs ADD COLUMN stored_as INTEGER NOT NULL DEFAULT 0;
CREATE INDEX blobs_unexamined ON blobs (digest) WHERE stored_as = 0 AND parts_key IS NULL;

-- git_objects becomes a table with rowids: a WITHOUT ROWID table keeps at most about a quarter of
-- a page of a row in its B-tree and the rest on overflow pages of its own, so a tree of 1.5 KB
-- took two pages (a real history's trees and commits: 77 MB of pages for 35 MB of data).
CREATE TABLE git_objects_rowid (
    id        BLOB    NOT NULL UNIQUE, -- 20 bytes
    type      INTEGER NOT NULL,        -- 1 commit, 2 tree (go-git's plumbing.ObjectType)
    data      BLOB    NOT NULL,        -- the object's content (stored_as), without git's header
    stored_as INTEGER NOT NULL DEFAULT 0
);
INSERT INTO git_objects_rowid (id, type, data) SELECT id, type, data FROM git_objects;
DROP TABLE git_objects;
ALTER TABLE git_objects_rowid RENAME TO git_objects;
CREATE INDEX git_objects_unexamined ON git_objects (id) WHERE stored_as = 0;
