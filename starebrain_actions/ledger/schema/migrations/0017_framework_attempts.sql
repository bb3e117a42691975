-- Version 17.
-- A phone's framework attempts (`service call isms`: their evidence says `send_path`
-- 'framework'), by device and time: what `--send-path auto` judges the framework path by
-- (phone/send_path.py: the last one that came to an end proves or doubts it), read before
-- every send as one index range (`Ledger.framework_attempts`), however many sends through the
-- messaging app came after them. Without it the search was the phone's latest 200 attempts
-- of any path, so 200 sends through the app forgot a doubt, and the path could open again
-- on no proof at all.
CREATE INDEX attempts_framework ON attempts (device, dispatched_at)
    WHERE json_extract(evidence_json, '$.send_path') = 'framework';
