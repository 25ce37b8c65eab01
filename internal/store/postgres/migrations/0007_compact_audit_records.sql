-- Schema 7 changes SQLite's audit records only (0007_compact_audit_records.sql there,
-- docs/adr/0018-compact-audit-records.md): PostgreSQL builds its records in SQL and writes every
-- member of every event, which both record readers read as before. The number is kept here so
-- that a schema's number names the same change on both stores.
SELECT 1;
