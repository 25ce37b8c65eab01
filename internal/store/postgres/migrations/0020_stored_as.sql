-- Contents kept compressed when that pays (docs/storage.md, "Compressed contents"): stored_as
-- says how a row keeps its bytes (store.StoredUnexamined, StoredZlib, StoredPlain). Rows written
-- before this are unexamined until the compaction rewrites them, a batch at a time: the partial
-- indexes find the ones left without scanning the rest. The columns are compressed by ag
-- itself now: PostgreSQL stores their long values out of line as they are, without trying its
-- own compression on them again.
ALTER TABLE blobs ADD COLUMN stored_as SMALLINT NOT NULL DEFAULT 0;
ALTER TABLE git_objects ADD COLUMN stored_as SMALLINT NOT NULL DEFAULT 0;
ALTER TABLE blobs ALTER COLUMN content SET STORAGE EXTERNAL;
ALTER TABLE git_objects ALTER COLUMN data SET STORAGE EXTERNAL;
CREATE INDEX blobs_unexamined ON blobs (digest) WHERE stored_as = 0 AND parts_key IS NULL;
CREATE INDEX git_objects_unexamined ON git_objects (id) WHERE stored_as = 0;
