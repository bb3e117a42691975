-- starebrain-actions ledger for PostgreSQL, migration 13: the SQLite schema at version 17
-- (../migrations/0017_framework_attempts.sql, which says why): a phone's framework attempts
-- by device and time, the search of `--send-path auto`'s proof. The predicate is spelled as
-- `pg.json_field` spells it, so that `Ledger.framework_attempts` is served by the index.
CREATE INDEX attempts_framework ON attempts (device, dispatched_at)
    WHERE (evidence_json::jsonb ->> 'send_path') = 'framework';
