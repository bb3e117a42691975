-- Version 5.
-- What a sender and a reconcile pass ask of one device, as index ranges: the queries stay as
-- fast with 100,000 attempts on the device as with none.

-- Attempts started on a device since a time: the send rate (`dispatches_since`) and the
-- check that no attempt started while a pass read the phone (`apply_pass`).
CREATE INDEX attempts_by_device_time ON attempts (device, dispatched_at);

-- A device's attempts in one state: unresolved and unverified ones (`recent_attempts`,
-- `in_flight`), failed ones (the rows they claim).
CREATE INDEX attempts_by_device_state ON attempts (device, delivery, acceptance);

-- A device's attempts by confirmation time: those confirmed lately (`recent_attempts`), how
-- soon the last ones were confirmed (`confirmation_delays`).
CREATE INDEX attempts_by_device_confirmed ON attempts (device, confirmed_at)
    WHERE confirmed_at IS NOT NULL;

-- A device's highest watermark before a time (`device_floor`).
CREATE INDEX attempts_by_device_watermark ON attempts (device, watermark_id)
    WHERE watermark_id IS NOT NULL;
