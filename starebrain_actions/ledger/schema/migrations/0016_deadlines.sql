-- Version 16.
-- Time in the intent (issue 35): an action's deadline and schedule, kept with its intent
-- (they are in `intent_json` and its fingerprint too: a rerun naming other times is a changed
-- intent), as columns every path's SQL can read (DESIGN.md invariant 9).
-- 1. `not_after`: no attempt starts at or after it; `not_before`: none starts before it.
--    Written when the action is created, never changed. `expired_at`: when a writer first
--    recorded that the deadline passed with nothing of the action sent or under way (the
--    receipt that was refused for it, or a pass: the worker's, nightly's, reconcile's),
--    written once, with its `action.expired` event. The EXPIRED status itself is derived
--    from the deadline and the attempts, whether recorded yet or not.
ALTER TABLE actions ADD COLUMN not_after TEXT;
ALTER TABLE actions ADD COLUMN not_before TEXT
    CHECK (not_before IS NULL OR not_after IS NULL OR not_before < not_after);
ALTER TABLE actions ADD COLUMN expired_at TEXT
    CHECK (expired_at IS NULL OR (not_after IS NOT NULL AND expired_at >= not_after));
CREATE INDEX actions_to_expire ON actions (not_after)
    WHERE not_after IS NOT NULL AND expired_at IS NULL;
CREATE INDEX actions_by_deadline ON actions (not_after) WHERE not_after IS NOT NULL;
-- 2. The times are the intent's: never changed once written; an expiry is recorded once.
CREATE TRIGGER actions_times_fixed BEFORE UPDATE OF not_after, not_before ON actions
WHEN NEW.not_after IS NOT OLD.not_after OR NEW.not_before IS NOT OLD.not_before
BEGIN
    SELECT RAISE(ABORT, 'an action''s deadline and schedule are part of its intent: never changed');
END;
CREATE TRIGGER actions_expiry_once BEFORE UPDATE OF expired_at ON actions
WHEN OLD.expired_at IS NOT NULL AND NEW.expired_at IS NOT OLD.expired_at
BEGIN
    SELECT RAISE(ABORT, 'an action''s expiry is recorded once');
END;
-- 3. No receipt outside the intent's time, whatever the caller checked (should_redispatch
--    refuses first, with a reason; this is the ledger's own backstop).
CREATE TRIGGER attempts_within_the_intents_time BEFORE INSERT ON attempts
WHEN EXISTS (SELECT 1 FROM actions
             WHERE actions.action_id = NEW.action_id
               AND (NEW.dispatched_at >= actions.not_after
                    OR NEW.dispatched_at < actions.not_before))
BEGIN
    SELECT RAISE(ABORT, 'no attempt starts at or after its action''s deadline (not_after) or before its schedule (not_before)');
END;
-- 4. Events (invariant 10): action.created names the times; the expiry writes action.expired.
DROP TRIGGER actions_events_on_insert;
CREATE TRIGGER actions_events_on_insert AFTER INSERT ON actions
BEGIN
    INSERT INTO events (event_id, type, action_id, dispatch_id, device, history_sequence, at,
                        data_json)
    VALUES ('evt_' || lower(hex(randomblob(12))), 'action.created', NEW.action_id, NULL,
            NEW.planned_device, NULL, NEW.created_at,
            json_object('pool', NEW.pool, 'owner', NEW.owner,
                        'maximum_attempts', NEW.maximum_attempts,
                        'deadline', NEW.deadline,
                        'not_after', NEW.not_after, 'not_before', NEW.not_before));
END;
CREATE TRIGGER actions_events_on_expiry AFTER UPDATE OF expired_at ON actions
WHEN OLD.expired_at IS NULL AND NEW.expired_at IS NOT NULL
BEGIN
    INSERT INTO events (event_id, type, action_id, dispatch_id, device, history_sequence, at,
                        data_json)
    VALUES ('evt_' || lower(hex(randomblob(12))), 'action.expired', NEW.action_id, NULL,
            NEW.planned_device, NULL, NEW.expired_at,
            json_object('not_after', NEW.not_after, 'pool', NEW.pool, 'owner', NEW.owner,
                        'attempts', (SELECT count(*) FROM attempts
                                     WHERE attempts.action_id = NEW.action_id)));
END;
