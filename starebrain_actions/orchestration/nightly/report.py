"""The nightly report: its records (devices, changes, unresolved attempts, actions for a
person, actions waiting for a person's approval, duplicates, what nothing is sending, what
``--resume`` did), how they are built from what the ledger holds after the pass (pure), and
the report as JSON-able data."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final, TypeVar, cast

import attrs

from starebrain_actions.core.convert import converter
from starebrain_actions.core.model import (
    LEASE_RELEASING_REVIEWS,
    ActionSummary,
    DeliveryState,
    ReviewReason,
    Status,
)
from starebrain_actions.core.transitions import derive_status
from starebrain_actions.ledger.store import LedgerTally
from starebrain_actions.render.json_output import SCHEMA_VERSION
from starebrain_actions.render.records import (
    APPROVE_COMMAND,
    DENY_COMMAND,
    approval_commands,
    held_rule,
    held_since,
)
from starebrain_actions.render.values import spent_attempts

T = TypeVar("T")

#: Age buckets of unresolved attempts: (key, upper bound). The last bucket has no bound.
AGE_BUCKETS: Final[tuple[tuple[str, timedelta | None], ...]] = (
    ("under_1h", timedelta(hours=1)),
    ("1h_to_24h", timedelta(hours=24)),
    ("1d_to_7d", timedelta(days=7)),
    ("over_7d", None),
)

#: An attempt unresolved this long needs a person even on a reachable device: it holds the
#: device's lease, so nothing else can be sent through that phone until it is settled.
STALE_AFTER: Final = timedelta(hours=24)

#: Exit statuses of the nightly job.
EXIT_OK: Final = 0
EXIT_NEEDS_PERSON: Final = 1
EXIT_USAGE: Final = 2


@attrs.frozen(kw_only=True)
class ChangeLine:
    """One state change the pass made."""

    action_id: str
    dispatch_id: str
    #: the history event (confirm, accept, fail, ...)
    event: str
    from_status: str
    to_status: str


@attrs.frozen(kw_only=True)
class DeviceLine:
    """What the pass did on one device."""

    device: str
    #: False when the device could not be connected or read at all
    reachable: bool
    #: why not, or the read error that proved nothing
    error: str | None
    #: "shell" or "root" (how much of the SMS store the read could see)
    mode: str | None
    #: shell round trips the pass spent on it
    round_trips: int
    changes: tuple[ChangeLine, ...]
    #: provider rows recorded as duplicates during this pass
    duplicates_recorded: int
    #: attempts still unresolved on this device after the pass
    in_flight_after: int


@attrs.frozen(kw_only=True)
class AttemptLine:
    """One attempt that is not final yet (delivery pending, or content not yet checked)."""

    action_id: str
    dispatch_id: str
    device: str
    status: str
    dispatched_at: datetime
    age_seconds: int
    #: key of ``AGE_BUCKETS``
    bucket: str
    review_reason: str | None
    last_error: str | None
    #: True when the attempt still holds its device's lease (unresolved, not UNVERIFIED)
    holds_lease: bool = False
    #: the action's ``unverified_after``: past it a lease holder needs a person
    lease_limit_s: int = int(STALE_AFTER.total_seconds())


@attrs.frozen(kw_only=True)
class ActionLine:
    """One action a person should know about."""

    action_id: str
    status: str
    reasons: tuple[str, ...]
    attempts: int
    maximum_attempts: int
    duplicates: int
    device: str | None
    latest_dispatch_id: str | None
    last_error: str | None
    #: review reasons a later attempt superseded (MISMATCH: a wrong text went out first)
    superseded: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class UnsentLine:
    """An action nothing is sending: PLANNED past ``UNSENT_AFTER``, or FAILED (or sent
    another text) with attempts left whose latest attempt ended that long ago."""

    action_id: str
    status: str
    #: its latest attempt's phone (None: PLANNED, no phone yet)
    device: str | None
    #: since when nothing moved it: its creation, or its latest attempt's end
    idle_since: datetime
    attempts: int
    maximum_attempts: int
    #: what a person must do on the phone, when its latest attempt found it not ready
    not_ready: str | None = None


@attrs.frozen(kw_only=True)
class ApprovalLine:
    """An action the policy gate holds for a person's approval: nothing was sent, and nothing
    is (``resume`` neither) until a person approves it or denies it for good."""

    action_id: str
    #: the gate's rule that holds it (``recipients.approve``), as ``starebrain review`` shows
    rule: str
    #: the gate's words for why (no number, no body)
    detail: str
    #: when the gate held it (its verdict's time)
    since: datetime
    #: what a person runs: ``starebrain approve ID``, ``starebrain deny ID --reason TEXT``
    commands: tuple[str, ...]


def approval_line(summary: ActionSummary) -> ApprovalLine:
    """The report's line for an action the policy gate holds (``Ledger.awaiting_approval``):
    the rule, the time and the commands ``starebrain review`` shows for it (pure)."""
    action = summary.action
    detail = (action.gate or {}).get("detail")
    return ApprovalLine(
        action_id=action.action_id,
        rule=held_rule(action),
        detail=str(detail) if detail else "-",
        since=held_since(action),
        commands=approval_commands(action.action_id),
    )


@attrs.frozen(kw_only=True)
class ResumeLine:
    """What ``nightly --resume`` did with one action."""

    device: str
    action_id: str
    before: str
    after: str
    attempts_started: int
    note: str


@attrs.frozen(kw_only=True)
class DuplicateLine:
    """A provider row that repeats an attempt already confirmed (an extra SMS went out)."""

    action_id: str
    dispatch_id: str
    device: str
    provider_object_id: int
    seen_at: str
    #: "sms" or "mms": which of the phone's stores holds the row (their ids are separate)
    provider_kind: str = "sms"

    @property
    def row_text(self) -> str:
        """``sms _id 12`` or ``mms _id 12``."""
        return f"{self.provider_kind} _id {self.provider_object_id}"


@attrs.frozen(kw_only=True)
class WebhookLine:
    """A webhook endpoint turned off: its schedule spent on one event (``webhook list``)."""

    endpoint_id: str
    url: str
    disabled_at: datetime | None
    reason: str
    #: events of its types waiting after its cursor (none is lost while it is off)
    pending: int
    #: what a person runs to turn it back on
    command: str


def _lines_repr(lines: Sequence[Any]) -> str:
    """A list of the report's lines in its repr: whole when short, else counted (a
    backlog's report has a hundred thousand; ``asyncio.run`` builds its result's repr)."""
    return repr(lines) if len(lines) <= _REPR_LINES else f"<{len(lines)} lines>"


#: Lists of the report longer than this are counted, not listed, in its repr.
_REPR_LINES: Final = 50


@attrs.frozen(kw_only=True)
class NightlyReport:
    """Everything the nightly job found; written as JSON, summarised on stdout."""

    generated_at: datetime
    #: the ledger read: its file path, or its URL without the password
    ledger: str
    #: wall time of the whole run
    duration_s: float
    devices: tuple[DeviceLine, ...]
    #: actions per derived status (every status listed, zeros included)
    status_counts: dict[str, int]
    #: unresolved attempts per ``AGE_BUCKETS`` key
    unresolved_by_age: dict[str, int]
    unresolved: tuple[AttemptLine, ...] = attrs.field(repr=_lines_repr)
    mismatches: tuple[ActionLine, ...] = attrs.field(repr=_lines_repr)
    #: duplicates of actions whose DUPLICATE review is still open
    duplicates: tuple[DuplicateLine, ...]
    #: provider rows ever recorded as duplicates, all actions
    duplicates_total: int
    budget_exhausted: tuple[ActionLine, ...] = attrs.field(repr=_lines_repr)
    unreachable_devices: tuple[str, ...]
    #: every action waiting for a person, with its reasons
    review: tuple[ActionLine, ...] = attrs.field(repr=_lines_repr)
    #: why a person is needed (empty: nobody is)
    attention: tuple[str, ...]
    #: actions the policy gate holds for a person's approval, oldest first (never in
    #: ``unsent``: ``resume`` does not send them)
    awaiting_approval: tuple[ApprovalLine, ...] = attrs.field(default=(), repr=_lines_repr)
    #: actions nothing is sending (PLANNED, or FAILED with attempts left, idle past
    #: ``UNSENT_AFTER``), after ``--resume`` if it ran
    unsent: tuple[UnsentLine, ...] = ()
    #: what ``--resume`` did (empty without it)
    resumed: tuple[ResumeLine, ...] = ()
    #: phones ``--resume`` could not use, with why
    resume_errors: tuple[str, ...] = ()
    #: webhook requests this run made: answered 2xx, and failed (tried again later)
    webhooks_delivered: int = 0
    webhooks_failed: int = 0
    #: webhook endpoints turned off (each an attention item)
    webhooks_off: tuple[WebhookLine, ...] = ()

    @property
    def needs_person(self) -> bool:
        """True when someone must look: review items, actions waiting for approval, a dead
        device holding attempts, an attempt unresolved for longer than ``STALE_AFTER``,
        actions nothing is sending."""
        return bool(self.attention)

    @property
    def exit_code(self) -> int:
        """0 when nothing needs a person, 1 otherwise."""
        return EXIT_NEEDS_PERSON if self.needs_person else EXIT_OK


def report_data(report: NightlyReport) -> dict[str, Any]:
    """The report as JSON-able data (with ``needs_person``, ``exit_code`` and
    ``schema_version``), in the field names of the CLI's other JSON: ``devices[].in_flight``,
    ``duplicate_rows``, ``review_reasons``, ``superseded_reasons``. Their old names
    (``in_flight_after``, ``duplicates``, ``reasons``, ``superseded``) are still written,
    with the same values, until ``schema_version`` 2.

    The whole report at once: :func:`report_json_chunks` writes the same JSON a line of the
    report at a time."""
    data: dict[str, Any] = {
        key: _plain_lines(key, value) if key in _LISTS else converter.unstructure(value)
        for key, value in _top_level(report).items()
    }
    return data


#: The report's lists of lines (each item unstructured on its own, with its aliases), and
#: the key each one is also written under.
_LISTS: Final = frozenset(
    {
        "devices",
        "unresolved",
        "mismatches",
        "duplicates",
        "duplicate_rows",
        "budget_exhausted",
        "review",
        "awaiting_approval",
        "unsent",
        "resumed",
        "webhooks_off",
    }
)


def _top_level(report: NightlyReport) -> dict[str, Any]:
    """The report's top-level fields, lines not yet unstructured, with the aliases."""
    fields = {field.name: getattr(report, field.name) for field in attrs.fields(NightlyReport)}
    fields["duplicate_rows"] = report.duplicates
    fields["needs_person"] = report.needs_person
    fields["exit_code"] = report.exit_code
    fields["schema_version"] = SCHEMA_VERSION
    return fields


def _plain_line(key: str, line: Any) -> dict[str, Any]:
    """One line of the list ``key``, unstructured, with its aliases."""
    item: dict[str, Any] = converter.unstructure(line)
    if key == "devices":
        item["in_flight"] = item["in_flight_after"]
    elif key in ("mismatches", "budget_exhausted", "review"):
        item["review_reasons"] = item["reasons"]
        item["superseded_reasons"] = item["superseded"]
    return item


def _plain_lines(key: str, lines: Iterable[Any]) -> list[dict[str, Any]]:
    return [_plain_line(key, line) for line in lines]


def report_json_chunks(
    report: NightlyReport, extra: Mapping[str, Any] | None = None
) -> Iterator[str]:
    """The text of ``json_text(report_data(report) | extra)``, byte for byte (without a final
    newline), in pieces: each line of the report's lists is unstructured and encoded on its
    own, so that what is held beside the report is one line's data, not the whole report's
    (a backlog of a hundred thousand unresolved attempts lists each of them)."""
    from starebrain_actions.render.json_output import json_text

    fields = {**_top_level(report), **(extra or {})}
    yield "{"
    for number, key in enumerate(sorted(fields)):
        value = fields[key]
        head = ("\n" if number == 0 else ",\n") + "  " + json_text(key) + ": "
        if key in _LISTS and value:
            yield head + "["
            for index, line in enumerate(value):
                text = json_text(_plain_line(key, line))
                yield ("\n" if index == 0 else ",\n") + _indent(text, "    ", first=True)
            yield "\n  ]"
            continue
        plain = _plain_lines(key, value) if key in _LISTS else converter.unstructure(value)
        yield head + _indent(json_text(plain), "  ", first=False)
    yield "\n}" if fields else "}"


def _indent(text: str, prefix: str, *, first: bool) -> str:
    """``text`` with each line after the first (and the first too, ``first``) behind
    ``prefix``: a value nested in ``json_text``'s indented output."""
    lines = text.split("\n")
    return "\n".join(
        (prefix + line) if (index or first) else line for index, line in enumerate(lines)
    )


def _bucket(elapsed: timedelta) -> str:
    for key, bound in AGE_BUCKETS:
        if bound is None or elapsed < bound:
            return key
    raise AssertionError("the last bucket has no bound")  # pragma: no cover


def _same(value: Any) -> Any:
    return value


def _action_line(summary: ActionSummary, share: Callable[[Any], Any] = _same) -> ActionLine:
    latest = summary.latest
    return ActionLine(
        # the latest attempt's copy of the id: the same string its AttemptLine holds
        action_id=latest.action_id if latest else summary.action.action_id,
        status=summary.status.value,
        reasons=share(tuple(reason.value for reason in summary.review_reasons)),
        attempts=spent_attempts(summary),
        maximum_attempts=summary.action.budget,
        duplicates=summary.duplicates,
        device=share(latest.device) if latest else None,
        latest_dispatch_id=latest.dispatch_id if latest else None,
        last_error=share(latest.last_error) if latest else None,
        superseded=share(tuple(reason.value for reason in summary.superseded_reasons)),
    )


#: How many distinct values a ``ReportBuilder`` shares between its lines (devices, errors,
#: review reasons, limits: few distinct values, each repeated on many lines).
_SHARED_VALUES: Final = 4096


def _shown(ledger_path: Path | str) -> str:
    """The ledger as the report names it: a path, or a URL without its secrets (the report
    is printed, written with ``--report`` and archived, perhaps into git)."""
    from starebrain_actions.ledger import pg as _pg

    text = str(ledger_path)
    return _pg.redact(text) if _pg.is_url(text) else text


def build_report(
    *,
    ledger_path: Path | str,
    now: datetime,
    duration_s: float,
    devices: Sequence[DeviceLine],
    summaries: Iterable[ActionSummary],
    duplicates: Sequence[DuplicateLine] = (),
    tally: LedgerTally | None = None,
    awaiting_approval: Sequence[ApprovalLine] = (),
) -> NightlyReport:
    """Assemble the report from what the ledger holds after the pass (pure).

    ``summaries`` is read once, in order. With ``tally``, they are only the actions with a
    notable attempt (``Ledger.iter_summaries(notable_only=True)``), and the tally counts the
    others and every duplicate. ``awaiting_approval``: the actions the policy gate holds
    (``approval_line`` of ``Ledger.awaiting_approval``)."""
    builder = ReportBuilder(now)
    for summary in summaries:
        builder.add(summary)
    return builder.report(
        ledger_path=ledger_path,
        duration_s=duration_s,
        devices=devices,
        duplicates=duplicates,
        tally=tally,
        awaiting_approval=awaiting_approval,
    )


class ReportBuilder:
    """The report's counts and lists, built one summary at a time: only what the report
    lists is kept (unresolved attempts, actions for review, mismatches, spent budgets)."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.counts = {status.value: 0 for status in Status}
        self.by_age = {key: 0 for key, _ in AGE_BUCKETS}
        self.unresolved: list[AttemptLine] = []
        self.review: list[ActionLine] = []
        self.mismatches: list[ActionLine] = []
        self.exhausted: list[ActionLine] = []
        self.duplicates_total = 0
        # a backlog's lines repeat a few values (its phones, one error text, the same
        # reasons): one object each, not one per line
        self._shared: dict[Any, Any] = {}

    def _share(self, value: T) -> T:
        """``value``, or an equal one already kept by another line."""
        shared = self._shared.get(value, value)
        if shared is value and len(self._shared) < _SHARED_VALUES:
            self._shared[value] = value
        return cast(T, shared)

    def add(self, summary: ActionSummary) -> None:
        """Count one action and keep what the report lists of it."""
        now = self.now
        self.counts[summary.status.value] += 1
        self.duplicates_total += summary.duplicates
        grace = summary.action.policy.grace_window
        for record in summary.attempts:
            if record.is_final:
                continue
            elapsed = now - record.dispatched_at
            bucket = _bucket(elapsed)
            self.by_age[bucket] += 1
            share = self._share
            self.unresolved.append(
                AttemptLine(
                    action_id=record.action_id,
                    dispatch_id=record.dispatch_id,
                    device=share(record.device),
                    status=derive_status(record, now, grace).value,
                    dispatched_at=record.dispatched_at,
                    age_seconds=max(0, int(elapsed.total_seconds())),
                    bucket=bucket,
                    review_reason=record.review_reason.value if record.review_reason else None,
                    last_error=share(record.last_error),
                    holds_lease=record.delivery is DeliveryState.PENDING
                    and record.review_reason not in LEASE_RELEASING_REVIEWS,
                    lease_limit_s=share(
                        int(summary.action.policy.unverified_after.total_seconds())
                    ),
                )
            )
        line: ActionLine | None = None
        if summary.needs_review:
            line = _action_line(summary, self._share)
            self.review.append(line)
        if (
            summary.status is Status.MISMATCH
            or ReviewReason.MISMATCH in summary.review_reasons
            or ReviewReason.MISMATCH in summary.superseded_reasons
        ):
            line = line or _action_line(summary, self._share)
            self.mismatches.append(line)
        if ReviewReason.BUDGET_EXHAUSTED in summary.review_reasons:
            self.exhausted.append(line or _action_line(summary, self._share))

    def report(
        self,
        *,
        ledger_path: Path | str,
        duration_s: float,
        devices: Sequence[DeviceLine],
        duplicates: Sequence[DuplicateLine],
        tally: LedgerTally | None,
        awaiting_approval: Sequence[ApprovalLine] = (),
    ) -> NightlyReport:
        """The report of everything added (and of ``tally``, the actions not added; and of
        ``awaiting_approval``, the actions the policy gate holds)."""
        counts = dict(self.counts)
        duplicates_total = self.duplicates_total
        if tally is not None:
            counts[Status.PLANNED.value] += tally.planned
            counts[Status.DENIED.value] += tally.denied_unattempted
            counts[Status.EXPIRED.value] += tally.expired_unattempted
            counts[Status.SUCCEEDED.value] += tally.quietly_succeeded
            duplicates_total = tally.duplicates
        unresolved = sorted(self.unresolved, key=lambda line: line.dispatched_at)
        unreachable = tuple(line.device for line in devices if not line.reachable)
        attention: list[str] = []
        if self.review:
            attention.append(f"{len(self.review)} action(s) need review")
        if awaiting_approval:
            attention.append(approval_attention(len(awaiting_approval)))
        stranded = [line for line in devices if not line.reachable and line.in_flight_after]
        for line in stranded:
            attention.append(
                f"device {line.device} is unreachable with {line.in_flight_after} attempt(s)"
                " in flight"
            )
        stranded_devices = {line.device for line in stranded}
        stale = [
            line
            for line in unresolved
            if line.device not in stranded_devices
            and (
                (line.holds_lease and line.age_seconds >= line.lease_limit_s)
                or line.age_seconds >= STALE_AFTER.total_seconds()
            )
        ]
        if stale:
            holders = sum(1 for line in stale if line.holds_lease)
            attention.append(
                f"{len(stale)} attempt(s) unresolved past their limit"
                + (f", {holders} still holding their device's lease" if holders else "")
            )
        return NightlyReport(
            generated_at=self.now,
            ledger=_shown(ledger_path),
            duration_s=round(duration_s, 3),
            devices=tuple(devices),
            status_counts=counts,
            unresolved_by_age=dict(self.by_age),
            unresolved=tuple(unresolved),
            mismatches=tuple(self.mismatches),
            duplicates=tuple(duplicates),
            duplicates_total=duplicates_total,
            budget_exhausted=tuple(self.exhausted),
            unreachable_devices=unreachable,
            review=tuple(self.review),
            attention=tuple(attention),
            awaiting_approval=tuple(awaiting_approval),
        )


def approval_attention(count: int) -> str:
    """The attention item of ``count`` actions waiting for approval, with the commands
    ``starebrain review`` names for them."""
    return (
        f"{count} action(s) wait for a person's approval (the policy gate holds them; nothing"
        f" was sent): `{APPROVE_COMMAND}` lets one go, `{DENY_COMMAND}` stops it"
    )
