"""Records read from stored data by the fast path are exactly what the cattrs converter
builds, and anything unusual is left to the converter, errors included."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from starebrain_actions.core.convert import (
    _SLOW,
    _fast_structure,
    _trusted_intent,
    converter,
    stored_intent,
    structure,
    to_jsonable,
)
from starebrain_actions.core.exceptions import CorruptRecord, InvalidInput
from starebrain_actions.core.model import (
    AcceptanceState,
    ActionRecord,
    DeliveryState,
    Event,
    HistoryEntry,
    ProviderKind,
    RetryPolicy,
    ReviewReason,
    SmsIntent,
)

AT = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

RECORDS: list[Any] = [
    ActionRecord(
        action_id="a-1", dispatch_id="d-1", attempt=1, device="127.0.0.1:5555", dispatched_at=AT
    ),
    ActionRecord(
        action_id="a-2",
        dispatch_id="d-2",
        attempt=2,
        device="usb:X",
        dispatched_at=AT,
        delivery=DeliveryState.CONFIRMED,
        acceptance=AcceptanceState.REJECTED,
        provider_object_id=812,
        provider_kind=ProviderKind.MMS,
        watermark_id=811,
        device_clock_ms=1_700_000_000_000,
        confirmed_at=AT + timedelta(seconds=1),
        rejected_at=AT + timedelta(seconds=2),
        evidence={"nested": {"list": [1, 2.5, None, True]}, "text": "é 漢字"},
        last_error="boom",
        review_reason=ReviewReason.MISMATCH,
        resolved_by="operator:ann",
        version=3,
    ),
    RetryPolicy(),
    RetryPolicy(
        maximum_attempts=5,
        initial_interval=timedelta(seconds=2.5),
        maximum_interval=None,
        schedule_to_close=timedelta(hours=1),
    ),
    SmsIntent(recipient="+12025550143", body="hi\nthere", region="US", extras={"sub_id": "2"}),
    HistoryEntry(
        sequence=7,
        action_id="a-1",
        dispatch_id="d-1",
        event=Event.CONFIRM,
        at=AT,
        actor="reconciler",
        from_delivery=DeliveryState.PENDING,
        to_delivery=DeliveryState.CONFIRMED,
        from_acceptance=None,
        to_acceptance=AcceptanceState.PENDING,
        evidence={"provider_object_id": 812},
    ),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda record: type(record).__name__)
def test_the_fast_path_reads_stored_records_as_the_converter_does(record: Any) -> None:
    """A record's stored form is read by the fast path, into a record equal to the
    converter's, field types included."""
    cls = type(record)
    data = converter.unstructure(record)
    fast = _fast_structure(copy.deepcopy(data), cls)
    assert fast is not _SLOW
    expected = converter.structure(copy.deepcopy(data), cls)
    assert expected == fast == record
    for name in attrs_names(cls):
        assert type(getattr(expected, name)) is type(getattr(fast, name))


def attrs_names(cls: type) -> list[str]:
    import attrs

    return [field.name for field in attrs.fields(cls)]


def test_a_stored_time_is_read_as_the_converter_reads_it() -> None:
    """A bare time (an action's ``created_at``) takes the fast path too."""
    text = "2026-11-29T12:00:00.000000Z"
    assert converter.structure(text, datetime) == _fast_structure(text, datetime)


def stored(record: Any) -> dict[str, Any]:
    return dict(converter.unstructure(record))


@pytest.mark.parametrize(
    ("cls", "change"),
    [
        (ActionRecord, {"attempt": "2"}),  # the converter makes it an int
        (ActionRecord, {"version": 1.0}),
        (ActionRecord, {"device": 5555}),  # the converter makes it a str
        (RetryPolicy, {"backoff_coefficient": 3}),  # the converter makes it a float
        (SmsIntent, {"extras": {"sub_id": 2}}),
    ],
)
def test_values_the_converter_would_convert_are_left_to_it(
    cls: type, change: dict[str, Any]
) -> None:
    """A value not already in its final form is not read by the fast path; ``structure``
    still returns what the converter makes of it."""
    record = next(record for record in RECORDS if type(record) is cls)
    data = {**stored(record), **change}
    assert _fast_structure(copy.deepcopy(data), cls) is _SLOW
    assert converter.structure(copy.deepcopy(data), cls) == structure(data, cls, "it")


@pytest.mark.parametrize(
    ("cls", "change"),
    [
        (ActionRecord, {"delivery": "SENT"}),
        (ActionRecord, {"surprise": 1}),  # unknown keys are refused
        (ActionRecord, {"dispatched_at": "yesterday"}),
        (ActionRecord, {"dispatched_at": "2026-11-29T12:00:00"}),  # no timezone
        (ActionRecord, {"evidence": ["not", "a", "mapping"]}),
        (RetryPolicy, {"maximum_attempts": 0}),  # the record's own validator refuses it
        (SmsIntent, {"body": ""}),
        (SmsIntent, {"recipient": "+1 555"}),
    ],
)
def test_corrupt_data_raises_the_converters_error(cls: type, change: dict[str, Any]) -> None:
    """Data the converter refuses is refused with the converter's own message."""
    record = next(record for record in RECORDS if type(record) is cls)
    data = {**stored(record), **change}
    assert _fast_structure(copy.deepcopy(data), cls) is _SLOW
    with pytest.raises(Exception) as expected:  # whatever the converter raises
        converter.structure(copy.deepcopy(data), cls)
    with pytest.raises(CorruptRecord) as raised:
        structure(data, cls, "the thing")
    assert raised.value.__cause__ is not None
    assert type(expected.value) is type(raised.value.__cause__)
    assert str(raised.value).startswith("the thing cannot be read: ")


def test_a_missing_required_field_is_the_converters_error() -> None:
    """A row without a required column is refused as the converter refuses it."""
    data = stored(RECORDS[0])
    del data["dispatch_id"]
    with pytest.raises(CorruptRecord, match="dispatch_id"):
        structure(data, ActionRecord, "attempt")


def stored_intent_data(intent: SmsIntent) -> dict[str, Any]:
    return dict(converter.unstructure(intent))


@pytest.mark.parametrize(
    "intent",
    [
        SmsIntent(recipient="+12025550143", body="Your code is 4821"),
        SmsIntent(recipient="(202) 555-0143", body="line\r\nbreak é", region="US"),
        SmsIntent(recipient="+447911123456", body="x", extras={"template_id": "t1", "sub_id": "2"}),
    ],
)
def test_an_intent_its_fingerprint_vouches_for_is_read_without_parsing(intent: SmsIntent) -> None:
    """A stored intent whose fingerprint matches its stored recipient is read as it was
    created, equal to what the full read makes."""
    data = stored_intent_data(intent)
    trusted = _trusted_intent(copy.deepcopy(data), intent.fingerprint)
    assert trusted is not None
    assert stored_intent(copy.deepcopy(data), "it") == trusted == intent
    assert intent.fingerprint == trusted.fingerprint


def test_a_stored_recipient_that_is_not_canonical_is_parsed_again() -> None:
    """A recipient stored as typed (a ledger older than canonical recipients) is not vouched
    for by the fingerprint: it is read, and canonicalised, as before."""
    intent = SmsIntent(recipient="+12025550143", body="hi")
    data = {**stored_intent_data(intent), "recipient": "+1 202 555 0143"}
    assert _trusted_intent(copy.deepcopy(data), intent.fingerprint) is None
    read = stored_intent(data, "it", fingerprint=intent.fingerprint)
    assert "+12025550143" == read.recipient


@pytest.mark.parametrize(
    "change",
    [
        {"body": "another body"},  # the fingerprint no longer matches
        {"extras": {"campaign": 5}},
        {"surprise": "key"},
        {"region": 1},
    ],
)
def test_anything_the_fingerprint_does_not_vouch_for_is_read_as_before(
    change: dict[str, Any],
) -> None:
    """Stored data the fingerprint does not vouch for takes the full read (and its errors)."""
    intent = SmsIntent(recipient="+12025550143", body="hi")
    data = {**stored_intent_data(intent), **change}
    assert _trusted_intent(copy.deepcopy(data), intent.fingerprint) is None


def test_a_vouched_for_intent_still_has_its_body_and_extras_checked() -> None:
    """A stored intent whose digest matches but whose extras are no longer allowed is refused
    as the full read refuses it."""
    import hashlib
    import json

    data = {"recipient": "+12025550143", "body": "hi", "region": None, "extras": {"x": "1"}}
    canonical = {"kind": "sms", "recipient": data["recipient"], "body": "hi", "extras": {"x": "1"}}
    text = json.dumps(canonical, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    fingerprint = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    assert _trusted_intent(copy.deepcopy(data), fingerprint) is None
    with pytest.raises(CorruptRecord):
        stored_intent(data, "it", fingerprint=fingerprint)


# --------------------------------------------------------------------------- writing

_SECONDS = st.one_of(
    st.integers(min_value=0, max_value=10**6),
    st.floats(min_value=0, max_value=1e6, allow_nan=False),
).map(lambda seconds: timedelta(seconds=seconds))
_TIMES = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)


def _valid_or_none(cls: type, fields: dict[str, Any]) -> Any:
    """``cls(**fields)``, or None when its validators refuse them."""
    try:
        return cls(**fields)
    except InvalidInput:
        return None


@settings(max_examples=200, deadline=None)
@given(
    st.builds(
        RetryPolicy,
        maximum_attempts=st.integers(min_value=1, max_value=50),
        initial_interval=_SECONDS,
        backoff_coefficient=st.one_of(st.just(1), st.floats(min_value=1, max_value=10)),
        maximum_interval=st.one_of(st.none(), _SECONDS),
        jitter=st.one_of(st.just(0), st.floats(min_value=0, max_value=1)),
        schedule_to_close=st.one_of(st.none(), _SECONDS),
        grace_window=_SECONDS,
        settle_after=_SECONDS,
        framework_settle_after=_SECONDS,
    ),
    st.builds(
        lambda **fields: _valid_or_none(SmsIntent, fields),
        recipient=st.sampled_from(["+12025550143", "+33612345678", "12345"]),
        body=st.text(alphabet=st.characters(blacklist_characters="\x00"), max_size=20),
        region=st.sampled_from([None, "US", "GB"]),
        extras=st.dictionaries(
            st.sampled_from(["campaign", "sub_id", "template_id"]), st.text(max_size=5)
        ),
        not_after=st.one_of(st.none(), _TIMES),
        not_before=st.one_of(st.none(), _TIMES),
    ).filter(lambda intent: intent is not None),
)
def test_what_a_send_stores_is_written_as_the_converter_writes_it(
    policy: RetryPolicy, intent: SmsIntent
) -> None:
    """An action's policy and intent are made JSON-able without the converter (a send need
    not import cattrs), exactly as the converter makes them, types included."""
    for value in (policy, intent):
        fast, slow = to_jsonable(value), converter.unstructure(value)
        assert slow == fast
        assert [(key, type(item)) for key, item in slow.items()] == [
            (key, type(item)) for key, item in fast.items()
        ]
