-- Protected paths and approvals (ADR-0031): a change that touches a protected path waits,
-- once validated, in the state 'awaiting_approval' until a reviewer or an admin approves it.
-- Principals' roles have no constraint here; the reviewer role needs none.
ALTER TABLE changes DROP CONSTRAINT changes_state_check;
ALTER TABLE changes ADD CONSTRAINT changes_state_check
    CHECK (state IN ('queued', 'validating', 'awaiting_approval', 'integrated', 'rejected', 'cancelled'));

-- approved_by is the principal who approved the change ('' for none), approved_at when.
ALTER TABLE changes ADD COLUMN approved_by text NOT NULL DEFAULT '';
ALTER TABLE changes ADD COLUMN approved_at timestamptz;

-- The changes waiting for an approval (ListChanges awaiting_approval, the console).
CREATE INDEX changes_awaiting_approval ON changes (repository, seq) WHERE state = 'awaiting_approval';
