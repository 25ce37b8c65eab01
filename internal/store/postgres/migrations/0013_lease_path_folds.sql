-- Leases compare paths as a case-insensitive, normalization-insensitive file system does
-- (repo.Fold): "café.txt" in NFC, in NFD and "CAFÉ.TXT" are one file on a checkout on macOS
-- or Windows, so a lease on one spelling must conflict with a lease on another. path keeps
-- the spelling the agent wrote (lease answers, conflict and staleness messages); fold is the
-- key every overlap lookup searches, compared byte by byte ("C") as the prefix ranges of
-- directory leases assume. SQL cannot compute Unicode case folding (lower() depends on the
-- database's locale, and normalize() does not fold case), so the store fills fold in Go: in
-- the same transaction as this migration for the rows it finds (backfillLeasePathFolds, which
-- then makes the column NOT NULL), on every insert after.
ALTER TABLE lease_paths ADD COLUMN fold text COLLATE "C";

DROP INDEX lease_paths_active;
DROP INDEX lease_paths_token;
-- Conflicts of a grant: the live rows at a fold (the path itself and its ancestors), or in a
-- directory's range [dir, dir without its '/' followed by '0').
CREATE INDEX lease_paths_active ON lease_paths (repository, fold) WHERE active;
-- Staleness of a token: the newest grant at a fold, of any state.
CREATE INDEX lease_paths_token ON lease_paths (repository, fold, token);
