-- Lanes (docs/adr/0024-lanes.md). A lane's candidate is its own view of the tree: the mainline
-- without the other lanes' files, with its changes; it stacks on the view it was built on.
ALTER TABLE candidates ADD COLUMN lane        text    NOT NULL DEFAULT '';
ALTER TABLE candidates ADD COLUMN parent_tree text    NOT NULL DEFAULT '';
-- How many changes it holds, so that a walk that read only some of them knows it.
ALTER TABLE candidates ADD COLUMN size        integer NOT NULL DEFAULT 0;
UPDATE candidates SET size = (SELECT count(*) FROM candidate_changes WHERE candidate_id = candidates.id)
    WHERE state IN ('validating', 'passed', 'failed');
