-- Version 10.
-- The `ISms` transaction codes each build of a phone proves in its own framework jar
-- (android_bridge._isms_codes), by build fingerprint (`ro.build.fingerprint`, which an update
-- changes): what `--send-path auto` reads once per build instead of pulling the jar before
-- every send. A row holds either the codes read (`send_text`, and `send_multipart` where the
-- stub defines it) or, in `reason`, why they could not be proven; `retry_after` is set only
-- for a reading that a transport failure cut short (a slow link, a timeout), which is tried
-- again after that time. A cache: deleting a row costs one more read of the phone's jar.
CREATE TABLE framework_codes (
    build               TEXT    PRIMARY KEY CHECK (length(build) >= 1),
    sdk                 INTEGER,
    send_text           INTEGER CHECK (send_text IS NULL OR send_text >= 1),
    send_multipart      INTEGER CHECK (send_multipart IS NULL OR send_multipart >= 1),
    reason              TEXT    CHECK (reason IS NULL OR length(reason) >= 1),
    read_at             TEXT    NOT NULL,
    retry_after         TEXT,
    CHECK ((send_text IS NULL) = (reason IS NOT NULL)),
    CHECK (send_multipart IS NULL OR send_text IS NOT NULL),
    CHECK (retry_after IS NULL OR reason IS NOT NULL)
) STRICT;
