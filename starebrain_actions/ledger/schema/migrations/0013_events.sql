-- Version 13.
-- Every change has its event (DESIGN.md invariant 10): an outbox in the ledger.
-- 1. The events, in the order they were committed (`position`: SQLite has one writer at a
--    time, so AUTOINCREMENT order is commit order), each with a stable id that a webhook
--    receiver can drop repeats by. Never changed, never deleted: the ledger keeps them as
--    long as it keeps the history they report (for ever).
CREATE TABLE events (
    position            INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id            TEXT    NOT NULL UNIQUE CHECK (event_id GLOB 'evt_?*'),
    type                TEXT    NOT NULL CHECK (type GLOB '?*.?*'),
    action_id           TEXT,
    dispatch_id         TEXT,
    device              TEXT,
    -- the history row it reports (NULL: a change the history does not keep)
    history_sequence    INTEGER,
    at                  TEXT    NOT NULL,
    data_json           TEXT    NOT NULL CHECK (json_valid(data_json))
) STRICT;
CREATE INDEX events_by_action ON events (action_id, position) WHERE action_id IS NOT NULL;
CREATE INDEX events_by_type ON events (type, position);
CREATE INDEX events_by_history ON events (history_sequence) WHERE history_sequence IS NOT NULL;
CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;
-- 2. Each history row writes its event in the same statement (so in the same transaction as
--    the change it reports), typed from what changed:
--    created: attempt.created; submitted: attempt.submitted; confirm: action.sent;
--    accept: action.succeeded (action.needs_person while a review stands); reject and
--    flag_review: action.needs_person; fail: phone.not_ready or phone.unreachable when that is
--    all it proves, action.failed when no attempt is left in the budget, attempt.failed
--    otherwise; note_error: phone.unreachable when the phone could not be reached,
--    attempt.error otherwise; resolve_sent, resolve_not_sent: action.resolved; the action's
--    own events: action.retry_granted, action.approved, action.denied,
--    action.policy_pinned, and a policy verdict: action.denied (DENY),
--    action.needs_person (HOLD), action.waiting (WAIT), action.refused (OVER_LIMIT: a
--    limit, or the recipient opted out), action.released (let go).
--    A confirmation or a ruling that also accepts writes action.succeeded after its own.
CREATE TRIGGER history_events AFTER INSERT ON history
BEGIN
    INSERT INTO events (event_id, type, action_id, dispatch_id, device, history_sequence, at,
                        data_json)
    SELECT 'evt_' || lower(hex(randomblob(12))), kind, NEW.action_id,
           nullif(NEW.dispatch_id, ''), device, NEW.sequence, NEW.at, data
    FROM (
        SELECT
            CASE
                WHEN NEW.event = 'created' THEN 'attempt.created'
                WHEN NEW.event = 'submitted' THEN 'attempt.submitted'
                WHEN NEW.event = 'confirm' THEN 'action.sent'
                WHEN NEW.event = 'accept' THEN
                    CASE WHEN a.review_reason IS NULL THEN 'action.succeeded'
                         ELSE 'action.needs_person' END
                WHEN NEW.event IN ('reject', 'flag_review') THEN 'action.needs_person'
                WHEN NEW.event = 'fail' THEN
                    CASE
                        WHEN coalesce(json_extract(NEW.evidence_json, '$.not_ready'), '') <> ''
                            THEN 'phone.not_ready'
                        WHEN json_extract(NEW.evidence_json, '$.unreachable') IS 1
                            THEN 'phone.unreachable'
                        WHEN json_extract(NEW.evidence_json, '$.fence_lost') IS 1
                            THEN 'attempt.failed'
                        WHEN (SELECT count(*) FROM attempts c
                              WHERE c.action_id = NEW.action_id
                                AND c.attempt > coalesce(
                                    json_extract(x.grant_json, '$.after_attempt'), 0)
                                AND NOT (c.delivery = 'FAILED' AND (
                                    json_extract(c.evidence_json, '$.unreachable') IS 1
                                    OR json_extract(c.evidence_json, '$.fence_lost') IS 1
                                    OR coalesce(json_extract(c.evidence_json, '$.not_ready'),
                                                '') <> '')))
                             >= coalesce(json_extract(x.grant_json, '$.attempts'),
                                         x.maximum_attempts)
                            THEN 'action.failed'
                        ELSE 'attempt.failed'
                    END
                WHEN NEW.event = 'note_error' THEN
                    CASE WHEN json_extract(NEW.evidence_json, '$.unreachable') IS 1
                         THEN 'phone.unreachable' ELSE 'attempt.error' END
                WHEN NEW.event IN ('resolve_sent', 'resolve_not_sent') THEN 'action.resolved'
                WHEN NEW.event = 'retry_granted' THEN 'action.retry_granted'
                WHEN NEW.event = 'approved' THEN 'action.approved'
                WHEN NEW.event = 'denied' THEN 'action.denied'
                WHEN NEW.event = 'policy_pinned' THEN 'action.policy_pinned'
                WHEN NEW.event = 'policy_verdict' THEN
                    CASE json_extract(NEW.evidence_json, '$.verdict')
                        WHEN 'DENY' THEN 'action.denied'
                        WHEN 'HOLD' THEN 'action.needs_person'
                        WHEN 'WAIT' THEN 'action.waiting'
                        WHEN 'OVER_LIMIT' THEN 'action.refused'
                        ELSE 'action.released'
                    END
                ELSE 'action.changed'
            END AS kind,
            coalesce(a.device, x.planned_device, x.claimed_device) AS device,
            json_object(
                'event', NEW.event,
                'actor', NEW.actor,
                'attempt', a.attempt,
                'delivery', NEW.to_delivery,
                'acceptance', NEW.to_acceptance,
                'review_reason', a.review_reason,
                'error', a.last_error,
                'pool', x.pool,
                'owner', x.owner,
                'evidence', json(NEW.evidence_json)
            ) AS data
        FROM (SELECT 1) AS one
        LEFT JOIN attempts AS a ON a.dispatch_id = NEW.dispatch_id
        LEFT JOIN actions AS x ON x.action_id = NEW.action_id
    );
    -- the same change's action.succeeded, with the same data
    INSERT INTO events (event_id, type, action_id, dispatch_id, device, history_sequence, at,
                        data_json)
    SELECT 'evt_' || lower(hex(randomblob(12))), 'action.succeeded', action_id, dispatch_id,
           device, history_sequence, at, data_json
    FROM events
    WHERE history_sequence = NEW.sequence AND dispatch_id IS NOT NULL
      AND NEW.event IN ('confirm', 'resolve_sent')
      AND NEW.to_acceptance = 'ACCEPTED' AND NEW.from_acceptance IS NOT 'ACCEPTED'
      AND json_extract(data_json, '$.review_reason') IS NULL;
END;
-- 3. A new action is an event too (it has no history row of its own until its first attempt
--    or ruling): action.created, with where it is meant to go.
CREATE TRIGGER actions_events_on_insert AFTER INSERT ON actions
BEGIN
    INSERT INTO events (event_id, type, action_id, dispatch_id, device, history_sequence, at,
                        data_json)
    VALUES ('evt_' || lower(hex(randomblob(12))), 'action.created', NEW.action_id, NULL,
            NEW.planned_device, NULL, NEW.created_at,
            json_object('pool', NEW.pool, 'owner', NEW.owner,
                        'maximum_attempts', NEW.maximum_attempts,
                        'deadline', NEW.deadline));
END;
