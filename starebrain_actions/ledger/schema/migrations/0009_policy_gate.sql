-- Version 9.
-- The policy gate (`--policy FILE`): a person's approval or denial of an action
-- (`starebrain approve` / `deny`), and the gate's latest verdict on it as JSON (verdict, rule,
-- detail, until, digest of the policy file, at). Every change of either is also a history row.
ALTER TABLE actions ADD COLUMN approval TEXT
    CHECK (approval IS NULL OR approval IN ('APPROVED', 'DENIED'));
ALTER TABLE actions ADD COLUMN gate_json TEXT
    CHECK (gate_json IS NULL OR json_valid(gate_json));
