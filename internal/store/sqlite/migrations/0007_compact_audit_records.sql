-- Records may now leave out an event's time, principal, holder and action where they equal the
-- event before it in the same record (docs/adr/0018-compact-audit-records.md). Builds before
-- this one would read such an event with empty members and seal it with the wrong hash, so the
-- schema version moves on: they refuse to open the file instead. The tables do not change.
SELECT 1;
