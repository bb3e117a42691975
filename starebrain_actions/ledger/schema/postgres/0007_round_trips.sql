-- starebrain-actions ledger for PostgreSQL, migration 7: functions that let a receipt and a
-- batch of transitions cost at most two round trips (issue 26). No table, index or trigger
-- changes: these are three plain functions, called by the ledger's code
-- (starebrain_actions/ledger/pg.py); the invariants stay where they were (CHECKs, unique
-- indexes, triggers, compare-and-set on version), and every write still goes through them.
--
-- * starebrain_lock_and_read: a receipt's first round trip. Takes SESSION advisory locks on
--   the names given (the keys of pg.LOCK_KEY_SQL: the same locks the ledger's transactions
--   take with pg_advisory_xact_lock, so the two kinds exclude each other), then reads, after
--   the locks are held (each statement of a VOLATILE function takes a fresh snapshot in READ
--   COMMITTED), the action, its attempts, the phone's lease holder and, when asked (p_day not
--   NULL), the policy gate's counts. The locks outlive the statement: the receipt's last
--   statement releases them (starebrain_release) in the same transaction as its write.
-- * starebrain_release: takes the transaction-scoped locks of the same names, then gives up
--   the session ones: the names stay locked until the calling statement's transaction ends,
--   so no one reads the rows before the write that goes with it is committed.
-- * starebrain_apply: compare-and-set transitions of attempts, in order, as the ledger's
--   UPDATE ... WHERE delivery, acceptance and version are as expected; one result per
--   transition: "applied", ["stale", delivery, acceptance, version], "missing", or (only when
--   p_guarded: each UPDATE under a subtransaction of its own, so that a refused one leaves the
--   others) ["refused", sqlstate, message, table, constraint, column, detail]. Unguarded, a
--   refusal is raised and nothing of the call is written (the caller runs it again guarded).
--   A batch whose transitions write the same columns of different attempts (a reconcile
--   pass's acceptances, say) is one UPDATE ... FROM the batch's rows, unguarded; otherwise
--   (chained transitions of one attempt, mixed shapes, guarded) one UPDATE per transition.

CREATE FUNCTION starebrain_lock_and_read(
    p_locks text[], p_action_id text, p_device text, p_releasing text[],
    p_day text, p_hour text
) RETURNS json
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
DECLARE
    lock_name text;
    recipient text;
BEGIN
    FOREACH lock_name IN ARRAY p_locks LOOP
        PERFORM pg_advisory_lock(
            hashtextextended('starebrain:' || current_schema() || ':' || lock_name, 0));
    END LOOP;
    IF p_day IS NOT NULL THEN
        SELECT intent_json::jsonb ->> 'recipient' INTO recipient
        FROM actions WHERE action_id = p_action_id;
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
        'counts', CASE WHEN p_day IS NULL THEN NULL ELSE json_build_array(
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
               AND (actions.intent_json::jsonb ->> 'recipient') = recipient)
        ) END
    );
END;
$$;

CREATE FUNCTION starebrain_release(p_locks text[]) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
DECLARE
    lock_name text;
BEGIN
    FOREACH lock_name IN ARRAY p_locks LOOP
        PERFORM pg_advisory_xact_lock(
            hashtextextended('starebrain:' || current_schema() || ':' || lock_name, 0));
    END LOOP;
    FOREACH lock_name IN ARRAY p_locks LOOP
        PERFORM pg_advisory_unlock(
            hashtextextended('starebrain:' || current_schema() || ':' || lock_name, 0));
    END LOOP;
END;
$$;

CREATE FUNCTION starebrain_apply(p_transitions jsonb, p_guarded boolean) RETURNS jsonb
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
        ELSE
            SELECT format(
                'UPDATE attempts SET %s FROM jsonb_populate_record(NULL::attempts, $1) AS n'
                ' WHERE attempts.dispatch_id = $2 AND attempts.delivery = $3'
                ' AND attempts.acceptance = $4 AND attempts.version = $5',
                string_agg(format('%I = n.%I', name, name), ', '))
            INTO statement
            FROM jsonb_array_elements_text(item -> 'columns') AS name;
            IF p_guarded THEN
                BEGIN
                    EXECUTE statement USING item -> 'values', item ->> 'dispatch_id',
                        item ->> 'delivery', item ->> 'acceptance', (item ->> 'version')::bigint;
                    GET DIAGNOSTICS applied = ROW_COUNT;
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
                EXECUTE statement USING item -> 'values', item ->> 'dispatch_id',
                    item ->> 'delivery', item ->> 'acceptance', (item ->> 'version')::bigint;
                GET DIAGNOSTICS applied = ROW_COUNT;
            END IF;
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
