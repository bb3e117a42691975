-- starebrain-actions ledger for PostgreSQL, version 3: the SQLite schema at version 8
-- (../migrations/0008_retry_grants.sql, which says why): an operator's latest grant of new
-- attempts to an action, as JSON text; the phone a sender named when it created the action.
ALTER TABLE actions ADD COLUMN grant_json TEXT
    CHECK (grant_json IS NULL OR starebrain_json_valid(grant_json));
ALTER TABLE actions ADD COLUMN planned_device TEXT
    CHECK (planned_device IS NULL OR length(planned_device) >= 1);
