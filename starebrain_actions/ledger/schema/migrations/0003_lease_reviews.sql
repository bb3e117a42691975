-- Version 3.
-- An unresolved attempt in a review whose command is over no longer holds its device's lease:
-- besides UNVERIFIED and RCS_SUSPECTED, AMBIGUOUS (rows that match it but whose origin cannot
-- be told apart from the phone owner's) and STUCK (its message queued on the phone past the
-- grace window). Either is reached only once its send command has ended, so no send of it can
-- still be pressing keys on the phone; its own action still waits for a proof or a ruling.
DROP INDEX attempts_device_lease;
CREATE UNIQUE INDEX attempts_device_lease ON attempts (device)
    WHERE delivery = 'PENDING'
      AND coalesce(review_reason, '') NOT IN ('UNVERIFIED', 'RCS_SUSPECTED', 'AMBIGUOUS', 'STUCK');

-- An action's summary counts its duplicates by dispatch id.
CREATE INDEX duplicates_by_dispatch ON duplicates (dispatch_id);
