-- starebrain-actions ledger for PostgreSQL, version 6: the SQLite schema at version 11
-- (../migrations/0011_queue.sql, which says why): actions queued for a pool of phones, their
-- claims by workers, and which worker holds which phone.
ALTER TABLE actions ADD COLUMN pool TEXT
    CHECK (pool IS NULL OR length(pool) BETWEEN 1 AND 100);
ALTER TABLE actions ADD COLUMN queue_after TEXT
    CHECK (queue_after IS NULL OR pool IS NOT NULL);
ALTER TABLE actions ADD COLUMN claimed_by TEXT
    CHECK (claimed_by IS NULL OR pool IS NOT NULL);
ALTER TABLE actions ADD COLUMN claimed_device TEXT
    CHECK ((claimed_device IS NULL) = (claimed_by IS NULL));
ALTER TABLE actions ADD COLUMN claimed_at TEXT
    CHECK ((claimed_at IS NULL) = (claimed_by IS NULL));
CREATE INDEX actions_queue ON actions (pool, queue_after, action_id)
    WHERE queue_after IS NOT NULL;
CREATE TABLE phone_workers (
    device              TEXT    PRIMARY KEY CHECK (length(device) >= 1),
    worker              TEXT    NOT NULL CHECK (length(worker) >= 1),
    host                TEXT    NOT NULL,
    pid                 BIGINT  NOT NULL,
    pool                TEXT    NOT NULL CHECK (length(pool) >= 1),
    address             TEXT    NOT NULL,
    claimed_at          TEXT    NOT NULL,
    heartbeat_at        TEXT    NOT NULL,
    doing               TEXT    NOT NULL DEFAULT ''
);
