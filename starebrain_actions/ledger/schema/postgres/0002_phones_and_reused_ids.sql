-- starebrain-actions ledger for PostgreSQL, version 2: the SQLite schema at version 7
-- (../migrations/0007_phones_and_reused_ids.sql, which says why): phones and their
-- addresses; a provider row named by its device, table, _id and date (ids are reused once the
-- latest rows are deleted); the review reason UNSETTLED. Translated as 0001_ledger.sql says.
-- PostgreSQL can drop a constraint, so nothing is rebuilt.

CREATE TABLE phones (
    phone_key           TEXT    PRIMARY KEY CHECK (length(phone_key) >= 1),
    identity            TEXT    UNIQUE CHECK (identity IS NULL OR length(identity) >= 1),
    serialno            TEXT,
    first_seen_at       TEXT    NOT NULL,
    last_seen_at        TEXT    NOT NULL
);

CREATE TABLE phone_addresses (
    address             TEXT    PRIMARY KEY CHECK (length(address) >= 1),
    phone_key           TEXT    NOT NULL REFERENCES phones (phone_key),
    first_seen_at       TEXT    NOT NULL,
    last_seen_at        TEXT    NOT NULL
);

CREATE INDEX phone_addresses_by_phone ON phone_addresses (phone_key, last_seen_at);

INSERT INTO phones (phone_key, identity, serialno, first_seen_at, last_seen_at)
SELECT device, NULL, NULL, min(dispatched_at), max(dispatched_at)
FROM attempts GROUP BY device;

INSERT INTO phone_addresses (address, phone_key, first_seen_at, last_seen_at)
SELECT device, device, min(dispatched_at), max(dispatched_at)
FROM attempts GROUP BY device;

-- The copy below sets a column: it is bookkeeping, not a change of the attempt, so the
-- version and history triggers stand aside for it (they are created again just after).
ALTER TABLE attempts DISABLE TRIGGER USER;

ALTER TABLE attempts ADD COLUMN provider_row_date_ms BIGINT;
ALTER TABLE attempts ADD CONSTRAINT attempts_row_date_names_a_row
    CHECK (provider_row_date_ms IS NULL OR provider_object_id IS NOT NULL);
UPDATE attempts SET provider_row_date_ms = (evidence_json::jsonb ->> 'date_ms')::bigint
WHERE provider_object_id IS NOT NULL
  AND jsonb_typeof(evidence_json::jsonb -> 'date_ms') = 'number';

ALTER TABLE attempts ENABLE TRIGGER USER;

ALTER TABLE attempts DROP CONSTRAINT attempts_device_provider_kind_provider_object_id_key;
CREATE UNIQUE INDEX attempts_provider_row ON attempts (
    device, provider_kind, provider_object_id, coalesce(provider_row_date_ms, -1)
) WHERE provider_object_id IS NOT NULL;

ALTER TABLE attempts DROP CONSTRAINT attempts_review_reason_check;
ALTER TABLE attempts ADD CONSTRAINT attempts_review_reason_check CHECK (review_reason IN
    ('AMBIGUOUS', 'DUPLICATE', 'MISMATCH', 'BUDGET_EXHAUSTED', 'STUCK', 'UNVERIFIED',
     'RCS_SUSPECTED', 'UNSETTLED'));

ALTER TABLE duplicates ADD COLUMN provider_row_date_ms BIGINT;
UPDATE duplicates SET provider_row_date_ms = (evidence_json::jsonb ->> 'date_ms')::bigint
WHERE jsonb_typeof(evidence_json::jsonb -> 'date_ms') = 'number';
ALTER TABLE duplicates DROP CONSTRAINT duplicates_pkey;
CREATE UNIQUE INDEX duplicates_provider_row ON duplicates (
    device, provider_kind, provider_object_id, coalesce(provider_row_date_ms, -1)
);

-- A provider row (device, kind, _id, date) is either one attempt's artifact or a duplicate,
-- never both.
CREATE OR REPLACE FUNCTION attempts_artifact_not_a_duplicate() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM duplicates
               WHERE device = NEW.device AND provider_kind = NEW.provider_kind
                 AND provider_object_id = NEW.provider_object_id
                 AND coalesce(provider_row_date_ms, -1)
                     = coalesce(NEW.provider_row_date_ms, -1)) THEN
        RAISE EXCEPTION 'this provider row is recorded as a duplicate'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$;

DROP TRIGGER attempts_artifact_not_a_duplicate ON attempts;
CREATE TRIGGER attempts_artifact_not_a_duplicate
BEFORE UPDATE OF provider_object_id, provider_kind, provider_row_date_ms ON attempts
FOR EACH ROW WHEN (NEW.provider_object_id IS NOT NULL)
EXECUTE FUNCTION attempts_artifact_not_a_duplicate();

CREATE OR REPLACE FUNCTION duplicates_not_an_artifact() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM attempts
               WHERE device = NEW.device AND provider_kind = NEW.provider_kind
                 AND provider_object_id = NEW.provider_object_id
                 AND coalesce(provider_row_date_ms, -1)
                     = coalesce(NEW.provider_row_date_ms, -1)) THEN
        RAISE EXCEPTION 'this provider row already confirms an attempt'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$;
