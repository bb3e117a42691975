-- starebrain-actions ledger for PostgreSQL, version 4: the SQLite schema at version 9
-- (../migrations/0009_policy_gate.sql, which says why): a person's approval or denial of an
-- action, and the policy gate's latest verdict on it.
ALTER TABLE actions ADD COLUMN approval TEXT
    CHECK (approval IS NULL OR approval IN ('APPROVED', 'DENIED'));
ALTER TABLE actions ADD COLUMN gate_json TEXT
    CHECK (gate_json IS NULL OR starebrain_json_valid(gate_json));
