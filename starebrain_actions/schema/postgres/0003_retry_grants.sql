-- starebrain-actions ledger for PostgreSQL, version 3: the SQLite schema at version 8
-- (../migrations/0008_retry_grants.sql, which says why): an operator's latest grant of new
-- attempts to an action, as JSON text.
ALTER TABLE actions ADD COLUMN grant_json TEXT
    CHECK (grant_json IS NULL OR starebrain_json_valid(grant_json));
