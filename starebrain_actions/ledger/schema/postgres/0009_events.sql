-- starebrain-actions ledger for PostgreSQL, migration 9: the SQLite schema at version 13
-- (../migrations/0013_events.sql, which says why): the events, written by the history's own
-- trigger and by a new action's, in the same transaction as the change they report.
--
-- One difference, and why: SQLite has one writer at a time, so its AUTOINCREMENT numbers
-- events in commit order. Here an identity is taken when the row is inserted, not when its
-- transaction commits: a reader that went past 7 while 6 was still uncommitted would never
-- see 6. So an event is written with `position` NULL and numbered later, by
-- starebrain_place_events(), which readers call first: under a transaction lock of its own it
-- numbers, in `sequence` order, the events committed and not yet numbered. An uncommitted
-- event is invisible to it, so it is numbered by a later call, after every position handed
-- out before: positions follow the order in which events became visible, and a cursor never
-- passes an event it has not seen. Numbering is the only change an event ever takes.
CREATE TABLE events (
    sequence            BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    position            BIGINT  UNIQUE,
    event_id            TEXT    NOT NULL UNIQUE CHECK (event_id LIKE 'evt\__%'),
    type                TEXT    NOT NULL CHECK (type LIKE '_%._%'),
    action_id           TEXT,
    dispatch_id         TEXT,
    device              TEXT,
    history_sequence    BIGINT,
    at                  TEXT    NOT NULL,
    data_json           TEXT    NOT NULL CHECK (starebrain_json_valid(data_json))
);
CREATE INDEX events_unplaced ON events (sequence) WHERE position IS NULL;
CREATE INDEX events_by_action ON events (action_id, position) WHERE action_id IS NOT NULL;
CREATE INDEX events_by_type ON events (type, position);
CREATE INDEX events_by_history ON events (history_sequence) WHERE history_sequence IS NOT NULL;

CREATE FUNCTION events_append_only() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF OLD.position IS NULL AND NEW.position IS NOT NULL
           AND ROW(OLD.sequence, OLD.event_id, OLD.type, OLD.action_id, OLD.dispatch_id,
                   OLD.device, OLD.history_sequence, OLD.at, OLD.data_json)
               IS NOT DISTINCT FROM
               ROW(NEW.sequence, NEW.event_id, NEW.type, NEW.action_id, NEW.dispatch_id,
                   NEW.device, NEW.history_sequence, NEW.at, NEW.data_json) THEN
            RETURN NEW;  -- numbering, once
        END IF;
    END IF;
    RAISE EXCEPTION 'events are append-only'
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;
CREATE TRIGGER events_no_update BEFORE UPDATE ON events
    FOR EACH ROW EXECUTE FUNCTION events_append_only();
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION events_append_only();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_append_only();

CREATE FUNCTION starebrain_new_event_id() RETURNS text
LANGUAGE sql VOLATILE AS $$
    SELECT 'evt_' || substr(replace(gen_random_uuid()::text, '-', ''), 1, 24)
$$;

CREATE FUNCTION starebrain_place_events() RETURNS bigint
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
DECLARE
    placed bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(
        hashtextextended('starebrain:' || current_schema() || ':events', 0));
    WITH base AS (SELECT coalesce(max(position), 0) AS top FROM events),
    todo AS (
        SELECT sequence, row_number() OVER (ORDER BY sequence) AS n
        FROM events WHERE position IS NULL
    )
    UPDATE events AS e SET position = base.top + todo.n
    FROM todo, base WHERE e.sequence = todo.sequence;
    GET DIAGNOSTICS placed = ROW_COUNT;
    RETURN placed;
END;
$$;

CREATE FUNCTION history_events() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    a attempts%ROWTYPE;
    x actions%ROWTYPE;
    ev jsonb := NEW.evidence_json::jsonb;
    kind text;
    spent bigint;
    data text;
BEGIN
    SELECT * INTO a FROM attempts WHERE dispatch_id = NEW.dispatch_id;
    SELECT * INTO x FROM actions WHERE action_id = NEW.action_id;
    kind := CASE
        WHEN NEW.event = 'created' THEN 'attempt.created'
        WHEN NEW.event = 'submitted' THEN 'attempt.submitted'
        WHEN NEW.event = 'confirm' THEN 'action.sent'
        WHEN NEW.event = 'accept' THEN
            CASE WHEN a.review_reason IS NULL THEN 'action.succeeded'
                 ELSE 'action.needs_person' END
        WHEN NEW.event IN ('reject', 'flag_review') THEN 'action.needs_person'
        WHEN NEW.event = 'fail' THEN
            CASE
                WHEN coalesce(ev ->> 'not_ready', '') <> '' THEN 'phone.not_ready'
                WHEN ev -> 'unreachable' = 'true'::jsonb THEN 'phone.unreachable'
                WHEN ev -> 'fence_lost' = 'true'::jsonb THEN 'attempt.failed'
                ELSE NULL
            END
        WHEN NEW.event = 'note_error' THEN
            CASE WHEN ev -> 'unreachable' = 'true'::jsonb THEN 'phone.unreachable'
                 ELSE 'attempt.error' END
        WHEN NEW.event IN ('resolve_sent', 'resolve_not_sent') THEN 'action.resolved'
        WHEN NEW.event = 'retry_granted' THEN 'action.retry_granted'
        WHEN NEW.event = 'approved' THEN 'action.approved'
        WHEN NEW.event = 'denied' THEN 'action.denied'
        WHEN NEW.event = 'policy_pinned' THEN 'action.policy_pinned'
        WHEN NEW.event = 'policy_verdict' THEN
            CASE ev ->> 'verdict'
                WHEN 'DENY' THEN 'action.denied'
                WHEN 'HOLD' THEN 'action.needs_person'
                WHEN 'WAIT' THEN 'action.waiting'
                WHEN 'OVER_LIMIT' THEN 'action.refused'
                ELSE 'action.released'
            END
        ELSE 'action.changed'
    END;
    IF NEW.event = 'fail' AND kind IS NULL THEN
        SELECT count(*) INTO spent FROM attempts c
        WHERE c.action_id = NEW.action_id
          AND c.attempt > coalesce((x.grant_json::jsonb ->> 'after_attempt')::bigint, 0)
          AND NOT (c.delivery = 'FAILED' AND (
              (c.evidence_json::jsonb -> 'unreachable') IS NOT DISTINCT FROM 'true'::jsonb
              OR (c.evidence_json::jsonb -> 'fence_lost') IS NOT DISTINCT FROM 'true'::jsonb
              OR coalesce(c.evidence_json::jsonb ->> 'not_ready', '') <> ''));
        kind := CASE
            WHEN spent >= coalesce((x.grant_json::jsonb ->> 'attempts')::bigint,
                                   x.maximum_attempts)
            THEN 'action.failed' ELSE 'attempt.failed' END;
    END IF;
    data := json_build_object(
        'event', NEW.event,
        'actor', NEW.actor,
        'attempt', a.attempt,
        'delivery', NEW.to_delivery,
        'acceptance', NEW.to_acceptance,
        'review_reason', a.review_reason,
        'error', a.last_error,
        'pool', x.pool,
        'owner', x.owner,
        'evidence', NEW.evidence_json::json
    )::text;
    INSERT INTO events (event_id, type, action_id, dispatch_id, device, history_sequence, at,
                        data_json)
    VALUES (starebrain_new_event_id(), kind, NEW.action_id, nullif(NEW.dispatch_id, ''),
            coalesce(a.device, x.planned_device, x.claimed_device), NEW.sequence, NEW.at,
            data);
    IF NEW.event IN ('confirm', 'resolve_sent') AND NEW.to_acceptance = 'ACCEPTED'
       AND NEW.from_acceptance IS DISTINCT FROM 'ACCEPTED' AND a.dispatch_id IS NOT NULL
       AND a.review_reason IS NULL THEN
        INSERT INTO events (event_id, type, action_id, dispatch_id, device, history_sequence,
                            at, data_json)
        VALUES (starebrain_new_event_id(), 'action.succeeded', NEW.action_id,
                nullif(NEW.dispatch_id, ''), a.device, NEW.sequence, NEW.at, data);
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER history_events AFTER INSERT ON history
    FOR EACH ROW EXECUTE FUNCTION history_events();

CREATE FUNCTION actions_events_on_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO events (event_id, type, action_id, dispatch_id, device, history_sequence, at,
                        data_json)
    VALUES (starebrain_new_event_id(), 'action.created', NEW.action_id, NULL,
            NEW.planned_device, NULL, NEW.created_at,
            json_build_object('pool', NEW.pool, 'owner', NEW.owner,
                              'maximum_attempts', NEW.maximum_attempts,
                              'deadline', NEW.deadline)::text);
    RETURN NULL;
END;
$$;
CREATE TRIGGER actions_events_on_insert AFTER INSERT ON actions
    FOR EACH ROW EXECUTE FUNCTION actions_events_on_insert();
