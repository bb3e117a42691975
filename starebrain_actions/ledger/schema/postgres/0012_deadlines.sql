-- starebrain-actions ledger for PostgreSQL, version 12: the SQLite schema at version 16
-- (../migrations/0016_deadlines.sql, which says why): an action's deadline and schedule as
-- columns, its expiry recorded once with its action.expired event, and no receipt outside
-- the intent's time.
ALTER TABLE actions ADD COLUMN not_after TEXT;
ALTER TABLE actions ADD COLUMN not_before TEXT
    CHECK (not_before IS NULL OR not_after IS NULL OR not_before < not_after);
ALTER TABLE actions ADD COLUMN expired_at TEXT
    CHECK (expired_at IS NULL OR (not_after IS NOT NULL AND expired_at >= not_after));
CREATE INDEX actions_to_expire ON actions (not_after)
    WHERE not_after IS NOT NULL AND expired_at IS NULL;
CREATE INDEX actions_by_deadline ON actions (not_after) WHERE not_after IS NOT NULL;

CREATE FUNCTION starebrain_actions_times_fixed() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    RAISE EXCEPTION 'an action''s deadline and schedule are part of its intent: never changed'
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;
CREATE TRIGGER actions_times_fixed BEFORE UPDATE OF not_after, not_before ON actions
    FOR EACH ROW
    WHEN (NEW.not_after IS DISTINCT FROM OLD.not_after
          OR NEW.not_before IS DISTINCT FROM OLD.not_before)
    EXECUTE FUNCTION starebrain_actions_times_fixed();
CREATE FUNCTION starebrain_actions_expiry_once() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    RAISE EXCEPTION 'an action''s expiry is recorded once'
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;
CREATE TRIGGER actions_expiry_once BEFORE UPDATE OF expired_at ON actions
    FOR EACH ROW
    WHEN (OLD.expired_at IS NOT NULL AND NEW.expired_at IS DISTINCT FROM OLD.expired_at)
    EXECUTE FUNCTION starebrain_actions_expiry_once();

CREATE FUNCTION starebrain_attempts_within_time() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM actions
               WHERE actions.action_id = NEW.action_id
                 AND (NEW.dispatched_at >= actions.not_after
                      OR NEW.dispatched_at < actions.not_before)) THEN
        RAISE EXCEPTION 'no attempt starts at or after its action''s deadline (not_after) or before its schedule (not_before)'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER attempts_within_the_intents_time BEFORE INSERT ON attempts
    FOR EACH ROW EXECUTE FUNCTION starebrain_attempts_within_time();

CREATE OR REPLACE FUNCTION actions_events_on_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO events (event_id, type, action_id, dispatch_id, device, history_sequence, at,
                        data_json)
    VALUES (starebrain_new_event_id(), 'action.created', NEW.action_id, NULL,
            NEW.planned_device, NULL, NEW.created_at,
            json_build_object('pool', NEW.pool, 'owner', NEW.owner,
                              'maximum_attempts', NEW.maximum_attempts,
                              'deadline', NEW.deadline,
                              'not_after', NEW.not_after, 'not_before', NEW.not_before)::text);
    RETURN NULL;
END;
$$;

CREATE FUNCTION actions_events_on_expiry() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO events (event_id, type, action_id, dispatch_id, device, history_sequence, at,
                        data_json)
    VALUES (starebrain_new_event_id(), 'action.expired', NEW.action_id, NULL,
            NEW.planned_device, NULL, NEW.expired_at,
            json_build_object('not_after', NEW.not_after, 'pool', NEW.pool,
                              'owner', NEW.owner,
                              'attempts', (SELECT count(*) FROM attempts
                                           WHERE attempts.action_id = NEW.action_id))::text);
    RETURN NULL;
END;
$$;
CREATE TRIGGER actions_events_on_expiry AFTER UPDATE OF expired_at ON actions
    FOR EACH ROW WHEN (OLD.expired_at IS NULL AND NEW.expired_at IS NOT NULL)
    EXECUTE FUNCTION actions_events_on_expiry();
