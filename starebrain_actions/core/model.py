"""Frozen records and enums of the pure core. No I/O is imported here."""

from __future__ import annotations

import enum
import functools
import hashlib
import json
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final, NamedTuple

import attrs

from starebrain_actions.core.exceptions import FingerprintConflict, InvalidInput

# --------------------------------------------------------------------------- states


class DeliveryState(enum.StrEnum):
    """Did a read of the phone find the sent message?"""

    PENDING = "PENDING"  #: no proof either way
    CONFIRMED = "CONFIRMED"  #: a read of the phone found the artifact
    FAILED = "FAILED"  #: provably not sent


class AcceptanceState(enum.StrEnum):
    """Does the confirmed message match the intent (recipient and body)?"""

    PENDING = "PENDING"
    ACCEPTED = "ACCEPTED"
    REJECTED = "REJECTED"


class Status(enum.StrEnum):
    """The combined status, derived from the two axes; never stored."""

    #: action-level only: nothing of the action was sent and it waits for an attempt: it has
    #: none yet, or its latest one found the phone not ready (or not answering) and sent
    #: nothing (``decisions.waiting_for_phone``)
    PLANNED = "PLANNED"
    IN_FLIGHT = "IN_FLIGHT"
    UNKNOWN = "UNKNOWN"
    VERIFYING = "VERIFYING"
    SUCCEEDED = "SUCCEEDED"
    MISMATCH = "MISMATCH"
    FAILED = "FAILED"
    #: action-level: a DENY is final (a gate's rule or a person's denial) and nothing of it
    #: is under way or went out: it is never sent
    DENIED = "DENIED"
    #: action-level: its intent's deadline (``SmsIntent.not_after``) passed and nothing of it
    #: went out or is under way (every attempt provably not sent, none in a person's hands):
    #: final, it is never sent
    EXPIRED = "EXPIRED"


class ReviewReason(enum.StrEnum):
    """Why an attempt or action waits for a person; automatic retries stop there."""

    AMBIGUOUS = "AMBIGUOUS"  #: more than one provider row could be this attempt's
    DUPLICATE = "DUPLICATE"  #: the phone shows the message went out more than once
    MISMATCH = "MISMATCH"  #: something else than the intent went out
    BUDGET_EXHAUSTED = "BUDGET_EXHAUSTED"  #: no attempts or time left
    STUCK = "STUCK"  #: the phone keeps the message queued past the grace window
    #: sent (the script ran) but never seen on the phone past ``unverified_after``: RCS chat,
    #: a queued or failed send out of sight, a text the app dropped; the device lease is
    #: released, the action itself is never sent again without a proof or a ruling
    UNVERIFIED = "UNVERIFIED"
    #: as UNVERIFIED, and the messaging app that took the intent can send as RCS chat (which
    #: never reaches the SMS provider): turn chat features off on a sending phone
    RCS_SUSPECTED = "RCS_SUSPECTED"
    #: the confirmed row stopped showing the message as sent before it settled: it left the
    #: restricted view (the app marked it failed, or the owner deleted it: the shell cannot
    #: tell which), its id now holds another message, or the app marked it failed after its
    #: own send timeout (a late radio success is ignored there); or the row found may hide a
    #: send: the app marked a text of several segments failed (parts before the failed one
    #: may have been delivered) or an MMS failed, or an MMS row outlived its settle time (no
    #: time proves an MMS): whether it went out is unknown, and it is never resent without a
    #: ruling
    UNSETTLED = "UNSETTLED"


#: Reviews of an unresolved attempt that release its device's lease (its send command is over;
#: other actions may use the phone): the ledger's partial unique index ``attempts_device_lease``
#: (schema version 3) lists the same reasons.
LEASE_RELEASING_REVIEWS: frozenset[ReviewReason] = frozenset(
    {
        ReviewReason.UNVERIFIED,
        ReviewReason.RCS_SUSPECTED,
        ReviewReason.AMBIGUOUS,
        ReviewReason.STUCK,
    }
)


class Event(enum.StrEnum):
    """Everything that can happen to an attempt; each one writes a history row."""

    CREATED = "created"  #: the receipt: written before anything reaches the phone
    SUBMITTED = "submitted"  #: the dispatch evidence (watermark, device clock) was recorded
    CONFIRM = "confirm"
    FAIL = "fail"
    ACCEPT = "accept"
    REJECT = "reject"
    RESOLVE_SENT = "resolve_sent"  #: an operator says the message went out
    RESOLVE_NOT_SENT = "resolve_not_sent"  #: an operator says nothing went out
    FLAG_REVIEW = "flag_review"
    NOTE_ERROR = "note_error"  #: an error worth keeping that proves nothing
    #: an operator gave the action new attempts (``starebrain retry``): an event of the
    #: action, kept in the history of its latest attempt; no state changes
    RETRY_GRANTED = "retry_granted"
    #: the policy gate refused or held the action (its rule, its file's digest), or let it
    #: go after refusing it before; an event of the action
    POLICY_VERDICT = "policy_verdict"
    #: a person approved the action (``starebrain approve``); an event of the action
    APPROVED = "approved"
    #: a person denied the action (``starebrain deny``): it is never sent; an event of it
    DENIED = "denied"
    #: the policy that first judged the action was kept with it (its rules' digest): every
    #: later path judges it by those rules; an event of the action
    POLICY_PINNED = "policy_pinned"


#: Events of a whole action, not of one attempt: they change no state and have no transition.
ACTION_EVENTS: Final = frozenset(
    {
        Event.RETRY_GRANTED,
        Event.POLICY_VERDICT,
        Event.APPROVED,
        Event.DENIED,
        Event.POLICY_PINNED,
    }
)


class ProviderKind(enum.StrEnum):
    """Which Telephony provider table holds a message; each numbers its rows on its own.

    An MMS ``_id`` 12 and an SMS ``_id`` 12 are different messages, so a provider row is named
    by (device, kind, ``_id``). The values are the text stored in the ledger.
    """

    SMS = "sms"  #: ``content://sms``: what the phone writes for a plain text message
    MMS = "mms"  #: ``content://mms``: where a messaging app puts a message it converted to MMS


class ArtifactOutcome(enum.StrEnum):
    """What the provider row attributed to an attempt says about it."""

    SENT = "SENT"  #: type 2: confirms delivery
    FAILED = "FAILED"  #: type 5: the phone gave up: nothing went out
    QUEUED = "QUEUED"  #: type 4 or 6: still on its way


class RedispatchReason(enum.StrEnum):
    """Why ``should_redispatch`` said what it said."""

    FIRST_ATTEMPT = "FIRST_ATTEMPT"
    DELIVERY_FAILED = "DELIVERY_FAILED"
    ACCEPTANCE_REJECTED = "ACCEPTANCE_REJECTED"
    IN_FLIGHT = "IN_FLIGHT"
    VERIFYING = "VERIFYING"
    SUCCEEDED = "SUCCEEDED"
    NEEDS_REVIEW = "NEEDS_REVIEW"
    BUDGET_EXHAUSTED = "BUDGET_EXHAUSTED"
    DEADLINE_PASSED = "DEADLINE_PASSED"
    BACKOFF = "BACKOFF"
    #: the intent's deadline (``SmsIntent.not_after``) has passed: no attempt ever again (no
    #: ruling lifts it; a person who still wants the message sent creates a new action)
    EXPIRED = "EXPIRED"
    #: the intent's schedule (``SmsIntent.not_before``) has not come yet
    SCHEDULED = "SCHEDULED"
    #: the last two attempts were rejected in the same way: a systematic cause
    REPEATED_MISMATCH = "REPEATED_MISMATCH"


# --------------------------------------------------------------------------- validators


def _aware_utc(_instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """Reject naive datetimes: every time in the ledger is timezone-aware UTC."""
    if value is None:
        return
    if not isinstance(value, datetime):
        raise InvalidInput(f"{attribute.name} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInput(f"{attribute.name} must be timezone-aware (UTC); got naive {value}")


def _utc_or_none(value: object) -> object:
    """An aware datetime in UTC (anything else is left to the validator to refuse)."""
    if isinstance(value, datetime) and value.tzinfo is not None and value.utcoffset() is not None:
        return value.astimezone(UTC)
    return value


def require_aware(name: str, value: datetime) -> datetime:
    """Return ``value`` in UTC or raise ``InvalidInput`` if it is naive."""
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInput(f"{name} must be a timezone-aware datetime; got {value!r}")
    return value.astimezone(UTC)


def _non_negative(_i: object, attribute: attrs.Attribute[Any], value: timedelta | None) -> None:
    if value is not None and value < timedelta(0):
        raise InvalidInput(f"{attribute.name} must not be negative; got {value}")


def provider_row_name(kind: ProviderKind, provider_object_id: int) -> str:
    """A provider row as people read it: ``sms _id 812``, ``mms _id 12``."""
    return f"{kind.value} _id {provider_object_id}"


def check_provider_kind(_i: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """Reject anything but a ``ProviderKind`` (a bare string is not one)."""
    if not isinstance(value, ProviderKind):
        raise InvalidInput(
            f"{attribute.name} must be a ProviderKind ({', '.join(k.value for k in ProviderKind)});"
            f" got {value!r}"
        )


def _default_provider_kind(record: ActionRecord) -> ProviderKind | None:
    """A record that names a provider row without its table names an SMS row (as before MMS)."""
    return None if record.provider_object_id is None else ProviderKind.SMS


def _kind_matches_row(record: ActionRecord, _a: attrs.Attribute[Any], value: object) -> None:
    """``provider_kind`` is None exactly when ``provider_object_id`` is."""
    if value is not None:
        check_provider_kind(record, _a, value)
    if (value is None) != (record.provider_object_id is None):
        raise InvalidInput(
            f"provider_kind ({value!r}) and provider_object_id ({record.provider_object_id!r})"
            " must both be set or both be None"
        )


def _date_names_a_row(record: ActionRecord, _a: attrs.Attribute[Any], value: object) -> None:
    """``provider_row_date_ms`` is an int, and set only beside ``provider_object_id``."""
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidInput(f"provider_row_date_ms must be an int or None; got {value!r}")
    if record.provider_object_id is None:
        raise InvalidInput("provider_row_date_ms names a row only beside provider_object_id")


# --------------------------------------------------------------------------- intent

#: An action id: 1 to 200 printable ASCII characters, no spaces. Always ``fullmatch``: ``$``
#: after ``match`` would also accept a final newline, a second action for "the same" id.
_ACTION_ID: Final = re.compile(r"[\x21-\x7e]{1,200}")


def check_action_id(action_id: object) -> str:
    """``action_id`` if it is 1 to 200 printable ASCII characters without spaces, the whole
    of it (a final newline too is refused).

    Raises:
        InvalidInput: anything else.
    """
    if not isinstance(action_id, str) or not _ACTION_ID.fullmatch(action_id):
        raise InvalidInput(
            f"action id {action_id!r} must be 1 to 200 printable ASCII characters, no spaces"
        )
    return action_id


#: Extra intent fields that may enter the fingerprint. Anything else (tokens, keys,
#: passwords) is refused so credentials can never be hashed or stored with an intent.
ALLOWED_INTENT_EXTRAS: frozenset[str] = frozenset({"campaign", "sub_id", "template_id"})

_LINE_ENDINGS = re.compile(r"\r\n?")


def canonical_body(body: str) -> str:
    """The body as compared and fingerprinted: Unicode NFC, line endings as ``\\n``."""
    return unicodedata.normalize("NFC", _LINE_ENDINGS.sub("\n", body))


def canonical_recipient(recipient: str, region: str | None = None) -> str:
    """The recipient as fingerprinted, sent and matched: E.164 for a valid number (a national
    one read in ``region``), the ASCII digits of a short code.

    It is ``android_bridge.recipients.normalize_recipient``, the one rule the bridge's sender
    and matcher use too, so an intent never holds a recipient that either of them would refuse.

    Raises:
        InvalidInput: anything else (a typo, an unknown country code, letters, ``*#06#``…),
            with the reason.
    """
    if not isinstance(recipient, str) or not recipient.strip():
        raise InvalidInput("recipient must not be empty")
    normalized, reason = _normalized_recipient(recipient, region)
    if reason is not None:
        raise InvalidInput(f"recipient is not a phone number or short code: {reason}")
    return normalized


@functools.lru_cache(maxsize=4096)
def _normalized_recipient(recipient: str, region: str | None) -> tuple[str, str | None]:
    """``normalize_recipient``'s (value, reason), remembered: an intent's fingerprint reads
    its recipient again every time, and parsing a number is the dearest step of it."""
    # imported here: reading a stored intent the fingerprint vouches for needs no phonenumbers
    # (``core.convert._trusted_intent``), and the command line starts without it
    from android_bridge.recipients import normalize_recipient

    normalized = normalize_recipient(recipient, region)
    return normalized.value, normalized.reason


#: What a NUL character (U+0000) in text bound for the ledger becomes (U+FFFD, the replacement
#: character): PostgreSQL's ``text`` and ``jsonb`` cannot hold NUL, and both backends must
#: store the same. Phone output can hold it (a body, an error message); an intent's body
#: cannot (refused at creation).
NUL_STAND_IN: Final = "\ufffd"


def storable(value: Any) -> Any:
    """``value`` (text, or JSON-able evidence) with NUL replaced by :data:`NUL_STAND_IN` in
    every string, keys included (containers are copied; mappings become dicts)."""
    if isinstance(value, str):
        return value.replace("\x00", NUL_STAND_IN) if "\x00" in value else value
    if isinstance(value, Mapping):
        return {storable(key): storable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(storable(item) for item in value)
    return value


def _check_recipient(intent: SmsIntent, _a: attrs.Attribute[Any], value: str) -> None:
    canonical_recipient(value, intent.region)


def body_validator(_i: object, _a: attrs.Attribute[Any], value: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput("body must not be empty")
    if "\x00" in value:
        # no send path carries it (``am`` extras and ``input text`` are C strings), and a
        # PostgreSQL ledger cannot store it: refused alike on both backends
        raise InvalidInput(f"body holds a NUL character (U+0000) at {value.index(chr(0))}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate: no phone can send it
        raise InvalidInput(
            f"body is not valid Unicode (a lone surrogate at character {exc.start})"
        ) from None


def extras_validator(_i: object, _a: attrs.Attribute[Any], value: Mapping[str, str]) -> None:
    unknown = sorted(set(value) - ALLOWED_INTENT_EXTRAS)
    if unknown:
        raise InvalidInput(
            f"intent extras {unknown} are not allowlisted; allowed: {sorted(ALLOWED_INTENT_EXTRAS)}"
        )
    for key, item in value.items():
        if not isinstance(item, str):
            raise InvalidInput(f"intent extra {key!r} must be a string")


def frozen_mapping(value: Mapping[str, str] | None) -> Mapping[str, str]:
    return dict(sorted((value or {}).items()))


@attrs.frozen(kw_only=True)
class SmsIntent:
    """One SMS to send: what the fingerprint is computed over."""

    #: the number in its one canonical form, what is fingerprinted, sent and matched: E.164
    #: for a valid number, the digits of a short code (see ``canonical_recipient``); given
    #: as the caller wrote it (national numbers read in ``region``), normalised on creation
    recipient: str = attrs.field(validator=_check_recipient)
    #: the text to send, exactly
    body: str = attrs.field(validator=body_validator)
    #: ISO 3166 region used to read national numbers, e.g. "US"; None: international only
    region: str | None = None
    #: allowlisted extra fields (see ``ALLOWED_INTENT_EXTRAS``)
    extras: Mapping[str, str] = attrs.field(
        factory=dict, converter=frozen_mapping, validator=extras_validator
    )
    #: its deadline: no attempt starts at or after this time, on any path; once it passes
    #: with nothing sent the action is EXPIRED (None: no deadline). Part of the intent: a
    #: rerun naming another deadline is a changed intent
    not_after: datetime | None = attrs.field(
        default=None, converter=_utc_or_none, validator=_aware_utc
    )
    #: its schedule: no attempt starts before this time (None: at once). Part of the intent
    not_before: datetime | None = attrs.field(
        default=None, converter=_utc_or_none, validator=_aware_utc
    )

    def __attrs_post_init__(self) -> None:
        # validated above; with validators disabled (reading a legacy row) it is kept as is
        if not attrs.validators.get_disabled():
            object.__setattr__(self, "recipient", canonical_recipient(self.recipient, self.region))
            if (
                self.not_after is not None
                and self.not_before is not None
                and self.not_before >= self.not_after
            ):
                raise InvalidInput(
                    f"not_before ({format_time(self.not_before)}) must come before not_after"
                    f" ({format_time(self.not_after)}): the message could never be sent"
                )

    def canonical(self) -> dict[str, Any]:
        """The allowlisted, normalised form the fingerprint is computed over: the message
        (``message``), and its deadline and schedule where it has them."""
        canonical = self.message()
        for name in ("not_after", "not_before"):
            value = getattr(self, name)
            if value is not None:
                canonical[name] = format_time(value)
        return canonical

    def message(self) -> dict[str, Any]:
        """What is sent, and to whom, in canonical form, without the times: an intent's
        derived action id is computed over it (``derived_ids.derive_action_id``), so that a
        rerun naming its deadline as a duration finds the action it created."""
        return {
            "kind": "sms",
            "recipient": canonical_recipient(self.recipient, self.region),
            "body": canonical_body(self.body),
            "extras": dict(sorted(self.extras.items())),
        }

    @property
    def fingerprint(self) -> str:
        """``sha256:<hex>`` over the canonical JSON of the intent; stable across runs."""
        return _digest(self.canonical())

    @property
    def message_fingerprint(self) -> str:
        """``sha256:<hex>`` over ``message()``: the fingerprint of an intent without a
        deadline or a schedule is this one."""
        return _digest(self.message())

    def expired(self, now: datetime) -> bool:
        """Has its deadline passed (no attempt may start)?"""
        return self.not_after is not None and now >= self.not_after

    def scheduled_after(self, now: datetime) -> datetime | None:
        """Its schedule's time while it has not come (None: it may be sent now)."""
        return self.not_before if self.not_before is not None and now < self.not_before else None


def intent_conflict(stored: Action, intent: SmsIntent) -> FingerprintConflict:
    """The error of creating ``intent`` under the id ``stored`` holds with another intent;
    when only the deadline or the schedule differ, it says so, with both."""
    detail = ""
    if stored.intent.message_fingerprint == intent.message_fingerprint:
        detail = (
            f" (the same message; its deadline and schedule were {_times_text(stored.intent)},"
            f" these are {_times_text(intent)})"
        )
    return FingerprintConflict(stored.action_id, stored.fingerprint, intent.fingerprint, detail)


def _times_text(intent: SmsIntent) -> str:
    after = format_time(intent.not_after) if intent.not_after else "none"
    before = format_time(intent.not_before) if intent.not_before else "none"
    return f"not after {after}, not before {before}"


def _digest(canonical: Mapping[str, Any]) -> str:
    text = json.dumps(canonical, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def format_time(value: datetime) -> str:
    """Fixed-width UTC text (``2026-11-29T12:00:00.000000Z``): SQL text order is time order."""
    if value.tzinfo is not UTC:
        value = value.astimezone(UTC)
    return value.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def _positive_duration(_i: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise InvalidInput(f"{attribute.name} must be a duration above zero; got {value!r}")


@attrs.frozen(kw_only=True)
class IntentTimes:
    """A deadline or a schedule given as a duration ("within 10 minutes"), counted from the
    action's creation: this call's time for a new action, the stored action's creation for
    one that exists, so that the same command rerun later names the same times (and so the
    same intent)."""

    #: the deadline, this long after the creation
    not_after: timedelta | None = attrs.field(default=None, validator=_positive_duration)
    #: the schedule, this long after the creation
    not_before: timedelta | None = attrs.field(default=None, validator=_positive_duration)

    def applied(self, intent: SmsIntent, start: datetime) -> SmsIntent:
        """``intent`` with these times counted from ``start``.

        Raises:
            InvalidInput: the intent names that time already (given twice).
        """
        start = require_aware("start", start)
        for name in ("not_after", "not_before"):
            if getattr(self, name) is not None and getattr(intent, name) is not None:
                raise InvalidInput(f"{name} is given twice: as a time and as a duration")
        return attrs.evolve(
            intent,
            not_after=start + self.not_after if self.not_after else intent.not_after,
            not_before=start + self.not_before if self.not_before else intent.not_before,
        )

    def cleared(self, intent: SmsIntent) -> SmsIntent:
        """``intent`` without the times these durations set."""
        return attrs.evolve(
            intent,
            not_after=None if self.not_after else intent.not_after,
            not_before=None if self.not_before else intent.not_before,
        )


#: A time given to the product: an ISO 8601 time with its zone, or a duration from now.
TimeSpec = datetime | timedelta

_DURATION: Final = re.compile(r"(?:(\d+(?:\.\d+)?)([smhd]))+")
_DURATION_PART: Final = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT_SECONDS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def read_time_spec(text: str, name: str) -> TimeSpec:
    """``text`` as a ``TimeSpec``: a duration (``90s``, ``10m``, ``2h``, ``1d``, or parts
    such as ``1h30m``) or an ISO 8601 time with a zone (``2026-12-08T09:00:00+01:00``,
    ``…Z``). ``name`` names it in the error.

    Raises:
        InvalidInput: neither, a time without a zone, or a duration of zero.
    """
    value = text.strip()
    if _DURATION.fullmatch(value):
        seconds = sum(
            float(amount) * _UNIT_SECONDS[unit] for amount, unit in _DURATION_PART.findall(value)
        )
        if seconds <= 0:
            raise InvalidInput(f"{name}: a duration must be above zero; got {text!r}")
        return timedelta(seconds=seconds)
    try:
        when = datetime.fromisoformat(value.replace("z", "Z"))
    except ValueError:
        raise InvalidInput(
            f"{name}: expected an ISO 8601 time with its zone (2026-12-08T09:00:00+01:00,"
            f" or …Z for UTC) or a duration from now (90s, 10m, 2h, 1d); got {text!r}"
        ) from None
    if when.tzinfo is None or when.utcoffset() is None:
        raise InvalidInput(
            f"{name}: {text!r} has no zone: add one (Z for UTC, or +01:00…); a time without"
            " one would mean something else on every machine"
        )
    return when.astimezone(UTC)


def intent_times(
    not_after: TimeSpec | None = None, not_before: TimeSpec | None = None
) -> tuple[datetime | None, datetime | None, IntentTimes | None]:
    """A deadline and a schedule as a caller gave them (times or durations): the deadline
    and the schedule given as times (for ``SmsIntent``), and those given as durations (None:
    none), which the ledger counts from the action's creation
    (``Ledger.create_action(times=)``).

    Raises:
        InvalidInput: a value that is neither an aware datetime nor a timedelta.
    """
    times: list[datetime | None] = []
    durations: list[timedelta | None] = []
    for name, value in (("not_after", not_after), ("not_before", not_before)):
        if value is None or isinstance(value, timedelta):
            times.append(None)
            durations.append(value)
        elif isinstance(value, datetime):
            times.append(require_aware(name, value))
            durations.append(None)
        else:
            raise InvalidInput(f"{name} must be a datetime or a timedelta; got {value!r}")
    relative = None
    if any(durations):
        relative = IntentTimes(not_after=durations[0], not_before=durations[1])
    return times[0], times[1], relative


# --------------------------------------------------------------------------- policy


def _positive_int(_i: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidInput(f"{attribute.name} must be a whole number >= 1; got {value!r}")


def _coefficient(_i: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not isinstance(value, int | float) or value < 1.0:
        raise InvalidInput(f"{attribute.name} must be >= 1.0; got {value!r}")


def _fraction(_i: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or not 0.0 <= value <= 1.0
    ):
        raise InvalidInput(f"{attribute.name} must be between 0 and 1; got {value!r}")


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """How many times and for how long an action may be dispatched (Temporal's vocabulary)."""

    #: attempts allowed in all, the first included
    maximum_attempts: int = attrs.field(default=3, validator=_positive_int)
    #: wait before the second attempt (a phone that fails at once is not hammered: a resend
    #: into an outage or a failing radio would only fail again)
    initial_interval: timedelta = attrs.field(default=timedelta(seconds=1), validator=_non_negative)
    #: each further wait is the previous one times this
    backoff_coefficient: float = attrs.field(default=2.0, validator=_coefficient)
    #: cap on any single wait (before jitter)
    maximum_interval: timedelta | None = attrs.field(
        default=timedelta(seconds=60), validator=_non_negative
    )
    #: each wait is scaled by a factor drawn in [1 - jitter, 1 + jitter], so that senders
    #: failing together do not retry together; the draw is a hash of the attempt before, so
    #: every process computes the same wait
    jitter: float = attrs.field(default=0.2, validator=_fraction)
    #: no new attempt after created_at + this (None: no deadline)
    schedule_to_close: timedelta | None = attrs.field(default=None, validator=_non_negative)
    #: how long after dispatch an unresolved attempt is IN_FLIGHT before it is UNKNOWN, and a
    #: queued artifact goes to review (STUCK); absence of the message never proves anything
    grace_window: timedelta = attrs.field(default=timedelta(seconds=60), validator=_non_negative)
    #: how long after dispatch an attempt whose message never shows up goes to review
    #: (UNVERIFIED) and releases its device's lease, so other actions on the phone go on
    unverified_after: timedelta = attrs.field(
        default=timedelta(minutes=10), validator=_non_negative
    )
    #: how long after dispatch (or after the row's own date, when later) a SENT row the
    #: messaging app wrote may still turn FAILED, so is no proof yet (the attempt stays
    #: VERIFYING: sent by the phone, not yet settled). AOSP Messaging writes the row SENT
    #: before it sends and keeps it SENT while it retries: a new attempt may start until its
    #: resend window has passed since the row's creation (``MESSAGE_RESEND_TIMEOUT_MS_DEFAULT``,
    #: 20 minutes, checked when an attempt starts), and an attempt may last its send timeout
    #: (``SMS_SEND_TIMEOUT_IN_MILLIS_DEFAULT``, 5 minutes) before the row is rewritten FAILED:
    #: 25 minutes from the row's creation, and 5 of margin for the row written after the
    #: dispatch and the script's own run (packages/apps/Messaging ``BugleGservicesKeys``,
    #: ``SendMessageAction``, ``ProcessSentMessageAction``, android-10.0.0_r30 to
    #: android-15.0.0_r1; docs/guarantees.md)
    settle_after: timedelta = attrs.field(default=timedelta(minutes=30), validator=_non_negative)
    #: how long after it is first seen a SENT row the framework wrote (the framework send
    #: path) has settled. The framework writes no row while the radio sends (its retries
    #: included); at the final result ``SmsTracker.onFailed``/``onSent`` call
    #: ``persistSentMessageIfRequired``, which inserts the row SENT and, for a failure,
    #: updates its type to FAILED in the very next statement, on the same thread, with no
    #: timer, queue or message between them (frameworks/opt/telephony ``SMSDispatcher``,
    #: identical at android-10.0.0_r30 to android-15.0.0_r1, read in LineageOS's mirror,
    #: lineage-17.1 to lineage-22.0). So the update trails the insert by one provider write
    #: (milliseconds); the sources bound it by nothing else than the telephony database's
    #: write lock, which another writer may hold. 0.5 s after our first sight (itself after
    #: the insert) is ten times the 50 ms the simulated phone models as the long end, and
    #: keeps a send's time to SUCCEEDED within its floor + 1 s (benchmarks/bench_send.py); a
    #: later update would make a failed send read SUCCEEDED, never a second SMS
    #: (docs/guarantees.md)
    framework_settle_after: timedelta = attrs.field(
        default=timedelta(milliseconds=500), validator=_non_negative
    )
    #: how long one send try of the messaging app may last before the app gives up and
    #: rewrites its row FAILED (``SMS_SEND_TIMEOUT_IN_MILLIS_DEFAULT``, 5 minutes,
    #: packages/apps/Messaging ``BugleGservicesKeys`` android-10.0.0_r30 to android-15.0.0_r1):
    #: a row of a one-segment SMS seen FAILED within this of the dispatch is the radio's
    #: verdict (nothing went out, resent); one seen FAILED later may be the app's own timeout
    #: while the radio did send (``SmsSender`` ignores a result after it): review (UNSETTLED)
    app_send_timeout: timedelta = attrs.field(default=timedelta(minutes=5), validator=_non_negative)

    def interval_before(self, attempt: int, seed: str = "") -> timedelta:
        """The wait required before attempt number ``attempt`` (>= 2) may start.

        ``seed`` (the dispatch id of the attempt before) picks the jitter: the same seed
        always gives the same wait; no seed, no jitter.
        """
        if attempt <= 1:
            return timedelta(0)
        steps = min(attempt - 2, 64)  # 2.0 ** 64 s is past any cap: no float overflow
        seconds = self.initial_interval.total_seconds() * min(self.backoff_coefficient**steps, 1e9)
        if self.maximum_interval is not None:
            seconds = min(seconds, self.maximum_interval.total_seconds())
        if seed and self.jitter:
            digest = hashlib.sha256(seed.encode("utf-8", "surrogatepass")).digest()
            draw = int.from_bytes(digest[:8], "big") / 2**64  # in [0, 1)
            seconds *= 1.0 + self.jitter * (2.0 * draw - 1.0)
        return timedelta(seconds=min(seconds, 1e9))


# --------------------------------------------------------------------------- records


@attrs.frozen(kw_only=True)
class RetryGrant:
    """An operator's new chance for an action whose budget was spent or whose retries were
    refused (a repeated mismatch, a passed deadline): ``starebrain retry``. The attempts up
    to ``after_attempt`` stay as they are, as evidence; they no longer count against the
    budget, as a repeated mismatch, or for the backoff."""

    #: attempts numbered up to this one no longer count (the action's attempts when granted)
    after_attempt: int = attrs.field(validator=attrs.validators.ge(0))
    #: attempts that may start after the grant (the budget from here)
    attempts: int = attrs.field(validator=attrs.validators.ge(1))
    #: when it was granted; a policy's deadline counts again from here
    granted_at: datetime = attrs.field(validator=_aware_utc)
    #: who granted it
    granted_by: str
    #: why, in the operator's words
    reason: str


@attrs.frozen(kw_only=True)
class QueueClaim:
    """The worker driving a queued action now, and the phone it took it for."""

    #: the worker (``host:pid``) that claimed it
    worker: str
    #: the phone (its key) the worker took it for
    device: str
    #: when it was claimed
    claimed_at: datetime = attrs.field(validator=_aware_utc)


@attrs.frozen(kw_only=True)
class Action:
    """One intended effect, named by a caller-supplied stable id."""

    #: caller-supplied stable id
    action_id: str
    #: sha256 over the canonical intent
    fingerprint: str
    #: what to send
    intent: SmsIntent
    #: budget and timing of the attempts
    policy: RetryPolicy
    #: when the action was first created
    created_at: datetime = attrs.field(validator=_aware_utc)
    #: the latest operator's grant of new attempts (``starebrain retry``), if any
    grant: RetryGrant | None = None
    #: the phone (its key) a sender named when it created the action: while the action has
    #: no attempt, ``resume`` sends it there only (None: any phone)
    planned_device: str | None = None
    #: a person's word on it through the policy gate: "APPROVED", "DENIED" or None
    approval: str | None = None
    #: the policy gate's latest verdict that stopped it, as JSON (verdict, rule, detail,
    #: until, digest, at); None once it went through, or never stopped
    gate: Mapping[str, Any] | None = None
    #: the pool of phones it was queued for (``send --queue``): a worker of that pool sends
    #: it (None: not queued; its sender sends it)
    pool: str | None = None
    #: while queued, the earliest time a worker looks at it again (None: not waiting in the
    #: queue: sent, refused, in a person's hands, or never queued)
    queue_after: datetime | None = attrs.field(default=None, validator=_aware_utc)
    #: the worker driving it now (None: none)
    claim: QueueClaim | None = None
    #: the policy that first judged it, by the digest of its rules (``gate_policies``): every
    #: later path judges it again by those rules (None: no gate has judged it yet)
    gate_policy: str | None = None
    #: the client of ``starebrain mcp --clients`` whose namespace holds its id (None: none)
    owner: str | None = None
    #: when the ledger recorded that its deadline passed with nothing sent (the
    #: ``action.expired`` event; None: not recorded yet, or it never expired). Its EXPIRED
    #: status is derived from the deadline and its attempts, at once, whether recorded or not
    expired_at: datetime | None = attrs.field(default=None, validator=_aware_utc)

    @property
    def denied(self) -> bool:
        """A DENY is final: a person's denial, or a DENY verdict of any policy gate that
        judged it (a rule, a client's policy). No path sends the action again; a person who
        wants the message sent after all creates a new action."""
        return self.approval == "DENIED" or (self.gate or {}).get("verdict") == "DENY"

    @property
    def awaiting_approval(self) -> bool:
        """A gate holds the action for a person's approval, and no person ruled yet."""
        return (
            self.approval is None and not self.denied and (self.gate or {}).get("verdict") == "HOLD"
        )

    @property
    def deadline(self) -> datetime | None:
        """No attempt may start at or after this time (None: no deadline); counted from the
        latest grant, if any."""
        if self.policy.schedule_to_close is None:
            return None
        start = self.grant.granted_at if self.grant is not None else self.created_at
        return start + self.policy.schedule_to_close

    @property
    def budget(self) -> int:
        """How many attempts may spend the budget: the policy's, or since a grant its own."""
        return self.grant.attempts if self.grant is not None else self.policy.maximum_attempts

    def counted(self, attempts: Sequence[ActionRecord]) -> list[ActionRecord]:
        """The attempts the budget, the backoff and the repeated-mismatch rule count, in
        order: since the latest grant, if any."""
        after = self.grant.after_attempt if self.grant is not None else 0
        return sorted(
            (record for record in attempts if record.attempt > after),
            key=lambda record: record.attempt,
        )


@attrs.frozen(kw_only=True)
class ActionRecord:
    """One dispatch attempt of an action, with both axes and the evidence seen."""

    #: the action this attempts
    action_id: str
    #: unique id of this attempt
    dispatch_id: str
    #: 1, 2, ... within the action
    attempt: int
    #: the ADB serial or host:port the attempt was sent through
    device: str
    #: did a read of the phone find the message?
    delivery: DeliveryState = DeliveryState.PENDING
    #: does the found message match the intent?
    acceptance: AcceptanceState = AcceptanceState.PENDING
    #: the provider ``_id`` of the confirmed message, in the table ``provider_kind`` names
    #: (None until confirmed, and after an operator's ruling that names no row)
    provider_object_id: int | None = None
    #: which provider table ``provider_object_id`` is an ``_id`` of; None exactly when it is
    #: None (when only the ``_id`` is given, SMS)
    provider_kind: ProviderKind | None = attrs.field(
        default=attrs.Factory(_default_provider_kind, takes_self=True),
        validator=_kind_matches_row,
    )
    #: that row's ``date`` (ms; an MMS row's seconds times 1000): SMS ``_id`` values are reused
    #: once the latest rows are deleted, so the ``_id`` and its date together name the
    #: message (None: not known, e.g. an operator's ruling naming only the ``_id``)
    provider_row_date_ms: int | None = attrs.field(default=None, validator=_date_names_a_row)
    #: highest ``content://sms`` ``_id`` on the device just before the send (None until
    #: recorded)
    watermark_id: int | None = None
    #: the device clock (ms since the epoch) just before the send
    device_clock_ms: int | None = None
    #: when the receipt was committed, just before the request left
    dispatched_at: datetime = attrs.field(validator=_aware_utc)
    #: when a read confirmed delivery
    confirmed_at: datetime | None = attrs.field(default=None, validator=_aware_utc)
    #: when a read or an operator proved it was not sent
    failed_at: datetime | None = attrs.field(default=None, validator=_aware_utc)
    #: when the message was judged to match the intent
    accepted_at: datetime | None = attrs.field(default=None, validator=_aware_utc)
    #: when the message was judged not to match the intent
    rejected_at: datetime | None = attrs.field(default=None, validator=_aware_utc)
    #: the latest evidence seen (provider row summary, match verdict, ...), JSON-able
    evidence: Mapping[str, Any] = attrs.field(factory=dict)
    #: the last error met while dispatching or reading, if any
    last_error: str | None = None
    #: why a person must look at this attempt (None: nobody needs to)
    review_reason: ReviewReason | None = None
    #: the operator whose resolution last settled this attempt, if any
    resolved_by: str | None = None
    #: increments on every stored change; each change writes one history row
    version: int = 0

    @property
    def is_final(self) -> bool:
        """True once both axes are settled (or delivery FAILED)."""
        return self.delivery is DeliveryState.FAILED or (
            self.delivery is DeliveryState.CONFIRMED
            and self.acceptance is not AcceptanceState.PENDING
        )


@attrs.frozen(kw_only=True)
class MatchVerdict:
    """Does a provider message match the intent? Computed outside the core."""

    #: True when recipient and body both match
    matched: bool
    #: why not, for the audit trail (None when matched)
    reason: str | None = None
    #: supporting details (which field, how), JSON-able
    details: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class Artifact:
    """The provider row attributed to one attempt by a lookup."""

    #: the row's ``_id`` in the provider table ``kind`` names
    provider_object_id: int
    #: which provider table the row was read from (their ``_id``s are separate spaces)
    kind: ProviderKind = attrs.field(default=ProviderKind.SMS, validator=check_provider_kind)
    #: what the row's type says
    outcome: ArtifactOutcome
    #: the row's ``date`` (ms): with the ``_id``, which message it is (ids are reused)
    row_date_ms: int | None = None
    #: the match against the intent; required when ``outcome`` is SENT
    verdict: MatchVerdict | None = None
    #: a redacted summary of the row, JSON-able
    evidence: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class DuplicateSighting:
    """A provider row that repeats an already-confirmed attempt: the phone sent it again."""

    #: the confirmed attempt the row repeats
    dispatch_id: str
    #: the row's ``_id`` in the provider table ``kind`` names
    provider_object_id: int
    #: which provider table the row was read from
    kind: ProviderKind = attrs.field(default=ProviderKind.SMS, validator=check_provider_kind)
    #: a redacted summary of the row, JSON-able
    evidence: Mapping[str, Any] = attrs.field(factory=dict)
    #: the row's ``date`` (ms): with the ``_id``, which message it is (ids are reused)
    row_date_ms: int | None = None


@attrs.frozen(kw_only=True)
class LookupResult:
    """What one read of the phone says about one attempt."""

    #: True only when the read is proven complete (a known row came back)
    complete: bool
    #: the row attributed to the attempt, if any
    artifact: Artifact | None = None
    #: True when several rows could be the attempt's and none can be chosen safely
    ambiguous: bool = False
    #: about the read itself (mode, window, round trips), JSON-able
    evidence: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class Transition:
    """One legal change of one attempt: the before and after records and why."""

    #: what happened
    event: Event
    #: the record as the change expects to find it (compare-and-set)
    before: ActionRecord
    #: the record after the change
    after: ActionRecord
    #: when it happened
    at: datetime = attrs.field(validator=_aware_utc)
    #: who made it (agent, reconciler, operator:<name>)
    actor: str
    #: the evidence for it, JSON-able
    evidence: Mapping[str, Any] = attrs.field(factory=dict)
    #: the record fields the change writes, filled in by the core's transition functions;
    #: leave it empty when building a Transition by hand (the ledger then compares
    #: ``before`` and ``after`` itself)
    changed: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class HistoryEntry:
    """One row of the append-only history of an attempt."""

    #: order of the row in the whole ledger
    sequence: int
    action_id: str
    dispatch_id: str
    event: Event
    at: datetime = attrs.field(validator=_aware_utc)
    actor: str
    from_delivery: DeliveryState | None
    to_delivery: DeliveryState
    from_acceptance: AcceptanceState | None
    to_acceptance: AcceptanceState
    evidence: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class PhoneHold:
    """An unresolved attempt that holds its phone's lease (no other action's attempt may
    start there), and when a reconcile pass can release it (``transitions.phone_hold``)."""

    #: the attempt holding the phone
    action_id: str
    dispatch_id: str
    #: the phone's key
    device: str
    #: its receipt: the phone has been held since then
    since: datetime = attrs.field(validator=_aware_utc)
    #: from then a pass may void its fence, which frees the phone if its send script never
    #: ran (None: it has no fence left to void, so only a read or review frees it)
    void_from: datetime | None = attrs.field(validator=_aware_utc)
    #: a pass moves it to review (UNVERIFIED) then at the latest, which frees the phone
    review_at: datetime = attrs.field(validator=_aware_utc)

    def releasable_at(self) -> datetime:
        """The earliest time a pass may free the phone without finding the message."""
        return self.void_from if self.void_from is not None else self.review_at


@attrs.frozen(kw_only=True)
class RedispatchDecision:
    """The answer of ``should_redispatch``: truthy when a new attempt may start now."""

    #: may a new attempt start?
    redispatch: bool
    #: why
    reason: RedispatchReason
    #: the earliest time a new attempt may start, when waiting is the only obstacle
    retry_at: datetime | None = attrs.field(default=None, validator=_aware_utc)

    def __bool__(self) -> bool:
        return self.redispatch

    @property
    def waits(self) -> bool:
        """True when only time stands in the way: a backoff, or a schedule not come yet
        (``retry_at`` says until when)."""
        return self.reason in (RedispatchReason.BACKOFF, RedispatchReason.SCHEDULED)


class QuietSuccess(NamedTuple):
    """What ``starebrain list`` shows of an action whose every attempt is CONFIRMED,
    ACCEPTED and unflagged (``Ledger.iter_listed``): its ``ActionSummary`` would say
    SUCCEEDED, nothing to review, no superseded reason, every attempt spent. A named tuple,
    not an attrs record: a listing makes one per action, and a tuple is made in a fifth of
    the time."""

    #: the action's id
    action_id: str
    #: when the action was created
    created_at: datetime
    #: its recipient as its summary's intent holds it
    recipient: str
    #: how many attempts it made (each spent the budget: all were confirmed)
    attempts: int
    #: the phone of its latest attempt
    device: str


@attrs.frozen(kw_only=True)
class ActionSummary:
    """An action with its attempts and what is derived from them."""

    action: Action
    attempts: tuple[ActionRecord, ...]
    #: the derived status of the latest attempt (PLANNED without one, or while it waits for
    #: the phone: ``decisions.waiting_for_phone``)
    status: Status
    #: why a person must look (empty: nobody needs to)
    review_reasons: tuple[ReviewReason, ...]
    #: provider rows seen beyond the one that confirmed an attempt
    duplicates: int = 0
    #: review reasons a later attempt superseded (a MISMATCH followed by a good resend: the
    #: wrong text did go out); kept on show, they stop nothing and need no ruling
    superseded_reasons: tuple[ReviewReason, ...] = ()

    @property
    def needs_review(self) -> bool:
        """True when automatic handling has stopped and a person must decide."""
        return bool(self.review_reasons)

    @property
    def latest(self) -> ActionRecord | None:
        """The newest attempt, if any."""
        return self.attempts[-1] if self.attempts else None
