-- Version 12.
-- What an action must obey is data (DESIGN.md invariant 9), read where its receipt is written.
-- 1. The policies that judged actions, kept by the digest of their rules (`policy_pin`: the
--    rules as the file's tables, with the approval and short-code modes they ran with), never
--    changed once written: an action pinned to one is judged again by exactly those rules on
--    every path that can send it, whatever policy (or none) the process running later has.
CREATE TABLE gate_policies (
    pin                 TEXT    PRIMARY KEY CHECK (pin GLOB 'sha256:*'),
    document_json       TEXT    NOT NULL CHECK (json_valid(document_json)),
    -- the digest of the file it was first read from ("default": the built-in rules)
    file_digest         TEXT    NOT NULL,
    source              TEXT    NOT NULL,
    stored_at           TEXT    NOT NULL
) STRICT;
CREATE TRIGGER gate_policies_no_update BEFORE UPDATE ON gate_policies
BEGIN
    SELECT RAISE(ABORT, 'a kept policy never changes');
END;
CREATE TRIGGER gate_policies_no_delete BEFORE DELETE ON gate_policies
BEGIN
    SELECT RAISE(ABORT, 'a kept policy never changes');
END;
-- 2. The policy that first judged the action (NULL: none yet), and its owner: the client of
--    `starebrain mcp --clients` whose namespace (`NAME/`) holds its id (NULL: no client's).
ALTER TABLE actions ADD COLUMN gate_policy TEXT REFERENCES gate_policies (pin);
ALTER TABLE actions ADD COLUMN owner TEXT
    CHECK (owner IS NULL OR length(owner) BETWEEN 1 AND 100);
-- 3. The namespaces: a client named in a clients file owns the ids under `NAME/`; only a
--    caller acting as that client may create one (the server records them when it starts).
CREATE TABLE owners (
    name                TEXT    PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 100),
    registered_at       TEXT    NOT NULL
) STRICT;
-- 4. The actions a DENY stopped for good (``Action.denied``), for the nightly tally.
CREATE INDEX actions_denied ON actions (action_id)
    WHERE (approval = 'DENIED' OR json_extract(gate_json, '$.verdict') = 'DENY');
