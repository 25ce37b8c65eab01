-- A blob an import sends as git's delta may be kept as that delta (stored_as 4,
-- store.StoredPackDelta): the id of the blob it is against, its depth, its length, then the
-- delta compressed. The version says that rows of that form may exist, so that a build which
-- cannot read them refuses this schema instead of failing on such a blob.
--
-- A blob stored whole before may be kept as a delta in place (store.ReplaceWithDeltas) only if
-- no delta is against it: the index finds a blob's deltas by the base id each begins with.
CREATE INDEX blobs_delta_base ON blobs (substr(content, 1, 20)) WHERE stored_as = 4;

-- How far down each repository's mainline the blobs were offered to be kept as deltas: the
-- head from which the last walk went down to the root. The next walk stops there.
CREATE TABLE blob_delta_walks (
    repository TEXT PRIMARY KEY,
    head       BLOB NOT NULL
);
