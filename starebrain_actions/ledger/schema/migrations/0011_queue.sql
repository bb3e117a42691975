-- Version 11.
-- The queue and its workers (`starebrain send --queue`, `starebrain worker`).
-- 1. An action queued for a pool of phones (`pool`) is recorded with no phone; a worker beside
--    the phones takes it. `queue_after`: the earliest time a worker looks at it again (NULL:
--    it left the queue: sent, refused, or waiting for a person's ruling, which puts it back).
--    `claimed_by` / `claimed_device` / `claimed_at`: the worker (and its phone) driving it
--    now; a claim holds only while that worker's heartbeat in `phone_workers` is fresh. The
--    claim is a scheduling hint: the attempts' own receipt and leases keep every send single.
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
-- 2. Which worker holds which phone (by its key in `phones`), with its heartbeat: one worker
--    per phone; a silent worker's phone may be taken over once its heartbeat is stale.
CREATE TABLE phone_workers (
    device              TEXT    PRIMARY KEY CHECK (length(device) >= 1),
    worker              TEXT    NOT NULL CHECK (length(worker) >= 1),
    host                TEXT    NOT NULL,
    pid                 INTEGER NOT NULL,
    pool                TEXT    NOT NULL CHECK (length(pool) >= 1),
    address             TEXT    NOT NULL,
    claimed_at          TEXT    NOT NULL,
    heartbeat_at        TEXT    NOT NULL,
    doing               TEXT    NOT NULL DEFAULT ''
) STRICT;
