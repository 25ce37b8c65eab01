-- A file too large for one request is sent in parts (ADR-0027), so that the server never holds
-- a whole large blob in memory: the store keeps each part as a row of its own, and a blob sent
-- so keeps its parts as its content.
--
-- An upload under way is a row of blob_uploads; its parts are the rows of blob_parts under its
-- parts_key, a random key the store makes whenever it creates an upload row. The completing
-- part moves the parts to the blob (blobs.parts_key) and deletes the upload row in one
-- transaction; an upload started again with the same id (same principal, digest and size) then
-- gets a key of its own, so that dropping it can never delete the stored blob's parts.
CREATE TABLE blob_uploads (
    id         text        PRIMARY KEY, -- derived by the server from the principal, digest and size
    principal  text        NOT NULL,
    digest     text        NOT NULL,
    size       bigint      NOT NULL,
    part_bytes bigint      NOT NULL,
    received   bigint      NOT NULL,
    hash_state bytea       NOT NULL, -- the server's running hashes of the received bytes, opaque here
    parts_key  text        NOT NULL,
    created_at timestamptz NOT NULL
);
-- The uploads abandoned long enough to be dropped.
CREATE INDEX blob_uploads_created ON blob_uploads (created_at);

-- seq is the part's offset divided by its upload's part_bytes.
CREATE TABLE blob_parts (
    parts_key text   NOT NULL,
    seq       bigint NOT NULL,
    content   bytea  NOT NULL,
    PRIMARY KEY (parts_key, seq)
);
-- Out of line and uncompressed. What is large enough to be sent in parts is mostly compressed
-- already (archives, images, media, model weights), which pglz cannot shrink, and content it
-- shrinks by less than a quarter is compressed whole and the result thrown away: CPU spent on
-- the write of every part of the largest uploads, and on every read of a part that did
-- compress. Large text, which would compress, is stored at its size; small files, sent whole,
-- keep compressing in blobs.content.
ALTER TABLE blob_parts ALTER COLUMN content SET STORAGE EXTERNAL;

-- NULL for a blob stored whole in content. A blob stored in parts has an empty content, its
-- whole size in size, and its parts under parts_key, each part_bytes long but the last.
ALTER TABLE blobs ADD COLUMN parts_key text;
ALTER TABLE blobs ADD COLUMN part_bytes bigint;
