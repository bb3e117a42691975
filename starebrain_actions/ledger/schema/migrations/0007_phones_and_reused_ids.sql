-- Version 7.
-- 1. A phone is one device whatever address reaches it. `phones` names each phone the ledger
--    knows (`phone_key`, what attempts.device holds) and the identity it answered with
--    (Settings.Secure.ANDROID_ID of user 0, read by the shell: random at first boot, new after
--    a factory reset; ro.serialno beside it). `phone_addresses` lists the addresses
--    (host:port, usb:SERIAL) each phone was reached at. A ledger from before this version
--    names each device by the address it used: each becomes a phone of its own, keyed by that
--    address, with no identity yet; the first connection that reads the phone's identity
--    binds it (so a legacy key keeps its attempts, lease, watermarks and proofs).
-- 2. SMS _id is INTEGER PRIMARY KEY without AUTOINCREMENT (MmsSmsDatabaseHelper, TelephonyProvider
--    android-10.0.0_r30 and android-15.0.0_r1): once the latest rows are deleted (a thread, a
--    wipe) the next row takes an id already seen. A provider row is therefore named by its
--    device, its table, its _id and its `date` (provider_row_date_ms): the same _id with
--    another date is another message. The old UNIQUE (device, provider_kind,
--    provider_object_id) becomes a unique index over the four (an unknown date, NULL, counts
--    as one value, -1), and the duplicates' primary key likewise. Rows confirmed before this
--    version take their date from the evidence the confirmation kept (`date_ms`).
-- 3. The review reason UNSETTLED: a confirmed row stopped showing the message as sent before
--    it settled (it left the restricted view, was deleted or replaced, or the app marked it
--    failed after its own send timeout): whether it went out is unknown; never resent.
--
-- SQLite cannot drop a table constraint, so attempts and duplicates are rebuilt, as in
-- version 2 (see 0002_provider_kind.sql for why the old tables are renamed first and dropped
-- child first, and why the triggers are dropped first and recreated last: the copy writes no
-- history). The history table is not touched.

CREATE TABLE phones (
    phone_key           TEXT    PRIMARY KEY CHECK (length(phone_key) >= 1),
    -- the phone's own identity ("android_id:<hex>", or "serialno:<s>" where no android_id
    -- can be read); NULL for a legacy key not yet bound to the phone behind it
    identity            TEXT    UNIQUE CHECK (identity IS NULL OR length(identity) >= 1),
    serialno            TEXT,
    first_seen_at       TEXT    NOT NULL,
    last_seen_at        TEXT    NOT NULL
) STRICT;

CREATE TABLE phone_addresses (
    address             TEXT    PRIMARY KEY CHECK (length(address) >= 1),
    phone_key           TEXT    NOT NULL REFERENCES phones (phone_key),
    first_seen_at       TEXT    NOT NULL,
    last_seen_at        TEXT    NOT NULL
) STRICT;

CREATE INDEX phone_addresses_by_phone ON phone_addresses (phone_key, last_seen_at);

INSERT INTO phones (phone_key, identity, serialno, first_seen_at, last_seen_at)
SELECT device, NULL, NULL, min(dispatched_at), max(dispatched_at)
FROM attempts GROUP BY device;

INSERT INTO phone_addresses (address, phone_key, first_seen_at, last_seen_at)
SELECT device, device, min(dispatched_at), max(dispatched_at)
FROM attempts GROUP BY device;

DROP TRIGGER attempts_artifact_not_a_duplicate;
DROP TRIGGER attempts_history_on_insert;
DROP TRIGGER attempts_history_on_update;
DROP TRIGGER attempts_monotone;
DROP TRIGGER attempts_no_delete;
DROP TRIGGER attempts_version_step;
DROP TRIGGER duplicates_not_an_artifact;

DROP INDEX attempts_by_device_confirmed;
DROP INDEX attempts_by_device_state;
DROP INDEX attempts_by_device_time;
DROP INDEX attempts_by_device_watermark;
DROP INDEX attempts_device_lease;
DROP INDEX attempts_failed_rows;
DROP INDEX attempts_notable;
DROP INDEX attempts_one_in_flight_per_action;
DROP INDEX attempts_review;
DROP INDEX duplicates_by_dispatch;

ALTER TABLE duplicates RENAME TO duplicates_v6;
ALTER TABLE attempts RENAME TO attempts_v6;

CREATE TABLE attempts (
    dispatch_id         TEXT    PRIMARY KEY,
    action_id           TEXT    NOT NULL REFERENCES actions (action_id),
    attempt             INTEGER NOT NULL CHECK (attempt >= 1),
    -- the phone's key in `phones` (a legacy ledger's keys are the addresses it used)
    device              TEXT    NOT NULL CHECK (length(device) >= 1),
    delivery            TEXT    NOT NULL DEFAULT 'PENDING'
                                CHECK (delivery IN ('PENDING', 'CONFIRMED', 'FAILED')),
    acceptance          TEXT    NOT NULL DEFAULT 'PENDING'
                                CHECK (acceptance IN ('PENDING', 'ACCEPTED', 'REJECTED')),
    provider_object_id  INTEGER CHECK (provider_object_id >= 0),
    -- which provider table holds that row: content://sms or content://mms
    provider_kind       TEXT    CHECK (provider_kind IN ('sms', 'mms')),
    watermark_id        INTEGER CHECK (watermark_id >= 0),
    device_clock_ms     INTEGER CHECK (device_clock_ms >= 0),
    dispatched_at       TEXT    NOT NULL,
    confirmed_at        TEXT,
    failed_at           TEXT,
    accepted_at         TEXT,
    rejected_at         TEXT,
    evidence_json       TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(evidence_json)),
    last_error          TEXT,
    review_reason       TEXT    CHECK (review_reason IN
                                ('AMBIGUOUS', 'DUPLICATE', 'MISMATCH', 'BUDGET_EXHAUSTED', 'STUCK',
                                 'UNVERIFIED', 'RCS_SUSPECTED', 'UNSETTLED')),
    resolved_by         TEXT,
    version             INTEGER NOT NULL DEFAULT 0 CHECK (version >= 0),
    -- who made the latest change and why: the history trigger copies these, so a change
    -- and its history row are one statement and can never be separated
    last_event          TEXT    NOT NULL DEFAULT 'created' CHECK (last_event IN
                                ('created', 'submitted', 'confirm', 'fail', 'accept', 'reject',
                                 'resolve_sent', 'resolve_not_sent', 'flag_review', 'note_error')),
    last_event_at       TEXT    NOT NULL,
    last_actor          TEXT    NOT NULL CHECK (length(last_actor) >= 1),
    last_evidence_json  TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(last_evidence_json)),
    -- the provider row's `date` (ms; MMS: seconds * 1000): with the _id, which message it is
    -- (last, as PostgreSQL's ALTER TABLE ADD COLUMN puts it)
    provider_row_date_ms INTEGER,

    UNIQUE (action_id, attempt),
    -- a provider _id means nothing without the table it was read from
    CHECK ((provider_kind IS NULL) = (provider_object_id IS NULL)),
    -- a row's date names it only beside its _id
    CHECK (provider_row_date_ms IS NULL OR provider_object_id IS NOT NULL),
    -- invariant 1: acceptance needs confirmation
    CHECK (acceptance = 'PENDING' OR delivery = 'CONFIRMED'),
    CHECK ((delivery = 'CONFIRMED') = (confirmed_at IS NOT NULL)),
    CHECK ((delivery = 'FAILED') = (failed_at IS NOT NULL)),
    CHECK ((acceptance = 'ACCEPTED') = (accepted_at IS NOT NULL)),
    CHECK ((acceptance = 'REJECTED') = (rejected_at IS NOT NULL)),
    CHECK (provider_object_id IS NULL OR delivery = 'CONFIRMED'),
    -- only an operator resolves
    CHECK (last_event NOT IN ('resolve_sent', 'resolve_not_sent') OR last_actor GLOB 'operator:?*')
) STRICT;

INSERT INTO attempts (
    dispatch_id, action_id, attempt, device, delivery, acceptance, provider_object_id,
    provider_kind, watermark_id, device_clock_ms, dispatched_at, confirmed_at, failed_at,
    accepted_at, rejected_at, evidence_json, last_error, review_reason, resolved_by, version,
    last_event, last_event_at, last_actor, last_evidence_json, provider_row_date_ms)
SELECT
    dispatch_id, action_id, attempt, device, delivery, acceptance, provider_object_id,
    provider_kind, watermark_id, device_clock_ms, dispatched_at, confirmed_at, failed_at,
    accepted_at, rejected_at, evidence_json, last_error, review_reason, resolved_by, version,
    last_event, last_event_at, last_actor, last_evidence_json,
    CASE WHEN provider_object_id IS NOT NULL
          AND json_type(evidence_json, '$.date_ms') = 'integer'
         THEN json_extract(evidence_json, '$.date_ms') END
FROM attempts_v6;

-- Provider rows that match an already-confirmed attempt: the phone sent it again.
CREATE TABLE duplicates (
    device              TEXT    NOT NULL,
    provider_object_id  INTEGER NOT NULL CHECK (provider_object_id >= 0),
    provider_kind       TEXT    NOT NULL DEFAULT 'sms' CHECK (provider_kind IN ('sms', 'mms')),
    dispatch_id         TEXT    NOT NULL REFERENCES attempts (dispatch_id),
    seen_at             TEXT    NOT NULL,
    evidence_json       TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(evidence_json)),
    -- the row's `date` (ms): with the _id, which message it is (NULL: not known)
    provider_row_date_ms INTEGER
) STRICT;

INSERT INTO duplicates (
    device, provider_object_id, provider_kind, dispatch_id, seen_at, evidence_json,
    provider_row_date_ms)
SELECT device, provider_object_id, provider_kind, dispatch_id, seen_at, evidence_json,
    CASE WHEN json_type(evidence_json, '$.date_ms') = 'integer'
         THEN json_extract(evidence_json, '$.date_ms') END
FROM duplicates_v6;

DROP TABLE duplicates_v6;
DROP TABLE attempts_v6;

-- Invariant 5: one provider row confirms at most one attempt, and is recorded as a duplicate
-- at most once; a row is named by its device, its table, its _id and its date.
CREATE UNIQUE INDEX attempts_provider_row ON attempts (
    device, provider_kind, provider_object_id, coalesce(provider_row_date_ms, -1)
) WHERE provider_object_id IS NOT NULL;
CREATE UNIQUE INDEX duplicates_provider_row ON duplicates (
    device, provider_kind, provider_object_id, coalesce(provider_row_date_ms, -1)
);

CREATE INDEX attempts_by_device_confirmed ON attempts (device, confirmed_at)
    WHERE confirmed_at IS NOT NULL;
CREATE INDEX attempts_by_device_state ON attempts (device, delivery, acceptance);
CREATE INDEX attempts_by_device_time ON attempts (device, dispatched_at);
CREATE INDEX attempts_by_device_watermark ON attempts (device, watermark_id)
    WHERE watermark_id IS NOT NULL;
CREATE UNIQUE INDEX attempts_device_lease ON attempts (device)
    WHERE delivery = 'PENDING'
      AND coalesce(review_reason, '') NOT IN ('UNVERIFIED', 'RCS_SUSPECTED', 'AMBIGUOUS', 'STUCK');
CREATE INDEX attempts_failed_rows ON attempts (
    device,
    coalesce(json_extract(evidence_json, '$.provider_kind'), 'sms'),
    json_extract(evidence_json, '$.provider_object_id')
) WHERE delivery = 'FAILED';
CREATE INDEX attempts_notable ON attempts (action_id)
    WHERE NOT (delivery = 'CONFIRMED' AND acceptance = 'ACCEPTED' AND review_reason IS NULL);
CREATE UNIQUE INDEX attempts_one_in_flight_per_action ON attempts (action_id)
    WHERE delivery = 'PENDING';
CREATE INDEX attempts_review ON attempts (review_reason) WHERE review_reason IS NOT NULL;
CREATE INDEX duplicates_by_dispatch ON duplicates (dispatch_id);

-- Attempts are never deleted: the receipt outlives every outcome.
CREATE TRIGGER attempts_no_delete BEFORE DELETE ON attempts
BEGIN
    SELECT RAISE(ABORT, 'attempts are never deleted');
END;

-- Every change bumps the version by one, so every change writes exactly one history row.
CREATE TRIGGER attempts_version_step BEFORE UPDATE ON attempts
WHEN NEW.version IS NOT OLD.version + 1
BEGIN
    SELECT RAISE(ABORT, 'every change to an attempt must bump its version by one');
END;

-- Invariant 6: final states are left only by an operator's resolution.
CREATE TRIGGER attempts_monotone BEFORE UPDATE ON attempts
WHEN NEW.last_event NOT IN ('resolve_sent', 'resolve_not_sent')
 AND ((OLD.delivery <> 'PENDING' AND NEW.delivery <> OLD.delivery)
   OR (OLD.acceptance <> 'PENDING' AND NEW.acceptance <> OLD.acceptance))
BEGIN
    SELECT RAISE(ABORT, 'a final state is left only by an operator resolution');
END;

-- A provider row (device, kind, _id, date) is either one attempt's artifact or a duplicate,
-- never both.
CREATE TRIGGER duplicates_not_an_artifact BEFORE INSERT ON duplicates
WHEN EXISTS (SELECT 1 FROM attempts
             WHERE device = NEW.device AND provider_kind = NEW.provider_kind
               AND provider_object_id = NEW.provider_object_id
               AND coalesce(provider_row_date_ms, -1) = coalesce(NEW.provider_row_date_ms, -1))
BEGIN
    SELECT RAISE(ABORT, 'this provider row already confirms an attempt');
END;

CREATE TRIGGER attempts_artifact_not_a_duplicate
BEFORE UPDATE OF provider_object_id, provider_kind, provider_row_date_ms ON attempts
WHEN NEW.provider_object_id IS NOT NULL AND EXISTS (
    SELECT 1 FROM duplicates
    WHERE device = NEW.device AND provider_kind = NEW.provider_kind
      AND provider_object_id = NEW.provider_object_id
      AND coalesce(provider_row_date_ms, -1) = coalesce(NEW.provider_row_date_ms, -1))
BEGIN
    SELECT RAISE(ABORT, 'this provider row is recorded as a duplicate');
END;

CREATE TRIGGER attempts_history_on_insert AFTER INSERT ON attempts
BEGIN
    INSERT INTO history (action_id, dispatch_id, event, at, actor, from_delivery, to_delivery,
                         from_acceptance, to_acceptance, evidence_json)
    VALUES (NEW.action_id, NEW.dispatch_id, NEW.last_event, NEW.last_event_at, NEW.last_actor,
            NULL, NEW.delivery, NULL, NEW.acceptance, NEW.last_evidence_json);
END;

CREATE TRIGGER attempts_history_on_update AFTER UPDATE ON attempts
BEGIN
    INSERT INTO history (action_id, dispatch_id, event, at, actor, from_delivery, to_delivery,
                         from_acceptance, to_acceptance, evidence_json)
    VALUES (NEW.action_id, NEW.dispatch_id, NEW.last_event, NEW.last_event_at, NEW.last_actor,
            OLD.delivery, NEW.delivery, OLD.acceptance, NEW.acceptance, NEW.last_evidence_json);
END;
