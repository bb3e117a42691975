-- starebrain-actions ledger for PostgreSQL, version 8: the SQLite schema at version 12
-- (../migrations/0012_what_binds.sql, which says why): the policies that judged actions, kept
-- by the digest of their rules and never changed; each action's pinned policy and owner; the
-- namespaces of the clients of `starebrain mcp --clients`.
CREATE TABLE gate_policies (
    pin                 TEXT    PRIMARY KEY CHECK (pin LIKE 'sha256:%'),
    document_json       TEXT    NOT NULL CHECK (starebrain_json_valid(document_json)),
    file_digest         TEXT    NOT NULL,
    source              TEXT    NOT NULL,
    stored_at           TEXT    NOT NULL
);
CREATE FUNCTION starebrain_gate_policies_frozen() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    RAISE EXCEPTION 'a kept policy never changes'
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;
CREATE TRIGGER gate_policies_no_update BEFORE UPDATE ON gate_policies
    FOR EACH ROW EXECUTE FUNCTION starebrain_gate_policies_frozen();
CREATE TRIGGER gate_policies_no_delete BEFORE DELETE ON gate_policies
    FOR EACH ROW EXECUTE FUNCTION starebrain_gate_policies_frozen();
ALTER TABLE actions ADD COLUMN gate_policy TEXT REFERENCES gate_policies (pin);
ALTER TABLE actions ADD COLUMN owner TEXT
    CHECK (owner IS NULL OR length(owner) BETWEEN 1 AND 100);
CREATE TABLE owners (
    name                TEXT    PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 100),
    registered_at       TEXT    NOT NULL
);
CREATE INDEX actions_denied ON actions (action_id)
    WHERE (approval = 'DENIED' OR (gate_json::jsonb ->> 'verdict') = 'DENY');
