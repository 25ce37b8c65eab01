-- A file too large for one request is sent in parts (ADR-0027), so that the server never holds
-- a whole large blob in memory: the store keeps each part as a row of its own, and a blob sent
-- so keeps its parts as its content. Times are unix microseconds, as everywhere.
--
-- An upload under way is a row of blob_uploads; its parts are the rows of blob_parts under its
-- parts_key, a random key the store makes whenever it creates an upload row. The completing
-- part moves the parts to the blob (blobs.parts_key) and deletes the upload row in one
-- transaction; an upload started again with the same id (same principal, digest and size) then
-- gets a key of its own, so that dropping it can never delete the stored blob's parts.
CREATE TABLE blob_uploads (
    id         TEXT    PRIMARY KEY, -- derived by the server from the principal, digest and size
    principal  TEXT    NOT NULL,
    digest     TEXT    NOT NULL,
    size       INTEGER NOT NULL,
    part_bytes INTEGER NOT NULL,
    received   INTEGER NOT NULL,
    hash_state BLOB    NOT NULL, -- the server's running hashes of the received bytes, opaque here
    parts_key  TEXT    NOT NULL,
    created_at INTEGER NOT NULL
);

-- The uploads abandoned long enough to be dropped.
CREATE INDEX blob_uploads_created ON blob_uploads (created_at);

-- seq is the part's offset divided by its upload's part_bytes. A rowid table, not WITHOUT
-- ROWID: SQLite keeps rows of megabytes well only where the b-tree holds the key and the
-- content goes to overflow pages.
CREATE TABLE blob_parts (
    parts_key TEXT    NOT NULL,
    seq       INTEGER NOT NULL,
    content   BLOB    NOT NULL,
    PRIMARY KEY (parts_key, seq)
);

-- NULL for a blob stored whole in content. A blob stored in parts has an empty content, its
-- whole size in size, and its parts under parts_key, each part_bytes long but the last.
ALTER TABLE blobs ADD COLUMN parts_key TEXT;
ALTER TABLE blobs ADD COLUMN part_bytes INTEGER;
