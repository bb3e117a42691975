-- starebrain-actions ledger for PostgreSQL, migration 10: the SQLite schema at version 14
-- (../migrations/0014_webhooks.sql, which says why): the webhook endpoints, each with its
-- cursor into the events, its head event's tries and its deliverer's claim; and the trigger
-- that writes `webhook.disabled` in the statement that turns an endpoint off. As in 0009, the
-- event is written with `position` NULL and numbered once committed
-- (starebrain_place_events).
CREATE TABLE webhooks (
    endpoint_id         TEXT    PRIMARY KEY CHECK (endpoint_id LIKE 'whk\__%'),
    url                 TEXT    NOT NULL
        CHECK (url LIKE 'http://_%' OR url LIKE 'https://_%'),
    secret              TEXT    NOT NULL CHECK (secret LIKE 'whsec\__%'),
    types_json          TEXT    NOT NULL CHECK (starebrain_json_valid(types_json)),
    allow_private       BIGINT  NOT NULL CHECK (allow_private IN (0, 1)),
    show_private        BIGINT  NOT NULL CHECK (show_private IN (0, 1)),
    created_at          TEXT    NOT NULL,
    cursor_position     BIGINT  NOT NULL CHECK (cursor_position >= 0),
    state               TEXT    NOT NULL DEFAULT 'ENABLED'
        CHECK (state IN ('ENABLED', 'DISABLED')),
    disabled_at         TEXT,
    disabled_reason     TEXT,
    head_position       BIGINT  CHECK (head_position IS NULL OR head_position > cursor_position),
    failures            BIGINT  NOT NULL DEFAULT 0 CHECK (failures >= 0),
    next_try_at         TEXT,
    last_status         BIGINT,
    last_error          TEXT,
    last_try_at         TEXT,
    last_success_at     TEXT,
    delivered           BIGINT  NOT NULL DEFAULT 0 CHECK (delivered >= 0),
    claimed_by          TEXT,
    claimed_until       TEXT,
    CONSTRAINT webhooks_disabled_says_why
        CHECK ((state = 'DISABLED') = (disabled_at IS NOT NULL AND disabled_reason IS NOT NULL)),
    CONSTRAINT webhooks_claim_has_lease CHECK ((claimed_by IS NULL) = (claimed_until IS NULL)),
    CONSTRAINT webhooks_failures_of_a_head CHECK (head_position IS NOT NULL OR failures = 0)
);
CREATE INDEX webhooks_due ON webhooks (next_try_at) WHERE state = 'ENABLED';

CREATE FUNCTION webhooks_events_on_disable() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO events (event_id, type, action_id, dispatch_id, device, history_sequence, at,
                        data_json)
    VALUES (starebrain_new_event_id(), 'webhook.disabled', NULL, NULL, NULL, NULL,
            NEW.disabled_at,
            json_build_object('endpoint_id', NEW.endpoint_id,
                              'reason', NEW.disabled_reason,
                              'failures', NEW.failures,
                              'stuck_at_position', NEW.head_position,
                              'last_status', NEW.last_status,
                              'command', 'starebrain webhook enable ' || NEW.endpoint_id)::text);
    RETURN NULL;
END;
$$;
CREATE TRIGGER webhooks_events_on_disable AFTER UPDATE OF state ON webhooks
    FOR EACH ROW WHEN (OLD.state = 'ENABLED' AND NEW.state = 'DISABLED')
    EXECUTE FUNCTION webhooks_events_on_disable();
