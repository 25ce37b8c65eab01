-- A tree an integrate writes in place of a stored one may be kept as a delta (stored_as 3,
-- store.StoredDelta): the id of a tree kept whole, then git's delta from it. No column changes;
-- the version says that rows of that form may exist, so that a build which cannot read them
-- refuses this schema instead of failing on the first such tree.
SELECT 1;
