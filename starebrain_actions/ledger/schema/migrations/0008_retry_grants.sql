-- Version 8.
-- An operator's grant of new attempts to an action whose budget was spent or whose retries
-- were refused (`starebrain retry`): the latest grant, as JSON (after_attempt, attempts,
-- granted_at, granted_by, reason). The attempts before it stay as evidence and no longer
-- count against the budget; every grant is also a `retry_granted` row of the history.
ALTER TABLE actions ADD COLUMN grant_json TEXT
    CHECK (grant_json IS NULL OR json_valid(grant_json));

-- The phone a sender named when it created the action (its key in `phones`): while the
-- action has no attempt, `starebrain resume` sends it on that phone only. NULL: any phone
-- (an action created without one, or before version 8).
ALTER TABLE actions ADD COLUMN planned_device TEXT
    CHECK (planned_device IS NULL OR length(planned_device) >= 1);
