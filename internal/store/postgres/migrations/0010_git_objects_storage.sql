-- A tree is mostly 20-byte ids, which do not compress: PostgreSQL's attempt to compress each
-- large tree row (a 1,000-entry root is 33 KB) costs CPU on every Integrate at the top of a
-- large repository and saves nothing. Stored out of line, uncompressed, as trees' encodings were.
ALTER TABLE git_objects ALTER COLUMN data SET STORAGE EXTERNAL;
