-- Leases compare paths as a case-insensitive, normalization-insensitive file system does
-- (repo.Fold): "café.txt" in NFC, in NFD and "CAFÉ.TXT" are one file on a checkout on macOS
-- or Windows, so a lease on one spelling must conflict with a lease on another. path keeps
-- the spelling the agent wrote (lease answers, conflict and staleness messages); fold is the
-- key every overlap lookup searches. SQL cannot compute Unicode case folding and
-- normalization, so the store fills fold in Go: in the same transaction as this migration
-- for the rows it finds (backfillLeasePathFolds), on every insert after.
ALTER TABLE lease_paths ADD COLUMN fold TEXT NOT NULL DEFAULT '';

-- The overlap lookups move from path to fold under the same index names (queries name them
-- with INDEXED BY).
DROP INDEX lease_paths_overlap;
DROP INDEX lease_paths_live;
CREATE INDEX lease_paths_overlap ON lease_paths (repository, fold, token);
CREATE INDEX lease_paths_live ON lease_paths (repository, fold) WHERE live = 1;
