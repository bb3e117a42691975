-- starebrain-actions ledger for PostgreSQL, migration 14: the SQLite schema at version 18
-- (../migrations/0018_ledger_identity.sql, which says why): the ledger's own id, created once,
-- 32 hex digits (a random UUID without its dashes). `starebrain migrate` replaces the id of
-- the empty ledger it copies into with the source's (ledger/copy.py).
CREATE TABLE ledger_identity (
    singleton BIGINT PRIMARY KEY CHECK (singleton = 1),
    ledger_id TEXT NOT NULL CHECK (ledger_id ~ '^[0-9a-f]{32}$')
);
INSERT INTO ledger_identity (singleton, ledger_id)
    VALUES (1, replace(gen_random_uuid()::text, '-', ''));
