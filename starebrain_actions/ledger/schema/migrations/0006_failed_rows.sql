-- Version 6.
-- The phone's row a FAILED attempt names only in its evidence (delivery FAILED names no
-- artifact, yet the provider's FAILED row is still its own, never another attempt's proof),
-- by device, kind and id: a reconcile pass finds the rows claimed above its anchor as one
-- index range (`_claimed_ids`), never by reading the evidence of every failed attempt.
CREATE INDEX attempts_failed_rows ON attempts (
    device,
    coalesce(json_extract(evidence_json, '$.provider_kind'), 'sms'),
    json_extract(evidence_json, '$.provider_object_id')
) WHERE delivery = 'FAILED';
