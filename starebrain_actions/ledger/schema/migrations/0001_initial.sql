-- starebrain-actions ledger, schema version 1.
-- Enum values are the literal text stored; invariants that can be constraints are.

CREATE TABLE actions (
    action_id           TEXT    PRIMARY KEY CHECK (length(action_id) BETWEEN 1 AND 200),
    fingerprint         TEXT    NOT NULL CHECK (fingerprint GLOB 'sha256:*'),
    intent_json         TEXT    NOT NULL CHECK (json_valid(intent_json)),
    maximum_attempts    INTEGER NOT NULL CHECK (maximum_attempts >= 1),
    policy_json         TEXT    NOT NULL CHECK (json_valid(policy_json)),
    created_at          TEXT    NOT NULL,
    deadline            TEXT
) STRICT;

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
                                ('AMBIGUOUS', 'DUPLICATE', 'MISMATCH', 'BUDGET_EXHAUSTED', 'STUCK')),
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
    -- invariant 5: one provider row confirms at most one attempt
    UNIQUE (device, provider_object_id),
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

-- One unresolved attempt per action, and the per-device lease: the in-flight attempt holds
-- its device until proof or an operator resolves it. A crash frees neither.
CREATE UNIQUE INDEX attempts_one_in_flight_per_action ON attempts (action_id)
    WHERE delivery = 'PENDING';
CREATE UNIQUE INDEX attempts_device_lease ON attempts (device)
    WHERE delivery = 'PENDING';
CREATE INDEX attempts_review ON attempts (review_reason) WHERE review_reason IS NOT NULL;

-- Provider rows that match an already-confirmed attempt: the phone sent it again.
CREATE TABLE duplicates (
    device              TEXT    NOT NULL,
    provider_object_id  INTEGER NOT NULL CHECK (provider_object_id >= 0),
    dispatch_id         TEXT    NOT NULL REFERENCES attempts (dispatch_id),
    seen_at             TEXT    NOT NULL,
    evidence_json       TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(evidence_json)),
    PRIMARY KEY (device, provider_object_id)
) STRICT;

CREATE TABLE history (
    sequence            INTEGER PRIMARY KEY AUTOINCREMENT,
    action_id           TEXT    NOT NULL,
    dispatch_id         TEXT    NOT NULL,
    event               TEXT    NOT NULL,
    at                  TEXT    NOT NULL,
    actor               TEXT    NOT NULL,
    from_delivery       TEXT,
    to_delivery         TEXT    NOT NULL,
    from_acceptance     TEXT,
    to_acceptance       TEXT    NOT NULL,
    evidence_json       TEXT    NOT NULL CHECK (json_valid(evidence_json))
) STRICT;
CREATE INDEX history_by_action ON history (action_id, sequence);
CREATE INDEX history_by_dispatch ON history (dispatch_id, sequence);

-- The history is append-only.
CREATE TRIGGER history_no_update BEFORE UPDATE ON history
BEGIN
    SELECT RAISE(ABORT, 'history is append-only');
END;
CREATE TRIGGER history_no_delete BEFORE DELETE ON history
BEGIN
    SELECT RAISE(ABORT, 'history is append-only');
END;

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

-- A provider row is either one attempt's artifact or a duplicate, never both.
CREATE TRIGGER duplicates_not_an_artifact BEFORE INSERT ON duplicates
WHEN EXISTS (SELECT 1 FROM attempts
             WHERE device = NEW.device AND provider_object_id = NEW.provider_object_id)
BEGIN
    SELECT RAISE(ABORT, 'this provider row already confirms an attempt');
END;
CREATE TRIGGER attempts_artifact_not_a_duplicate BEFORE UPDATE OF provider_object_id ON attempts
WHEN NEW.provider_object_id IS NOT NULL AND EXISTS (
    SELECT 1 FROM duplicates
    WHERE device = NEW.device AND provider_object_id = NEW.provider_object_id)
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
