-- starebrain-actions ledger for PostgreSQL 15: the SQLite schema at version 6
-- (../schema.sql, built by ../migrations/0001..0006) as one script.
--
-- README
-- What this is. Every table, column, CHECK, UNIQUE, foreign key, index and trigger of the
-- SQLite ledger, with the same names, the same meanings and the same trigger messages (the
-- Python side maps messages to errors). It holds only DDL for objects in the current schema,
-- with unqualified names: the migration runner sets search_path to the ledger's schema, runs
-- this file as one multi-statement script (asyncpg `connection.execute(script)`) inside a
-- transaction and records the version in its own table. Nothing here records a version.
--
-- How each SQLite construct was translated:
-- * STRICT tables: PostgreSQL types are always strict. INTEGER (64-bit in SQLite) becomes
--   BIGINT everywhere, so provider ids, watermarks, clocks, versions and counters never
--   overflow. history.sequence (INTEGER PRIMARY KEY AUTOINCREMENT) becomes
--   BIGINT GENERATED ALWAYS AS IDENTITY: never reused, but unlike SQLite a rolled-back insert
--   leaves a gap, and no insert may name the sequence itself.
-- * Times stay TEXT (fixed-width ISO UTC strings that the code compares as text), and JSON
--   columns stay TEXT (the code writes compact sorted JSON and reads back the same text).
-- * json_valid(x) becomes starebrain_json_valid(x), defined below: true when the text parses
--   as the json type, which accepts exactly RFC 8259 text, as SQLite's json_valid does.
-- * GLOB 'sha256:*' becomes LIKE 'sha256:%'; GLOB 'operator:?*' becomes LIKE 'operator:_%'
--   (both case-sensitive, `?`/`_` one character, `*`/`%` any run). length() is the same
--   (characters, not bytes).
-- * Unnamed table CHECKs get names saying what they keep, so an error names its invariant;
--   column CHECKs and UNIQUEs keep PostgreSQL's generated names (attempts_delivery_check,
--   attempts_device_provider_kind_provider_object_id_key, ...).
-- * Partial indexes are the same statements. attempts_failed_rows (json_extract on the
--   evidence) becomes an expression index: the kind is `evidence_json::jsonb ->> 'provider_kind'`
--   (text, like json_extract of a JSON string); the id is `evidence_json::jsonb ->
--   'provider_object_id'`, a jsonb value, because json_extract gives SQLite an INTEGER and
--   the query (`_claimed_ids`) asks for ids ABOVE an anchor: jsonb numbers order numerically,
--   the text of `->>` would put '9' above '10'. A query is served by this index only if it
--   spells these expressions exactly, for example
--       WHERE delivery = 'FAILED' AND device = $1
--         AND coalesce(evidence_json::jsonb ->> 'provider_kind', 'sms') = $2
--         AND evidence_json::jsonb -> 'provider_object_id' > to_jsonb($3::bigint)
--   (and it keeps only jsonb_typeof(...) = 'number' results, as the SQLite code keeps only
--   ints). The cast text::jsonb is IMMUTABLE, so it may appear in an index. One difference:
--   jsonb refuses the escape \u0000 that json and SQLite accept, so a FAILED attempt whose
--   evidence holds \u0000 cannot be stored (error 22P05 from the index).
-- * Each trigger becomes a PL/pgSQL function and a row trigger of the same name. SQLite's
--   WHEN becomes the trigger's WHEN where it has no subquery (PostgreSQL allows none there);
--   the EXISTS tests of the artifact/duplicate triggers move into the function body.
--   RAISE(ABORT, 'msg') becomes RAISE EXCEPTION 'msg' USING ERRCODE =
--   'integrity_constraint_violation' (SQLSTATE 23000), with the message unchanged. SQLite's
--   `BEFORE UPDATE OF provider_object_id, provider_kind` is the same clause here: it fires when
--   the UPDATE's SET list names either column. `NEW.version IS NOT OLD.version + 1` becomes
--   `IS DISTINCT FROM`. The history triggers are AFTER INSERT / AFTER UPDATE row triggers
--   writing the same columns (from_* NULL on insert). PostgreSQL fires triggers of one event
--   in name order; SQLite fires them newest first, which for these names is the same order
--   (artifact_not_a_duplicate, monotone, version_step).
-- * The trigger functions carry `SET search_path FROM CURRENT` (the ledger's schema at the
--   time this runs), so a session with another search_path still writes this schema's
--   history and checks this schema's duplicates.
-- * Added, as PostgreSQL has a way round row triggers that SQLite lacks: TRUNCATE of attempts
--   or history is refused by a statement trigger with the same message as a DELETE.
-- * Constraint errors come back as PostgreSQL SQLSTATEs: CHECK 23514, UNIQUE and the partial
--   unique indexes 23505, foreign keys 23503, NOT NULL 23502, the triggers 23000.

-- JSON columns hold text that parses as JSON (SQLite's json_valid). STRICT: NULL in, NULL
-- out, so a CHECK on a nullable column passes NULL, as in SQLite.
CREATE FUNCTION starebrain_json_valid(value text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
    PERFORM value::json;
    RETURN true;
EXCEPTION WHEN invalid_text_representation OR untranslatable_character THEN
    RETURN false;
END;
$$;

CREATE TABLE actions (
    action_id           TEXT    PRIMARY KEY CHECK (length(action_id) BETWEEN 1 AND 200),
    fingerprint         TEXT    NOT NULL CHECK (fingerprint LIKE 'sha256:%'),
    intent_json         TEXT    NOT NULL CHECK (starebrain_json_valid(intent_json)),
    maximum_attempts    BIGINT  NOT NULL CHECK (maximum_attempts >= 1),
    policy_json         TEXT    NOT NULL CHECK (starebrain_json_valid(policy_json)),
    created_at          TEXT    NOT NULL,
    deadline            TEXT
);

CREATE TABLE attempts (
    dispatch_id         TEXT    PRIMARY KEY,
    action_id           TEXT    NOT NULL REFERENCES actions (action_id),
    attempt             BIGINT  NOT NULL CHECK (attempt >= 1),
    device              TEXT    NOT NULL CHECK (length(device) >= 1),
    delivery            TEXT    NOT NULL DEFAULT 'PENDING'
                                CHECK (delivery IN ('PENDING', 'CONFIRMED', 'FAILED')),
    acceptance          TEXT    NOT NULL DEFAULT 'PENDING'
                                CHECK (acceptance IN ('PENDING', 'ACCEPTED', 'REJECTED')),
    provider_object_id  BIGINT  CHECK (provider_object_id >= 0),
    -- which provider table holds that row: content://sms or content://mms
    provider_kind       TEXT    CHECK (provider_kind IN ('sms', 'mms')),
    watermark_id        BIGINT  CHECK (watermark_id >= 0),
    device_clock_ms     BIGINT  CHECK (device_clock_ms >= 0),
    dispatched_at       TEXT    NOT NULL,
    confirmed_at        TEXT,
    failed_at           TEXT,
    accepted_at         TEXT,
    rejected_at         TEXT,
    evidence_json       TEXT    NOT NULL DEFAULT '{}' CHECK (starebrain_json_valid(evidence_json)),
    last_error          TEXT,
    review_reason       TEXT    CHECK (review_reason IN
                                ('AMBIGUOUS', 'DUPLICATE', 'MISMATCH', 'BUDGET_EXHAUSTED', 'STUCK',
                                 'UNVERIFIED', 'RCS_SUSPECTED')),
    resolved_by         TEXT,
    version             BIGINT  NOT NULL DEFAULT 0 CHECK (version >= 0),
    -- who made the latest change and why: the history trigger copies these, so a change
    -- and its history row are one statement and can never be separated
    last_event          TEXT    NOT NULL DEFAULT 'created' CHECK (last_event IN
                                ('created', 'submitted', 'confirm', 'fail', 'accept', 'reject',
                                 'resolve_sent', 'resolve_not_sent', 'flag_review', 'note_error')),
    last_event_at       TEXT    NOT NULL,
    last_actor          TEXT    NOT NULL CHECK (length(last_actor) >= 1),
    last_evidence_json  TEXT    NOT NULL DEFAULT '{}'
                                CHECK (starebrain_json_valid(last_evidence_json)),

    UNIQUE (action_id, attempt),
    -- invariant 5: one provider row confirms at most one attempt; a row is named by its
    -- device, its provider table and its _id in that table
    UNIQUE (device, provider_kind, provider_object_id),
    -- a provider _id means nothing without the table it was read from
    CONSTRAINT attempts_provider_kind_names_the_id
        CHECK ((provider_kind IS NULL) = (provider_object_id IS NULL)),
    -- invariant 1: acceptance needs confirmation
    CONSTRAINT attempts_acceptance_needs_confirmation
        CHECK (acceptance = 'PENDING' OR delivery = 'CONFIRMED'),
    CONSTRAINT attempts_confirmed_at_iff_confirmed
        CHECK ((delivery = 'CONFIRMED') = (confirmed_at IS NOT NULL)),
    CONSTRAINT attempts_failed_at_iff_failed
        CHECK ((delivery = 'FAILED') = (failed_at IS NOT NULL)),
    CONSTRAINT attempts_accepted_at_iff_accepted
        CHECK ((acceptance = 'ACCEPTED') = (accepted_at IS NOT NULL)),
    CONSTRAINT attempts_rejected_at_iff_rejected
        CHECK ((acceptance = 'REJECTED') = (rejected_at IS NOT NULL)),
    CONSTRAINT attempts_artifact_only_when_confirmed
        CHECK (provider_object_id IS NULL OR delivery = 'CONFIRMED'),
    -- only an operator resolves
    CONSTRAINT attempts_only_an_operator_resolves
        CHECK (last_event NOT IN ('resolve_sent', 'resolve_not_sent')
               OR last_actor LIKE 'operator:_%')
);

-- Provider rows that match an already-confirmed attempt: the phone sent it again.
CREATE TABLE duplicates (
    device              TEXT    NOT NULL,
    provider_object_id  BIGINT  NOT NULL CHECK (provider_object_id >= 0),
    provider_kind       TEXT    NOT NULL DEFAULT 'sms' CHECK (provider_kind IN ('sms', 'mms')),
    dispatch_id         TEXT    NOT NULL REFERENCES attempts (dispatch_id),
    seen_at             TEXT    NOT NULL,
    evidence_json       TEXT    NOT NULL DEFAULT '{}' CHECK (starebrain_json_valid(evidence_json)),
    PRIMARY KEY (device, provider_kind, provider_object_id)
);

CREATE TABLE history (
    sequence            BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    action_id           TEXT    NOT NULL,
    dispatch_id         TEXT    NOT NULL,
    event               TEXT    NOT NULL,
    at                  TEXT    NOT NULL,
    actor               TEXT    NOT NULL,
    from_delivery       TEXT,
    to_delivery         TEXT    NOT NULL,
    from_acceptance     TEXT,
    to_acceptance       TEXT    NOT NULL,
    evidence_json       TEXT    NOT NULL CHECK (starebrain_json_valid(evidence_json))
);

-- Version 4: `list`, `review` and the nightly job page through actions newest first.
CREATE INDEX actions_by_created ON actions (created_at DESC, action_id);

-- Version 5: what a sender and a reconcile pass ask of one device, as index ranges.
CREATE INDEX attempts_by_device_confirmed ON attempts (device, confirmed_at)
    WHERE confirmed_at IS NOT NULL;

CREATE INDEX attempts_by_device_state ON attempts (device, delivery, acceptance);

CREATE INDEX attempts_by_device_time ON attempts (device, dispatched_at);

CREATE INDEX attempts_by_device_watermark ON attempts (device, watermark_id)
    WHERE watermark_id IS NOT NULL;

-- The per-device lease: the in-flight attempt holds its device until proof or an operator
-- resolves it, or until it goes to a review whose command is over (its own action still
-- waits: attempts_one_in_flight_per_action). A crash frees neither.
CREATE UNIQUE INDEX attempts_device_lease ON attempts (device)
    WHERE delivery = 'PENDING'
      AND coalesce(review_reason, '') NOT IN ('UNVERIFIED', 'RCS_SUSPECTED', 'AMBIGUOUS', 'STUCK');

-- Version 6: the phone's row a FAILED attempt names only in its evidence, by device, kind and
-- id (see the README above for how a query must spell these expressions).
CREATE INDEX attempts_failed_rows ON attempts (
    device,
    coalesce(evidence_json::jsonb ->> 'provider_kind', 'sms'),
    (evidence_json::jsonb -> 'provider_object_id')
) WHERE delivery = 'FAILED';

-- The attempts that are not a clean success.
CREATE INDEX attempts_notable ON attempts (action_id)
    WHERE NOT (delivery = 'CONFIRMED' AND acceptance = 'ACCEPTED' AND review_reason IS NULL);

-- One unresolved attempt per action.
CREATE UNIQUE INDEX attempts_one_in_flight_per_action ON attempts (action_id)
    WHERE delivery = 'PENDING';

CREATE INDEX attempts_review ON attempts (review_reason) WHERE review_reason IS NOT NULL;

-- An action's summary counts its duplicates by dispatch id.
CREATE INDEX duplicates_by_dispatch ON duplicates (dispatch_id);

CREATE INDEX history_by_action ON history (action_id, sequence);

CREATE INDEX history_by_dispatch ON history (dispatch_id, sequence);

-- A provider row (device, kind, _id) is either one attempt's artifact or a duplicate,
-- never both.
CREATE FUNCTION attempts_artifact_not_a_duplicate() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM duplicates
               WHERE device = NEW.device AND provider_kind = NEW.provider_kind
                 AND provider_object_id = NEW.provider_object_id) THEN
        RAISE EXCEPTION 'this provider row is recorded as a duplicate'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER attempts_artifact_not_a_duplicate
BEFORE UPDATE OF provider_object_id, provider_kind ON attempts
FOR EACH ROW WHEN (NEW.provider_object_id IS NOT NULL)
EXECUTE FUNCTION attempts_artifact_not_a_duplicate();

-- Every change writes exactly one history row, in the same statement.
CREATE FUNCTION attempts_history_on_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO history (action_id, dispatch_id, event, at, actor, from_delivery, to_delivery,
                         from_acceptance, to_acceptance, evidence_json)
    VALUES (NEW.action_id, NEW.dispatch_id, NEW.last_event, NEW.last_event_at, NEW.last_actor,
            NULL, NEW.delivery, NULL, NEW.acceptance, NEW.last_evidence_json);
    RETURN NULL;
END;
$$;

CREATE TRIGGER attempts_history_on_insert AFTER INSERT ON attempts
FOR EACH ROW EXECUTE FUNCTION attempts_history_on_insert();

CREATE FUNCTION attempts_history_on_update() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO history (action_id, dispatch_id, event, at, actor, from_delivery, to_delivery,
                         from_acceptance, to_acceptance, evidence_json)
    VALUES (NEW.action_id, NEW.dispatch_id, NEW.last_event, NEW.last_event_at, NEW.last_actor,
            OLD.delivery, NEW.delivery, OLD.acceptance, NEW.acceptance, NEW.last_evidence_json);
    RETURN NULL;
END;
$$;

CREATE TRIGGER attempts_history_on_update AFTER UPDATE ON attempts
FOR EACH ROW EXECUTE FUNCTION attempts_history_on_update();

-- Invariant 6: final states are left only by an operator's resolution.
CREATE FUNCTION attempts_monotone() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    RAISE EXCEPTION 'a final state is left only by an operator resolution'
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;

CREATE TRIGGER attempts_monotone BEFORE UPDATE ON attempts
FOR EACH ROW WHEN (NEW.last_event NOT IN ('resolve_sent', 'resolve_not_sent')
    AND ((OLD.delivery <> 'PENDING' AND NEW.delivery <> OLD.delivery)
      OR (OLD.acceptance <> 'PENDING' AND NEW.acceptance <> OLD.acceptance)))
EXECUTE FUNCTION attempts_monotone();

-- Attempts are never deleted: the receipt outlives every outcome.
CREATE FUNCTION attempts_no_delete() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    RAISE EXCEPTION 'attempts are never deleted'
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;

CREATE TRIGGER attempts_no_delete BEFORE DELETE ON attempts
FOR EACH ROW EXECUTE FUNCTION attempts_no_delete();

-- (PostgreSQL only) TRUNCATE fires no row trigger: refuse it as a DELETE is refused.
CREATE TRIGGER attempts_no_truncate BEFORE TRUNCATE ON attempts
FOR EACH STATEMENT EXECUTE FUNCTION attempts_no_delete();

-- Every change bumps the version by one, so every change writes exactly one history row.
CREATE FUNCTION attempts_version_step() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    RAISE EXCEPTION 'every change to an attempt must bump its version by one'
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;

CREATE TRIGGER attempts_version_step BEFORE UPDATE ON attempts
FOR EACH ROW WHEN (NEW.version IS DISTINCT FROM OLD.version + 1)
EXECUTE FUNCTION attempts_version_step();

CREATE FUNCTION duplicates_not_an_artifact() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM attempts
               WHERE device = NEW.device AND provider_kind = NEW.provider_kind
                 AND provider_object_id = NEW.provider_object_id) THEN
        RAISE EXCEPTION 'this provider row already confirms an attempt'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER duplicates_not_an_artifact BEFORE INSERT ON duplicates
FOR EACH ROW EXECUTE FUNCTION duplicates_not_an_artifact();

-- The history is append-only.
CREATE FUNCTION history_no_delete() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    RAISE EXCEPTION 'history is append-only'
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;

CREATE TRIGGER history_no_delete BEFORE DELETE ON history
FOR EACH ROW EXECUTE FUNCTION history_no_delete();

-- (PostgreSQL only) TRUNCATE fires no row trigger: refuse it as a DELETE is refused.
CREATE TRIGGER history_no_truncate BEFORE TRUNCATE ON history
FOR EACH STATEMENT EXECUTE FUNCTION history_no_delete();

CREATE FUNCTION history_no_update() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    RAISE EXCEPTION 'history is append-only'
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;

CREATE TRIGGER history_no_update BEFORE UPDATE ON history
FOR EACH ROW EXECUTE FUNCTION history_no_update();
