-- Version 15.
-- Replies and STOP (issue 34, items 4 and 5): what the numbers the ledger has texted answer,
-- and their opt-outs, which the policy gate reads where each receipt is written (DESIGN.md
-- invariant 9), with the events of both written by trigger in the same statement
-- (invariant 10).
-- 1. The replies: incoming rows (`type` 1) of a phone's SMS store, from a number an action
--    of the ledger was sent to through that phone, seen by a read the product made anyway
--    (a reconcile pass, a sender's own reads). A row is named as attempts name it: the phone,
--    its `_id` and its `date` (ids are reused once the latest rows are deleted), so a reply
--    is recorded once however many reads see it. `number` is the sender as the product
--    normalises a recipient (E.164 with the phone's region; a short code's digits), `body`
--    the text as stored (personal: redacted on output like every body). `action_id` links it
--    to the latest action to that number sent through that phone before the reply's `date`
--    (ledger/replies.py says how, ties included); NULL when none was sent before it.
--    `keyword`: the whole text, trimmed and case-folded, was an opt-out or an opt-in keyword
--    of the policy in force when it was recorded. Never changed, never deleted.
CREATE TABLE replies (
    reply_id            INTEGER PRIMARY KEY AUTOINCREMENT,
    device              TEXT    NOT NULL CHECK (length(device) >= 1),
    provider_object_id  INTEGER NOT NULL CHECK (provider_object_id >= 0),
    -- the row's `date` on the phone's clock (ms); with the _id, which message it is
    row_date_ms         INTEGER NOT NULL CHECK (row_date_ms >= 0),
    number              TEXT    NOT NULL CHECK (length(number) >= 1),
    body                TEXT    NOT NULL,
    -- the row's `date` as a UTC time (the phone's clock), and when the ledger recorded it
    received_at         TEXT    NOT NULL,
    recorded_at         TEXT    NOT NULL,
    action_id           TEXT    REFERENCES actions (action_id),
    keyword             TEXT    CHECK (keyword IN ('opt_out', 'opt_in')),
    UNIQUE (device, provider_object_id, row_date_ms)
) STRICT;
CREATE INDEX replies_by_action ON replies (action_id, reply_id) WHERE action_id IS NOT NULL;
CREATE INDEX replies_by_number ON replies (number, reply_id);
CREATE TRIGGER replies_no_update BEFORE UPDATE ON replies
BEGIN
    SELECT RAISE(ABORT, 'replies are append-only');
END;
CREATE TRIGGER replies_no_delete BEFORE DELETE ON replies
BEGIN
    SELECT RAISE(ABORT, 'replies are append-only');
END;
-- 2. Opt-outs, as every change of them: a STOP reply (`actor` 'reply', `reply_id` set), a
--    START reply, or a person's `starebrain optouts add|remove` (with who and why). The
--    latest change of a number (highest `change_id`) is in force; the gate refuses every new
--    attempt to a number whose latest change is 'opt_out', re-judged at each attempt, so a
--    later 'opt_in' lifts it. Kept for good: who, when, why, from which reply.
CREATE TABLE opt_out_changes (
    change_id           INTEGER PRIMARY KEY AUTOINCREMENT,
    number              TEXT    NOT NULL CHECK (length(number) >= 1),
    change              TEXT    NOT NULL CHECK (change IN ('opt_out', 'opt_in')),
    at                  TEXT    NOT NULL,
    actor               TEXT    NOT NULL CHECK (length(actor) >= 1),
    reason              TEXT    NOT NULL,
    reply_id            INTEGER REFERENCES replies (reply_id),
    -- a reply's keyword is the reply's doing; a person's change names no reply
    CHECK ((actor = 'reply') = (reply_id IS NOT NULL))
) STRICT;
CREATE INDEX opt_out_changes_by_number ON opt_out_changes (number, change_id);
CREATE TRIGGER opt_out_changes_no_update BEFORE UPDATE ON opt_out_changes
BEGIN
    SELECT RAISE(ABORT, 'opt-out changes are append-only');
END;
CREATE TRIGGER opt_out_changes_no_delete BEFORE DELETE ON opt_out_changes
BEGIN
    SELECT RAISE(ABORT, 'opt-out changes are append-only');
END;
-- 3. Their events, in the same statement: reply.received (with the action linked, the
--    sender as `number` and the text as `body`: both redacted on output), and
--    recipient.opted_out / recipient.opted_in for each change.
CREATE TRIGGER replies_events AFTER INSERT ON replies
BEGIN
    INSERT INTO events (event_id, type, action_id, dispatch_id, device, history_sequence, at,
                        data_json)
    VALUES ('evt_' || lower(hex(randomblob(12))), 'reply.received', NEW.action_id, NULL,
            NEW.device, NULL, NEW.recorded_at,
            json_object('reply_id', NEW.reply_id, 'number', NEW.number, 'body', NEW.body,
                        'received_at', NEW.received_at,
                        'provider_object_id', NEW.provider_object_id,
                        'row_date_ms', NEW.row_date_ms, 'keyword', NEW.keyword));
END;
CREATE TRIGGER opt_out_changes_events AFTER INSERT ON opt_out_changes
BEGIN
    INSERT INTO events (event_id, type, action_id, dispatch_id, device, history_sequence, at,
                        data_json)
    SELECT 'evt_' || lower(hex(randomblob(12))),
           CASE NEW.change WHEN 'opt_out' THEN 'recipient.opted_out'
                ELSE 'recipient.opted_in' END,
           r.action_id, NULL, r.device, NULL, NEW.at,
           json_object('change_id', NEW.change_id, 'number', NEW.number,
                       'actor', NEW.actor, 'reason', NEW.reason, 'reply_id', NEW.reply_id)
    FROM (SELECT 1) AS one LEFT JOIN replies AS r ON r.reply_id = NEW.reply_id;
END;
