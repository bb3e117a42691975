-- starebrain-actions ledger, schema version 2: an artifact is (device, kind, provider _id).
-- content://sms and content://mms number their rows independently (an MMS _id 12 and an
-- SMS _id 12 are different messages), so every provider row the ledger keeps names its
-- table: attempts.provider_kind and duplicates.provider_kind ('sms' or 'mms').
--
-- SQLite cannot drop a table constraint, so attempts and duplicates are rebuilt. This runs in
-- the migration's one transaction with foreign_keys=ON (see _ledger._migrate), so no step may
-- leave a dangling reference, even for a moment: the old tables are renamed out of the way
-- (which repoints duplicates' reference to the renamed attempts), the new tables are created
-- under the real names and filled, and the old ones are dropped child first, when nothing
-- references them any more. (Creating new tables under temporary names and renaming them
-- afterwards does not work here, even with defer_foreign_keys: dropping the old attempts
-- would count every duplicate as a deferred violation that nothing ever clears.)
-- The triggers are dropped first (a rename re-checks them) and recreated last, so the copy
-- writes no history; DROP TABLE's implicit delete fires no trigger either. The history
-- table is not touched: its rows and AUTOINCREMENT sequence stay as they are.
-- Rows confirmed before this version came from content://sms: their kind is 'sms'.
-- Version 2 also adds the review reasons UNVERIFIED and RCS_SUSPECTED (a sent attempt never
-- seen on the phone past its limit; the app may have sent it as RCS chat): such an attempt
-- stays unresolved but no longer holds its device's lease.

DROP TRIGGER attempts_artifact_not_a_duplicate;
DROP TRIGGER attempts_history_on_insert;
DROP TRIGGER attempts_history_on_update;
DROP TRIGGER attempts_monotone;
DROP TRIGGER attempts_no_delete;
DROP TRIGGER attempts_version_step;
DROP TRIGGER duplicates_not_an_artifact;

DROP INDEX attempts_one_in_flight_per_action;
DROP INDEX attempts_device_lease;
DROP INDEX attempts_review;

ALTER TABLE duplicates RENAME TO duplicates_v1;
ALTER TABLE attempts RENAME TO attempts_v1;

CREATE TABLE attempts (
    dispatch_id         TEXT    PRIMARY KEY,
    action_id           TEXT    NOT NULL REFERENCES actions (action_id),
    attempt             INTEGER NOT NULL CHECK (attempt >= 1),
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
                                 'UNVERIFIED', 'RCS_SUSPECTED')),
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

    UNIQUE (action_id, attempt),
    -- invariant 5: one provider row confirms at most one attempt; a row is named by its
    -- device, its provider table and its _id in that table
    UNIQUE (device, provider_kind, provider_object_id),
    -- a provider _id means nothing without the table it was read from
    CHECK ((provider_kind IS NULL) = (provider_object_id IS NULL)),
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
    last_event, last_event_at, last_actor, last_evidence_json)
SELECT
    dispatch_id, action_id, attempt, device, delivery, acceptance, provider_object_id,
    CASE WHEN provider_object_id IS NULL THEN NULL ELSE 'sms' END,
    watermark_id, device_clock_ms, dispatched_at, confirmed_at, failed_at,
    accepted_at, rejected_at, evidence_json, last_error, review_reason, resolved_by, version,
    last_event, last_event_at, last_actor, last_evidence_json
FROM attempts_v1;

-- Provider rows that match an already-confirmed attempt: the phone sent it again.
CREATE TABLE duplicates (
    device              TEXT    NOT NULL,
    provider_object_id  INTEGER NOT NULL CHECK (provider_object_id >= 0),
    provider_kind       TEXT    NOT NULL DEFAULT 'sms' CHECK (provider_kind IN ('sms', 'mms')),
    dispatch_id         TEXT    NOT NULL REFERENCES attempts (dispatch_id),
    seen_at             TEXT    NOT NULL,
    evidence_json       TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(evidence_json)),
    PRIMARY KEY (device, provider_kind, provider_object_id)
) STRICT;

INSERT INTO duplicates (
    device, provider_object_id, provider_kind, dispatch_id, seen_at, evidence_json)
SELECT device, provider_object_id, 'sms', dispatch_id, seen_at, evidence_json
FROM duplicates_v1;

DROP TABLE duplicates_v1;
DROP TABLE attempts_v1;

-- One unresolved attempt per action, and the per-device lease: the in-flight attempt holds
-- its device until proof or an operator resolves it, or until it goes to review as
-- UNVERIFIED (its own action still waits: the first index). A crash frees neither.
CREATE UNIQUE INDEX attempts_one_in_flight_per_action ON attempts (action_id)
    WHERE delivery = 'PENDING';
CREATE UNIQUE INDEX attempts_device_lease ON attempts (device)
    WHERE delivery = 'PENDING'
      AND coalesce(review_reason, '') NOT IN ('UNVERIFIED', 'RCS_SUSPECTED');
CREATE INDEX attempts_review ON attempts (review_reason) WHERE review_reason IS NOT NULL;

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

-- A provider row (device, kind, _id) is either one attempt's artifact or a duplicate,
-- never both.
CREATE TRIGGER duplicates_not_an_artifact BEFORE INSERT ON duplicates
WHEN EXISTS (SELECT 1 FROM attempts
             WHERE device = NEW.device AND provider_kind = NEW.provider_kind
               AND provider_object_id = NEW.provider_object_id)
BEGIN
    SELECT RAISE(ABORT, 'this provider row already confirms an attempt');
END;
CREATE TRIGGER attempts_artifact_not_a_duplicate
BEFORE UPDATE OF provider_object_id, provider_kind ON attempts
WHEN NEW.provider_object_id IS NOT NULL AND EXISTS (
    SELECT 1 FROM duplicates
    WHERE device = NEW.device AND provider_kind = NEW.provider_kind
      AND provider_object_id = NEW.provider_object_id)
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
