-- Version 14.
-- Webhooks: the ledger's events (0013) sent to HTTP endpoints, signed per Standard Webhooks.
-- 1. The endpoints, each with its own cursor into the events. Delivery is at least once and
--    in order per endpoint: the event after `cursor_position` (the head) is tried until a 2xx
--    moves the cursor past it, or until its retry schedule is spent and the endpoint is turned off
--    (state DISABLED, with why). The secret is kept here, in clear: the deliverer signs with
--    it, so the ledger (a file of mode 0600, or a PostgreSQL schema) must be kept private.
--    A deliverer claims an endpoint before sending to it (`claimed_by`, `claimed_until`: a
--    conditional UPDATE, a lease it renews before each request), so that two deliverers
--    never send to one endpoint at once nor out of order; a crashed one's claim lapses.
CREATE TABLE webhooks (
    endpoint_id         TEXT    PRIMARY KEY CHECK (endpoint_id GLOB 'whk_?*'),
    url                 TEXT    NOT NULL
        CHECK (url GLOB 'http://?*' OR url GLOB 'https://?*'),
    -- the signing secret, `whsec_` and base64: shown once, when the endpoint is added
    secret              TEXT    NOT NULL CHECK (secret GLOB 'whsec_?*'),
    -- the event types it receives (a JSON array of types or families `action.*`; [] all)
    types_json          TEXT    NOT NULL CHECK (json_valid(types_json)),
    -- may the URL's host be or resolve to a private, loopback or link-local address (SSRF)?
    allow_private       INTEGER NOT NULL CHECK (allow_private IN (0, 1)),
    -- are phone numbers and bodies sent in clear (else redacted, as the CLI shows them)?
    show_private        INTEGER NOT NULL CHECK (show_private IN (0, 1)),
    created_at          TEXT    NOT NULL,
    -- the position of the last event delivered or passed over (not of its types)
    cursor_position     INTEGER NOT NULL CHECK (cursor_position >= 0),
    state               TEXT    NOT NULL DEFAULT 'ENABLED'
        CHECK (state IN ('ENABLED', 'DISABLED')),
    disabled_at         TEXT,
    disabled_reason     TEXT,
    -- the head event being tried, its failed tries, and when the next try is due (NULL: now)
    head_position       INTEGER CHECK (head_position IS NULL OR head_position > cursor_position),
    failures            INTEGER NOT NULL DEFAULT 0 CHECK (failures >= 0),
    next_try_at         TEXT,
    -- the latest try: its HTTP status (NULL: no answer), error, time; the latest 2xx's time
    last_status         INTEGER,
    last_error          TEXT,
    last_try_at         TEXT,
    last_success_at     TEXT,
    delivered           INTEGER NOT NULL DEFAULT 0 CHECK (delivered >= 0),
    -- the deliverer sending to it now, until when (NULL: none)
    claimed_by          TEXT,
    claimed_until       TEXT,
    CHECK ((state = 'DISABLED') = (disabled_at IS NOT NULL AND disabled_reason IS NOT NULL)),
    CHECK ((claimed_by IS NULL) = (claimed_until IS NULL)),
    CHECK (head_position IS NOT NULL OR failures = 0)
) STRICT;
CREATE INDEX webhooks_due ON webhooks (next_try_at) WHERE state = 'ENABLED';
-- 2. An endpoint turned off is an event (DESIGN.md invariant 10), written by this trigger in
--    the statement that turns it off: `webhook.disabled`, with why and the event it was
--    stuck on (other endpoints may receive it).
CREATE TRIGGER webhooks_events_on_disable AFTER UPDATE OF state ON webhooks
WHEN OLD.state = 'ENABLED' AND NEW.state = 'DISABLED'
BEGIN
    INSERT INTO events (event_id, type, action_id, dispatch_id, device, history_sequence, at,
                        data_json)
    VALUES ('evt_' || lower(hex(randomblob(12))), 'webhook.disabled', NULL, NULL, NULL, NULL,
            NEW.disabled_at,
            json_object('endpoint_id', NEW.endpoint_id,
                        'reason', NEW.disabled_reason,
                        'failures', NEW.failures,
                        'stuck_at_position', NEW.head_position,
                        'last_status', NEW.last_status,
                        'command', 'starebrain webhook enable ' || NEW.endpoint_id));
END;
