-- Version 18.
-- The ledger's own id, created once (here, or when a fresh ledger is made) and never
-- changed: 32 hex digits. A send script writes it on the phone beside the attempt's fence
-- (android_bridge/_fence.py), so that another ledger driving the same phone finds it there:
-- it refuses to send while this ledger has an attempt open on the phone, and warns once
-- otherwise (docs/guarantees.md, "One phone, one ledger"). `starebrain migrate` carries it
-- to PostgreSQL: the copy is the same ledger, whose attempts the phone already names.
CREATE TABLE ledger_identity (
    singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
    ledger_id TEXT NOT NULL CHECK (length(ledger_id) = 32 AND ledger_id NOT GLOB '*[^0-9a-f]*')
);
INSERT INTO ledger_identity (singleton, ledger_id) VALUES (1, lower(hex(randomblob(16))));
