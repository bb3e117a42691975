-- starebrain-actions ledger for PostgreSQL, version 5: the SQLite schema at version 10
-- (../migrations/0010_framework_codes.sql, which says why): the `ISms` transaction codes each
-- build proves in its own framework jar, by build fingerprint.
CREATE TABLE framework_codes (
    build               TEXT    PRIMARY KEY CHECK (length(build) >= 1),
    sdk                 BIGINT,
    send_text           BIGINT  CHECK (send_text IS NULL OR send_text >= 1),
    send_multipart      BIGINT  CHECK (send_multipart IS NULL OR send_multipart >= 1),
    reason              TEXT    CHECK (reason IS NULL OR length(reason) >= 1),
    read_at             TEXT    NOT NULL,
    retry_after         TEXT,
    CHECK ((send_text IS NULL) = (reason IS NOT NULL)),
    CHECK (send_multipart IS NULL OR send_text IS NOT NULL),
    CHECK (retry_after IS NULL OR reason IS NOT NULL)
);
