-- Version 4.
-- Reads that stay fast at a million actions. `list`, `review` and the nightly job page through
-- actions newest first (created_at DESC, action_id): this index serves each page as a range.
CREATE INDEX actions_by_created ON actions (created_at DESC, action_id);

-- The attempts that are not a clean success (unsettled, failed, rejected or flagged for
-- review). An action with attempts but none of these is SUCCEEDED with nothing to review, so
-- `review`, `list --status` and the nightly job look up only the actions listed here.
CREATE INDEX attempts_notable ON attempts (action_id)
    WHERE NOT (delivery = 'CONFIRMED' AND acceptance = 'ACCEPTED' AND review_reason IS NULL);
