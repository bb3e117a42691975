-- starebrain-actions ledger for PostgreSQL, migration 15: a transition costs the server no
-- planning (issue 37, item 6). No table, index, constraint or trigger changes.
--
-- starebrain_apply (migration 7) wrote each transition with a dynamic statement: its SET list,
-- the columns the transition changes, was built with format() and run with EXECUTE, which
-- PostgreSQL parses and plans anew on every call (about a third of the server's CPU per
-- lifecycle went to planning and parsing those UPDATEs). Now a transition is written by one
-- of two static UPDATEs, planned once per connection and kept: each names every column a
-- transition may change and writes the value given where the transition names the column,
-- and the column's own value elsewhere (`CASE WHEN columns ? 'x' THEN n.x ELSE attempts.x
-- END`). The result is the same row as the dynamic statement's.
--
-- * Triggers: only attempts_artifact_not_a_duplicate is limited to some columns (BEFORE UPDATE
--   OF provider_object_id, provider_kind, provider_row_date_ms). So the first static UPDATE
--   names none of those three, and is used when the transition changes none of them; the
--   second names all of them, and is used when the transition changes any of them: the
--   trigger fires exactly when it fired for the dynamic statement. Every other trigger of
--   attempts fires on every UPDATE, whatever its SET list.
-- * A transition naming a column outside these lists (an identity field, which the ledger
--   refuses before it sends anything, or a column of a later migration) is written by the
--   dynamic statement, as before: nothing is ever silently left unwritten.
-- * The batch path (one shape, different attempts: one UPDATE ... FROM the batch) is kept as
--   it was: it is planned once per batch, not per transition.
-- * The results, the guarded mode (each transition under a subtransaction of its own) and the
--   errors are unchanged.

CREATE OR REPLACE FUNCTION starebrain_apply_one(item jsonb) RETURNS bigint
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
DECLARE
    columns jsonb := item -> 'columns';
    statement text;
    applied bigint;
BEGIN
    IF columns <@ '[
          "delivery", "acceptance", "watermark_id", "device_clock_ms",
          "confirmed_at", "failed_at", "accepted_at", "rejected_at", "evidence_json",
          "last_error", "review_reason", "resolved_by", "version", "last_event",
          "last_event_at", "last_actor", "last_evidence_json"]'::jsonb THEN
        UPDATE attempts SET
            delivery = CASE WHEN columns ? 'delivery' THEN n.delivery ELSE attempts.delivery END,
            acceptance = CASE WHEN columns ? 'acceptance' THEN n.acceptance ELSE attempts.acceptance END,
            watermark_id = CASE WHEN columns ? 'watermark_id' THEN n.watermark_id ELSE attempts.watermark_id END,
            device_clock_ms = CASE WHEN columns ? 'device_clock_ms' THEN n.device_clock_ms ELSE attempts.device_clock_ms END,
            confirmed_at = CASE WHEN columns ? 'confirmed_at' THEN n.confirmed_at ELSE attempts.confirmed_at END,
            failed_at = CASE WHEN columns ? 'failed_at' THEN n.failed_at ELSE attempts.failed_at END,
            accepted_at = CASE WHEN columns ? 'accepted_at' THEN n.accepted_at ELSE attempts.accepted_at END,
            rejected_at = CASE WHEN columns ? 'rejected_at' THEN n.rejected_at ELSE attempts.rejected_at END,
            evidence_json = CASE WHEN columns ? 'evidence_json' THEN n.evidence_json ELSE attempts.evidence_json END,
            last_error = CASE WHEN columns ? 'last_error' THEN n.last_error ELSE attempts.last_error END,
            review_reason = CASE WHEN columns ? 'review_reason' THEN n.review_reason ELSE attempts.review_reason END,
            resolved_by = CASE WHEN columns ? 'resolved_by' THEN n.resolved_by ELSE attempts.resolved_by END,
            version = CASE WHEN columns ? 'version' THEN n.version ELSE attempts.version END,
            last_event = CASE WHEN columns ? 'last_event' THEN n.last_event ELSE attempts.last_event END,
            last_event_at = CASE WHEN columns ? 'last_event_at' THEN n.last_event_at ELSE attempts.last_event_at END,
            last_actor = CASE WHEN columns ? 'last_actor' THEN n.last_actor ELSE attempts.last_actor END,
            last_evidence_json = CASE WHEN columns ? 'last_evidence_json' THEN n.last_evidence_json ELSE attempts.last_evidence_json END
        FROM jsonb_populate_record(NULL::attempts, item -> 'values') AS n
        WHERE attempts.dispatch_id = item ->> 'dispatch_id'
          AND attempts.delivery = item ->> 'delivery'
          AND attempts.acceptance = item ->> 'acceptance'
          AND attempts.version = (item ->> 'version')::bigint;
        GET DIAGNOSTICS applied = ROW_COUNT;
    ELSIF columns <@ '[
          "delivery", "acceptance", "watermark_id", "device_clock_ms",
          "confirmed_at", "failed_at", "accepted_at", "rejected_at", "evidence_json",
          "last_error", "review_reason", "resolved_by", "version", "last_event",
          "last_event_at", "last_actor", "last_evidence_json", "provider_object_id",
          "provider_kind", "provider_row_date_ms"]'::jsonb THEN
        UPDATE attempts SET
            delivery = CASE WHEN columns ? 'delivery' THEN n.delivery ELSE attempts.delivery END,
            acceptance = CASE WHEN columns ? 'acceptance' THEN n.acceptance ELSE attempts.acceptance END,
            watermark_id = CASE WHEN columns ? 'watermark_id' THEN n.watermark_id ELSE attempts.watermark_id END,
            device_clock_ms = CASE WHEN columns ? 'device_clock_ms' THEN n.device_clock_ms ELSE attempts.device_clock_ms END,
            confirmed_at = CASE WHEN columns ? 'confirmed_at' THEN n.confirmed_at ELSE attempts.confirmed_at END,
            failed_at = CASE WHEN columns ? 'failed_at' THEN n.failed_at ELSE attempts.failed_at END,
            accepted_at = CASE WHEN columns ? 'accepted_at' THEN n.accepted_at ELSE attempts.accepted_at END,
            rejected_at = CASE WHEN columns ? 'rejected_at' THEN n.rejected_at ELSE attempts.rejected_at END,
            evidence_json = CASE WHEN columns ? 'evidence_json' THEN n.evidence_json ELSE attempts.evidence_json END,
            last_error = CASE WHEN columns ? 'last_error' THEN n.last_error ELSE attempts.last_error END,
            review_reason = CASE WHEN columns ? 'review_reason' THEN n.review_reason ELSE attempts.review_reason END,
            resolved_by = CASE WHEN columns ? 'resolved_by' THEN n.resolved_by ELSE attempts.resolved_by END,
            version = CASE WHEN columns ? 'version' THEN n.version ELSE attempts.version END,
            last_event = CASE WHEN columns ? 'last_event' THEN n.last_event ELSE attempts.last_event END,
            last_event_at = CASE WHEN columns ? 'last_event_at' THEN n.last_event_at ELSE attempts.last_event_at END,
            last_actor = CASE WHEN columns ? 'last_actor' THEN n.last_actor ELSE attempts.last_actor END,
            last_evidence_json = CASE WHEN columns ? 'last_evidence_json' THEN n.last_evidence_json ELSE attempts.last_evidence_json END,
            provider_object_id = CASE WHEN columns ? 'provider_object_id' THEN n.provider_object_id ELSE attempts.provider_object_id END,
            provider_kind = CASE WHEN columns ? 'provider_kind' THEN n.provider_kind ELSE attempts.provider_kind END,
            provider_row_date_ms = CASE WHEN columns ? 'provider_row_date_ms' THEN n.provider_row_date_ms ELSE attempts.provider_row_date_ms END
        FROM jsonb_populate_record(NULL::attempts, item -> 'values') AS n
        WHERE attempts.dispatch_id = item ->> 'dispatch_id'
          AND attempts.delivery = item ->> 'delivery'
          AND attempts.acceptance = item ->> 'acceptance'
          AND attempts.version = (item ->> 'version')::bigint;
        GET DIAGNOSTICS applied = ROW_COUNT;
    ELSE
        SELECT format(
            'UPDATE attempts SET %s FROM jsonb_populate_record(NULL::attempts, $1) AS n'
            ' WHERE attempts.dispatch_id = $2 AND attempts.delivery = $3'
            ' AND attempts.acceptance = $4 AND attempts.version = $5',
            string_agg(format('%I = n.%I', name, name), ', '))
        INTO statement
        FROM jsonb_array_elements_text(columns) AS name;
        EXECUTE statement USING item -> 'values', item ->> 'dispatch_id',
            item ->> 'delivery', item ->> 'acceptance', (item ->> 'version')::bigint;
        GET DIAGNOSTICS applied = ROW_COUNT;
    END IF;
    RETURN applied;
END;
$$;

CREATE OR REPLACE FUNCTION starebrain_apply(p_transitions jsonb, p_guarded boolean) RETURNS jsonb
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
DECLARE
    item jsonb;
    statement text;
    applied bigint;
    now_delivery text;
    now_acceptance text;
    now_version bigint;
    results jsonb := '[]'::jsonb;
    e_state text;
    e_message text;
    e_table text;
    e_constraint text;
    e_column text;
    e_detail text;
    position bigint := 0;
    done bigint[];
BEGIN
    IF NOT p_guarded AND jsonb_array_length(p_transitions) > 1 AND (
        SELECT count(DISTINCT e -> 'columns') = 1
            AND count(DISTINCT e ->> 'dispatch_id') = count(*)
        FROM jsonb_array_elements(p_transitions) AS e
    ) THEN
        -- one shape, different attempts: one UPDATE for the whole batch
        SELECT format(
            'WITH batch AS MATERIALIZED ('
            ' SELECT e.i, e.item, jsonb_populate_record(NULL::attempts, e.item -> ''values'') AS n'
            ' FROM jsonb_array_elements($1) WITH ORDINALITY AS e(item, i)),'
            ' written AS (UPDATE attempts SET %s FROM batch'
            ' WHERE attempts.dispatch_id = batch.item ->> ''dispatch_id'''
            ' AND attempts.delivery = batch.item ->> ''delivery'''
            ' AND attempts.acceptance = batch.item ->> ''acceptance'''
            ' AND attempts.version = (batch.item ->> ''version'')::bigint'
            ' RETURNING batch.i)'
            ' SELECT coalesce(array_agg(i), ''{}'') FROM written',
            string_agg(format('%I = (batch.n).%I', name, name), ', '))
        INTO statement
        FROM jsonb_array_elements_text(p_transitions -> 0 -> 'columns') AS name;
        EXECUTE statement INTO done USING p_transitions;
    END IF;
    FOR item IN SELECT value FROM jsonb_array_elements(p_transitions) LOOP
        position := position + 1;
        IF done IS NOT NULL THEN
            applied := CASE WHEN position = ANY (done) THEN 1 ELSE 0 END;
        ELSIF p_guarded THEN
            BEGIN
                applied := starebrain_apply_one(item);
            EXCEPTION WHEN integrity_constraint_violation OR not_null_violation
                OR foreign_key_violation OR unique_violation OR check_violation THEN
                GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE,
                    e_message = MESSAGE_TEXT, e_table = TABLE_NAME,
                    e_constraint = CONSTRAINT_NAME, e_column = COLUMN_NAME,
                    e_detail = PG_EXCEPTION_DETAIL;
                results := results || jsonb_build_array(jsonb_build_array(
                    'refused', e_state, e_message, e_table, e_constraint, e_column,
                    e_detail));
                CONTINUE;
            END;
        ELSE
            applied := starebrain_apply_one(item);
        END IF;
        IF applied = 1 THEN
            results := results || '["applied"]'::jsonb;
            CONTINUE;
        END IF;
        SELECT delivery, acceptance, version INTO now_delivery, now_acceptance, now_version
        FROM attempts WHERE dispatch_id = item ->> 'dispatch_id';
        IF NOT FOUND THEN
            results := results || '["missing"]'::jsonb;
        ELSE
            results := results || jsonb_build_array(
                jsonb_build_array('stale', now_delivery, now_acceptance, now_version));
        END IF;
    END LOOP;
    RETURN results;
END;
$$;

-- starebrain_lock_and_read (migration 11's): the policy gate's counts are read by a statement
-- of their own, run only when asked (p_day not NULL). They were a CASE in the one RETURN
-- expression, whose plan a plan for any p_day would have to carry: PostgreSQL judged that
-- generic plan dearer than one made for the call's own values, and so planned the whole
-- expression (its five subqueries) again on every receipt. Same reads, same locks, same order,
-- same result.
CREATE OR REPLACE FUNCTION starebrain_lock_and_read(
    p_locks text[], p_action_id text, p_device text, p_releasing text[],
    p_day text, p_hour text
) RETURNS json
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
DECLARE
    lock_name text;
    recipient text;
    counts json;
BEGIN
    FOREACH lock_name IN ARRAY p_locks LOOP
        PERFORM pg_advisory_lock(
            hashtextextended('starebrain:' || current_schema() || ':' || lock_name, 0));
    END LOOP;
    SELECT intent_json::jsonb ->> 'recipient' INTO recipient
    FROM actions WHERE action_id = p_action_id;
    IF p_day IS NOT NULL THEN
        counts := json_build_array(
            (SELECT count(DISTINCT attempts.action_id) FROM attempts
             JOIN actions ON actions.action_id = attempts.action_id
             WHERE attempts.dispatched_at >= p_day AND attempts.action_id <> p_action_id
               AND (actions.intent_json::jsonb ->> 'recipient') = recipient),
            (SELECT count(DISTINCT attempts.action_id) FROM attempts
             JOIN actions ON actions.action_id = attempts.action_id
             WHERE attempts.dispatched_at >= p_hour AND attempts.action_id <> p_action_id),
            (SELECT count(*) FROM attempts JOIN actions
             ON actions.action_id = attempts.action_id
             WHERE attempts.delivery = 'CONFIRMED'
               AND (actions.intent_json::jsonb ->> 'recipient') = recipient));
    END IF;
    RETURN json_build_object(
        'action', (SELECT row_to_json(a) FROM actions a WHERE a.action_id = p_action_id),
        'attempts', (SELECT coalesce(json_agg(row_to_json(t) ORDER BY t.attempt), '[]'::json)
                     FROM attempts t WHERE t.action_id = p_action_id),
        'lease', (SELECT json_build_array(l.dispatch_id, l.action_id, l.dispatched_at)
                  FROM attempts l
                  WHERE l.device = p_device AND l.delivery = 'PENDING'
                    AND coalesce(l.review_reason, '') <> ALL (p_releasing)
                  LIMIT 1),
        'counts', counts,
        'opt_out', (SELECT row_to_json(o) FROM (
                        SELECT change_id, number, change, at, actor, reason, reply_id
                        FROM opt_out_changes WHERE number = recipient
                        ORDER BY change_id DESC LIMIT 1) AS o)
    );
END;
$$;
