"""One cattrs converter for SQLite rows, JSON and CLI output."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import cattrs

from starebrain_actions._model import (
    Action,
    ActionRecord,
    HistoryEntry,
    RetryPolicy,
    SmsIntent,
    _frozen_mapping,
)
from starebrain_actions.exceptions import CorruptRecord

T = TypeVar("T")


def format_time(value: datetime) -> str:
    """Fixed-width UTC text (``2026-11-29T12:00:00.000000Z``): SQL text order is time order."""
    if value.tzinfo is not UTC:
        value = value.astimezone(UTC)
    return value.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def parse_time(value: str) -> datetime:
    """Read a time written by ``format_time`` (or any ISO 8601 text with an offset).

    Raises:
        ValueError: the text is not a time or has no timezone.
    """
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise ValueError(f"stored time {value!r} has no timezone")
    return parsed.astimezone(UTC)


def _make_converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True)
    converter.register_unstructure_hook(datetime, format_time)
    converter.register_structure_hook(datetime, lambda value, _t: parse_time(value))
    converter.register_unstructure_hook(timedelta, lambda value: value.total_seconds())
    converter.register_structure_hook(timedelta, lambda value, _t: timedelta(seconds=value))
    return converter


#: The converter used for rows, JSON and CLI output.
converter = _make_converter()


def to_jsonable(value: Any) -> Any:
    """Records (and lists of them) as plain JSON-able data."""
    return converter.unstructure(value)


def dumps(value: Any) -> str:
    """Compact JSON of any record or JSON-able value."""
    return json.dumps(to_jsonable(value), ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def structure(data: Any, cls: type[T], what: str) -> T:
    """Build a record from stored data, or raise ``CorruptRecord`` naming what is wrong."""
    try:
        return converter.structure(data, cls)
    except Exception as exc:  # cattrs raises ClassValidationError and friends
        detail = "; ".join(str(part) for part in getattr(exc, "exceptions", None) or [exc])
        raise CorruptRecord(f"{what} cannot be read: {detail}") from exc


#: The columns ``record_from_row`` reads, in ``ActionRecord``'s order.
ATTEMPT_COLUMNS = (
    "action_id, dispatch_id, attempt, device, delivery, acceptance, provider_object_id, "
    "provider_kind, watermark_id, device_clock_ms, dispatched_at, confirmed_at, failed_at, "
    "accepted_at, rejected_at, evidence_json, last_error, review_reason, resolved_by, version"
)


def _with_evidence(row: Mapping[str, Any], what: str) -> dict[str, Any]:
    """The row as a dict whose ``evidence_json`` column is parsed into ``evidence``."""
    data = dict(row)
    try:
        data["evidence"] = json.loads(data.pop("evidence_json"))
    except (KeyError, ValueError) as exc:
        raise CorruptRecord(f"{what}: evidence is not JSON") from exc
    return data


def record_from_row(row: Mapping[str, Any]) -> ActionRecord:
    """An ``ActionRecord`` from a row of ``attempts`` selected with ``ATTEMPT_COLUMNS``."""
    what = f"attempt {row['dispatch_id']!r}"
    data = {key: value for key, value in _with_evidence(row, what).items() if value is not None}
    return structure(data, ActionRecord, what)


def action_from_row(row: Mapping[str, Any]) -> Action:
    """An ``Action`` from a row of ``actions``."""
    what = f"action {row['action_id']!r}"
    try:
        intent = json.loads(row["intent_json"])
        policy = json.loads(row["policy_json"])
    except ValueError as exc:
        raise CorruptRecord(f"{what}: intent or policy is not JSON") from exc
    return Action(
        action_id=row["action_id"],
        fingerprint=row["fingerprint"],
        intent=_stored_intent(intent, what + " intent"),
        policy=structure(policy, RetryPolicy, what + " policy"),
        created_at=structure(row["created_at"], datetime, what + " created_at"),
    )


def _stored_intent(data: Any, what: str) -> SmsIntent:
    """The intent an action was created with. A recipient a later, stricter rule refuses (a
    ledger written before recipients were checked) is kept as stored instead of making the
    whole ledger unreadable: such an intent can never be sent again (a new send validates
    what it is given) and never matches a row (the matcher refuses the recipient too)."""
    try:
        return structure(data, SmsIntent, what)
    except CorruptRecord:
        if not isinstance(data, Mapping) or not isinstance(data.get("recipient"), str):
            raise
        body, region = data.get("body"), data.get("region")
        extras = data.get("extras") or {}
        if not isinstance(body, str) or not isinstance(extras, Mapping):
            raise
        try:
            structure({**data, "recipient": "+12025550100"}, SmsIntent, what)
        except CorruptRecord:
            raise  # something else than the recipient is wrong
        intent = SmsIntent.__new__(SmsIntent)
        for name, value in (
            ("recipient", data["recipient"]),
            ("body", body),
            ("region", region if isinstance(region, str) else None),
            ("extras", _frozen_mapping(extras)),
        ):
            object.__setattr__(intent, name, value)
        return intent


def history_from_row(row: Mapping[str, Any]) -> HistoryEntry:
    """A ``HistoryEntry`` from a row of ``history``."""
    what = f"history row {row['sequence']}"
    return structure(_with_evidence(row, what), HistoryEntry, what)
