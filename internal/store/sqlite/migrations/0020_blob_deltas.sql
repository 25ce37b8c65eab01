-- A blob an import sends as git's delta may be kept as that delta (stored_as 4,
-- store.StoredPackDelta): the id of the blob it is against, its depth, its length, then the
-- delta compressed. No column changes; the version says that rows of that form may exist, so
-- that a build which cannot read them refuses this schema instead of failing on such a blob.
SELECT 1;
