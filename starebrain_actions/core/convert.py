"""One cattrs converter for SQLite rows, JSON and CLI output.

The converter is made on first use (``converter`` is a lazy module attribute): a command
that only reads and prints text never imports cattrs. Reading a record from a row takes a
fast path when every stored value already has the exact form the converter would turn it
into (see ``_fast_structure``); anything else goes through the converter, errors included.
"""

from __future__ import annotations

import enum
import hashlib
import json
import types
import typing
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, TypeVar

import attrs

from starebrain_actions.core.exceptions import CorruptRecord, InvalidInput
from starebrain_actions.core.model import (
    Action,
    ActionRecord,
    HistoryEntry,
    QueueClaim,
    RetryGrant,
    RetryPolicy,
    SmsIntent,
    body_validator,
    canonical_body,
    extras_validator,
    frozen_mapping,
)
from starebrain_actions.core.model import (
    format_time as format_time,
)

if TYPE_CHECKING:
    import cattrs

    #: The converter used for rows, JSON and CLI output (made on first use).
    converter: cattrs.Converter

T = TypeVar("T")


def age(delta: timedelta) -> str:
    """A short human age: ``42s``, ``7m``, ``5h``, ``3d``."""
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 2 * 3600:
        return f"{seconds // 60}m"
    if seconds < 2 * 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


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
    import cattrs
    from cattrs.gen import make_dict_unstructure_fn, override

    converter = cattrs.Converter(forbid_extra_keys=True)
    converter.register_unstructure_hook(datetime, format_time)
    converter.register_structure_hook(datetime, lambda value, _t: parse_time(value))
    converter.register_unstructure_hook(timedelta, lambda value: value.total_seconds())
    converter.register_structure_hook(timedelta, lambda value, _t: timedelta(seconds=value))
    # an intent without a deadline or a schedule is stored as it was before they existed
    converter.register_unstructure_hook(
        SmsIntent,
        make_dict_unstructure_fn(
            SmsIntent,
            converter,
            not_after=override(omit_if_default=True),
            not_before=override(omit_if_default=True),
        ),
    )
    return converter


def _converter() -> cattrs.Converter:
    """The converter, made (and cattrs imported) on first use."""
    made = globals().get("converter")
    if made is None:
        made = globals()["converter"] = _make_converter()
    return made


def __getattr__(name: str) -> Any:
    """``converter``, made on first use (PEP 562)."""
    if name == "converter":
        return _converter()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def to_jsonable(value: Any) -> Any:
    """Records (and lists of them) as plain JSON-able data."""
    fast = _FAST_UNSTRUCTURE.get(type(value))
    if fast is not None:
        return fast(value)
    return _converter().unstructure(value)


def _intent_data(intent: SmsIntent) -> dict[str, Any]:
    """What the converter makes of an intent (its deadline and schedule left out when
    unset), without making the converter: what a ``send`` stores needs no cattrs."""
    data: dict[str, Any] = {
        "recipient": intent.recipient,
        "body": intent.body,
        "region": intent.region,
        "extras": dict(intent.extras),
    }
    if intent.not_after is not None:
        data["not_after"] = format_time(intent.not_after)
    if intent.not_before is not None:
        data["not_before"] = format_time(intent.not_before)
    return data


def _policy_data(policy: RetryPolicy) -> dict[str, Any]:
    """What the converter makes of a retry policy: durations in seconds, the rest as it is."""
    return {
        name: value.total_seconds() if type(value) is timedelta else value
        for name, value in zip(_POLICY_FIELDS, attrs.astuple(policy, recurse=False), strict=True)
    }


_POLICY_FIELDS: Final = tuple(field.name for field in attrs.fields(RetryPolicy))

#: Records ``to_jsonable`` unstructures itself (tests/core/test_convert_fast_path.py proves
#: each equal to the converter's).
_FAST_UNSTRUCTURE: Final[dict[type, Callable[[Any], Any]]] = {
    SmsIntent: _intent_data,
    RetryPolicy: _policy_data,
}


def dumps(value: Any) -> str:
    """Compact JSON of any record or JSON-able value."""
    return json.dumps(to_jsonable(value), ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def structure(data: Any, cls: type[T], what: str) -> T:
    """Build a record from stored data, or raise ``CorruptRecord`` naming what is wrong."""
    fast = _fast_structure(data, cls)
    if fast is not _SLOW:
        return fast  # type: ignore[no-any-return]
    try:
        return _converter().structure(data, cls)
    except Exception as exc:  # cattrs raises ClassValidationError and friends
        detail = "; ".join(str(part) for part in getattr(exc, "exceptions", None) or [exc])
        raise CorruptRecord(f"{what} cannot be read: {detail}") from exc


# --------------------------------------------------------------------------- fast reads


class _Slow(Exception):
    """A stored value the fast path does not read: the converter reads it."""


#: What ``_fast_structure`` returns when the converter must do the work.
_SLOW: Any = object()


def _slow() -> Any:
    raise _Slow


def _exactly(kind: type) -> Callable[[Any], Any]:
    """A value that is already exactly ``kind`` (the converter would call ``kind(value)``:
    the same object for such a value)."""
    return lambda value: value if type(value) is kind else _slow()


def _read_time(value: Any) -> datetime:
    return parse_time(value) if type(value) is str else _slow()


def _read_seconds(value: Any) -> timedelta:
    return timedelta(seconds=value) if type(value) in (int, float) else _slow()


def _string_mapping(values: Callable[[Any], Any] | None) -> Callable[[Any], Any]:
    """A JSON object with string keys as a new dict, as the converter makes it for
    ``Mapping[str, Any]`` (``values`` None) or ``Mapping[str, X]``."""

    def read(value: Any) -> dict[str, Any]:
        if type(value) is not dict or not all(type(key) is str for key in value):
            return _slow()  # type: ignore[no-any-return]
        if values is None:
            return dict(value)
        return {key: values(item) for key, item in value.items()}

    return read


def _fast_reader(kind: Any) -> Callable[[Any], Any] | None:
    """How the fast path reads a value stored for type ``kind``; None: it does not."""
    if kind in (str, int, float, bool):
        return _exactly(kind)
    if kind is datetime:
        return _read_time
    if kind is timedelta:
        return _read_seconds
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return kind  # as the converter does: the member with that value, or ValueError
    origin, arguments = typing.get_origin(kind), typing.get_args(kind)
    if (
        origin in (types.UnionType, typing.Union)
        and len(arguments) == 2
        and type(None) in arguments
    ):
        inner = _fast_reader(next(a for a in arguments if a is not type(None)))
        if inner is None:
            return None
        return lambda value: None if value is None else inner(value)
    if origin in (Mapping, dict) and arguments and arguments[0] is str:
        if arguments[1] is Any:
            return _string_mapping(None)
        values = _fast_reader(arguments[1])
        return None if values is None else _string_mapping(values)
    return None


#: Per record class: each init argument and its reader, or None (the converter only).
_PLANS: dict[type, dict[str, Callable[[Any], Any]] | None] = {}


def _plan(cls: type) -> dict[str, Callable[[Any], Any]] | None:
    if cls in _PLANS:
        return _PLANS[cls]
    plan: dict[str, Callable[[Any], Any]] | None = None
    # the converter reads a field under its name and passes it by its alias: only classes
    # where the two agree (no private fields) take the fast path
    if attrs.has(cls) and all(field.alias == field.name for field in attrs.fields(cls)):
        hints = typing.get_type_hints(cls)
        readers = {
            field.alias: _fast_reader(hints[field.name])
            for field in attrs.fields(cls)
            if field.init
        }
        if all(reader is not None for reader in readers.values()):
            plan = typing.cast("dict[str, Callable[[Any], Any]]", readers)
    else:
        reader = _fast_reader(cls)
        plan = None if reader is None else {"": reader}
    _PLANS[cls] = plan
    return plan


def _fast_structure(data: Any, cls: type) -> Any:
    """``data`` as a ``cls``, read without the converter when every value already has the
    form the converter gives it (so the result is the one the converter would build);
    ``_SLOW`` otherwise, and whenever anything is wrong (the converter then says what)."""
    plan = _plan(cls)
    if plan is None:
        return _SLOW
    try:
        if "" in plan:
            return plan[""](data)
        if type(data) is not dict or not data.keys() <= plan.keys():
            return _SLOW  # the converter forbids unknown keys
        return cls(**{key: plan[key](value) for key, value in data.items()})
    except Exception:
        return _SLOW


#: The columns ``record_from_row`` reads, in ``ActionRecord``'s order.
ATTEMPT_COLUMNS = (
    "action_id, dispatch_id, attempt, device, delivery, acceptance, provider_object_id, "
    "provider_kind, provider_row_date_ms, watermark_id, device_clock_ms, dispatched_at, "
    "confirmed_at, failed_at, accepted_at, rejected_at, evidence_json, last_error, "
    "review_reason, resolved_by, version"
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
        intent=stored_intent(intent, what + " intent", fingerprint=row["fingerprint"]),
        policy=structure(policy, RetryPolicy, what + " policy"),
        created_at=structure(row["created_at"], datetime, what + " created_at"),
        grant=stored_grant(row),
        planned_device=stored_planned_device(row),
        approval=row["approval"] if "approval" in row.keys() else None,  # noqa: SIM118
        gate=stored_gate(row),
        **stored_queue(row),
        **stored_binding(row),
    )


def stored_binding(row: Mapping[str, Any]) -> dict[str, Any]:
    """The policy an action is pinned to, its owner and when its expiry was recorded, from a
    row of ``actions``, as ``Action``'s keyword arguments: none for a ledger older than
    version 12 (no expiry before version 16)."""
    names = row.keys()
    if "gate_policy" not in names:
        return {}
    expired = row["expired_at"] if "expired_at" in names else None
    return {
        "gate_policy": row["gate_policy"],
        "owner": row["owner"],
        "expired_at": None if expired is None else parse_time(expired),
    }


def stored_gate(row: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The policy gate's latest verdict kept on a row of ``actions`` (None: none)."""
    text = row["gate_json"] if "gate_json" in row.keys() else None  # noqa: SIM118
    if text is None:
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise CorruptRecord(f"action {row['action_id']!r} gate verdict is not JSON") from exc
    return data if isinstance(data, dict) else None


def stored_queue(row: Mapping[str, Any]) -> dict[str, Any]:
    """An action's place in the queue, from a row of ``actions``, as ``Action``'s keyword
    arguments (``pool``, ``queue_after``, ``claim``): none for a ledger older than version
    11."""
    names = row.keys()
    if "pool" not in names:
        return {}
    what = f"action {row['action_id']!r}"
    after = row["queue_after"]
    claim = None
    if row["claimed_by"] is not None:
        claim = QueueClaim(
            worker=str(row["claimed_by"]),
            device=str(row["claimed_device"]),
            claimed_at=structure(row["claimed_at"], datetime, what + " claimed_at"),
        )
    return {
        "pool": row["pool"],
        "queue_after": None if after is None else structure(after, datetime, what + " queue"),
        "claim": claim,
    }


def stored_planned_device(row: Mapping[str, Any]) -> str | None:
    """The phone a sender named when it created the action (None: any, or a ledger older
    than version 8)."""
    value = row["planned_device"] if "planned_device" in row.keys() else None  # noqa: SIM118
    return str(value) if value is not None else None


def stored_grant(row: Mapping[str, Any]) -> RetryGrant | None:
    """The operator's latest grant of new attempts kept on a row of ``actions`` (None: none,
    or a ledger older than grants)."""
    text = row["grant_json"] if "grant_json" in row.keys() else None  # noqa: SIM118 (sqlite3.Row)
    if text is None:
        return None
    what = f"action {row['action_id']!r} grant"
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise CorruptRecord(f"{what} is not JSON") from exc
    return structure(data, RetryGrant, what)


def stored_intent(data: Any, what: str, *, fingerprint: str | None = None) -> SmsIntent:
    """The intent an action was created with. A recipient a later, stricter rule refuses (a
    ledger written before recipients were checked) is kept as stored instead of making the
    whole ledger unreadable: such an intent can never be sent again (a new send validates
    what it is given) and never matches a row (the matcher refuses the recipient too).

    ``fingerprint``, the action's: when it vouches for the stored recipient
    (``_trusted_intent``), the recipient is not parsed again."""
    if fingerprint is not None:
        trusted = _trusted_intent(data, fingerprint)
        if trusted is not None:
            return trusted
    try:
        return structure(data, SmsIntent, what)
    except CorruptRecord:
        if not isinstance(data, Mapping) or not isinstance(data.get("recipient"), str):
            raise
        body, region = data.get("body"), data.get("region")
        extras = data.get("extras") or {}
        if not isinstance(body, str) or not isinstance(extras, Mapping):
            raise
        # raises when something else than the recipient is wrong
        checked = structure({**data, "recipient": "+12025550100"}, SmsIntent, what)
        intent = SmsIntent.__new__(SmsIntent)
        for name, value in (
            ("recipient", data["recipient"]),
            ("body", body),
            ("region", region if isinstance(region, str) else None),
            ("extras", frozen_mapping(extras)),
            ("not_after", checked.not_after),
            ("not_before", checked.not_before),
        ):
            object.__setattr__(intent, name, value)
        return intent


def _trusted_intent(data: Any, fingerprint: str) -> SmsIntent | None:
    """The stored intent, its recipient taken as stored, when the action's fingerprint proves
    it canonical; None when it does not (the intent is then read as any other).

    The fingerprint is the sha256 of the intent's canonical form, whose recipient is
    ``canonical_recipient``'s. If the canonical form made with the stored recipient as it
    stands has that digest, the stored recipient is the canonical one: reading it again
    would give it back (and were it refused now, it would be kept as stored all the same).
    So the result is the intent the full read makes, without parsing the number again
    (phonenumbers, the costliest part of reading an action). The body and extras are
    checked as ever."""
    if type(data) is not dict or not data.keys() <= _INTENT_KEYS:
        return None
    recipient, body = data.get("recipient"), data.get("body")
    region, extras = data.get("region"), data.get("extras", {})
    if type(recipient) is not str or type(body) is not str or type(extras) is not dict:
        return None
    if region is not None and type(region) is not str:
        return None
    if not all(type(key) is str and type(value) is str for key, value in extras.items()):
        return None
    canonical = {
        "kind": "sms",
        "recipient": recipient,
        "body": canonical_body(body),
        "extras": dict(sorted(extras.items())),
    }
    times: dict[str, datetime | None] = {"not_after": None, "not_before": None}
    for name in times:
        stored = data.get(name)
        if stored is None:
            continue
        if type(stored) is not str:
            return None
        try:
            times[name] = parse_time(stored)
        except ValueError:
            return None
        canonical[name] = format_time(times[name])  # type: ignore[arg-type]
    text = json.dumps(canonical, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    try:
        digest = "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
        if digest != fingerprint:
            return None
        frozen_extras = frozen_mapping(extras)
        fields = attrs.fields(SmsIntent)
        body_validator(None, fields.body, body)
        extras_validator(None, fields.extras, frozen_extras)
    except (UnicodeEncodeError, InvalidInput):
        return None
    intent = SmsIntent.__new__(SmsIntent)
    for name, value in (
        ("recipient", recipient),
        ("body", body),
        ("region", region),
        ("extras", frozen_extras),
        *times.items(),
    ):
        object.__setattr__(intent, name, value)
    return intent


#: The keys of an intent as the ledger stores it.
_INTENT_KEYS: Final = frozenset(
    {"recipient", "body", "region", "extras", "not_after", "not_before"}
)


def history_from_row(row: Mapping[str, Any]) -> HistoryEntry:
    """A ``HistoryEntry`` from a row of ``history``."""
    what = f"history row {row['sequence']}"
    return structure(_with_evidence(row, what), HistoryEntry, what)
