"""The nightly job: one reconciliation pass over every busy device, then a report for people.

Run by cron as ``starebrain nightly`` (or ``scripts/nightly_reconcile.py``). It only *reads*
phones (through ``reconcile_pending``), never sends. It is safe to start twice: an OS file
lock (``fcntl.flock`` on ``<ledger>.nightly.lock``) lets one run work while a second one
says so and leaves; the kernel drops the lock when its holder dies, so a crash never wedges
later nights. On PostgreSQL (a ``postgresql://`` URL) the lock is the ledger's advisory lock
``nightly`` instead (``Ledger.exclusive``), held across hosts and dropped by the server when
its holder's connection ends; no file is made. A device that cannot be reached is reported,
never fatal.

The report holds no phone numbers and no bodies: it is meant to be archived (and committed).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import attrs

from starebrain_actions.core.convert import age, converter, format_time
from starebrain_actions.core.exceptions import LedgerUnavailable
from starebrain_actions.core.model import (
    LEASE_RELEASING_REVIEWS,
    ActionSummary,
    DeliveryState,
    ReviewReason,
    Status,
)
from starebrain_actions.core.transitions import derive_status
from starebrain_actions.ledger.store import Ledger, LedgerTally, inspect_ledger
from starebrain_actions.render.json_output import SCHEMA_VERSION, json_text
from starebrain_actions.render.sanitize import clean_text, md_code, md_table, md_text
from starebrain_actions.render.values import spent_attempts, status_counts_text

if TYPE_CHECKING:
    from starebrain_actions.orchestration.agent import ReconcilePass

#: An action PLANNED this long, or FAILED with attempts left and idle this long since its
#: latest attempt ended, is one nothing is sending: a person's attention item, or (with
#: ``--resume``) sent.
UNSENT_AFTER: Final = timedelta(hours=1)

#: Age buckets of unresolved attempts: (key, upper bound). The last bucket has no bound.
AGE_BUCKETS: Final[tuple[tuple[str, timedelta | None], ...]] = (
    ("under_1h", timedelta(hours=1)),
    ("1h_to_24h", timedelta(hours=24)),
    ("1d_to_7d", timedelta(days=7)),
    ("over_7d", None),
)
_BUCKET_LABELS: Final[Mapping[str, str]] = {
    "under_1h": "< 1h",
    "1h_to_24h": "1h-24h",
    "1d_to_7d": "1d-7d",
    "over_7d": "> 7d",
}

#: An attempt unresolved this long needs a person even on a reachable device: it holds the
#: device's lease, so nothing else can be sent through that phone until it is settled.
STALE_AFTER: Final = timedelta(hours=24)

#: Author of archive commits unless ``GIT_AUTHOR_*`` / ``GIT_COMMITTER_*`` say otherwise.
GIT_AUTHOR_NAME: Final = "starebrain nightly"
GIT_AUTHOR_EMAIL: Final = "nightly@localhost"

#: Exit statuses of the nightly job.
EXIT_OK: Final = 0
EXIT_NEEDS_PERSON: Final = 1
EXIT_USAGE: Final = 2

Progress = Callable[[str, int, int], None]


#: The name of the nightly job's lock in a PostgreSQL ledger (``Ledger.exclusive``).
NIGHTLY_LOCK: Final = "nightly"


class NightlyBusy(Exception):
    """Another nightly run holds the lock on this ledger."""


# --------------------------------------------------------------------------- report records


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
    unresolved: tuple[AttemptLine, ...]
    mismatches: tuple[ActionLine, ...]
    #: duplicates of actions whose DUPLICATE review is still open
    duplicates: tuple[DuplicateLine, ...]
    #: provider rows ever recorded as duplicates, all actions
    duplicates_total: int
    budget_exhausted: tuple[ActionLine, ...]
    unreachable_devices: tuple[str, ...]
    #: every action waiting for a person, with its reasons
    review: tuple[ActionLine, ...]
    #: why a person is needed (empty: nobody is)
    attention: tuple[str, ...]
    #: actions nothing is sending (PLANNED, or FAILED with attempts left, idle past
    #: ``UNSENT_AFTER``), after ``--resume`` if it ran
    unsent: tuple[UnsentLine, ...] = ()
    #: what ``--resume`` did (empty without it)
    resumed: tuple[ResumeLine, ...] = ()
    #: phones ``--resume`` could not use, with why
    resume_errors: tuple[str, ...] = ()

    @property
    def needs_person(self) -> bool:
        """True when someone must look: review items, a dead device holding attempts, or an
        attempt unresolved for longer than ``STALE_AFTER``."""
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
    with the same values, until ``schema_version`` 2."""
    data: dict[str, Any] = converter.unstructure(report)
    for device in data["devices"]:
        device["in_flight"] = device["in_flight_after"]
    data["duplicate_rows"] = data["duplicates"]
    for key in ("mismatches", "budget_exhausted", "review"):
        for line in data[key]:
            line["review_reasons"] = line["reasons"]
            line["superseded_reasons"] = line["superseded"]
    data["needs_person"] = report.needs_person
    data["exit_code"] = report.exit_code
    data["schema_version"] = SCHEMA_VERSION
    return data


# --------------------------------------------------------------------------- lock


def lock_path_for(ledger_path: Path) -> Path:
    """``<ledger>.nightly.lock``, next to the ledger."""
    return ledger_path.with_name(ledger_path.name + ".nightly.lock")


@contextlib.contextmanager
def nightly_lock(ledger_path: Path) -> Iterator[Path]:
    """Hold the nightly lock of ``ledger_path`` for the duration of the block.

    A non-blocking ``flock``: the kernel releases it when the holder exits or crashes, so no
    stale lock survives; the file itself stays (removing it would race with a new holder).
    The ledger is checked first, without writing anything: no lock file is ever left next to
    something that is not a ledger (``/dev/null``, a text file, another program's database).

    Raises:
        NightlyBusy: another process holds it.
        LedgerUnavailable: ``ledger_path`` is not a usable ledger, or the lock file cannot be
            created.
        SchemaTooNew: the ledger was written by a newer version.
    """
    inspect_ledger(ledger_path)
    path = lock_path_for(ledger_path)
    descriptor = _open_lock_file(path)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise LedgerUnavailable(f"cannot lock {path}: {exc}") from exc
            holder = _read_holder(descriptor)
            raise NightlyBusy(
                f"another nightly run{holder} holds {path}; leaving this run without touching"
                " anything"
            ) from None
        os.ftruncate(descriptor, 0)
        os.write(descriptor, f"{os.getpid()}\n".encode())
        yield path
    finally:
        os.close(descriptor)


def _open_lock_file(path: Path) -> int:
    """A descriptor of the lock file at ``path``, created 0600 if missing: never through a
    symlink (``O_NOFOLLOW``: one planted there would have its target truncated and
    overwritten with a pid), never blocking on a FIFO (``O_NONBLOCK``), not inherited by the
    programs the run starts (``O_CLOEXEC``), never a terminal's controller (``O_NOCTTY``),
    and only a regular file (a directory, a FIFO, a
    device is refused, untouched).

    Raises:
        LedgerUnavailable: the path is not a regular file, or cannot be opened or created.
    """
    refuse = (
        f"the nightly lock {path} is not a regular file; leaving it untouched (remove it, or"
        " move it aside, if it is not yours)"
    )
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
    try:
        descriptor = os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO) or (
            os.path.lexists(path) and (os.path.islink(path) or not os.path.isfile(path))
        ):
            raise LedgerUnavailable(f"{refuse} ({_kind(path)})") from None
        hint = (
            " (a read-only ledger or directory? `starebrain nightly --dry-run` needs no lock)"
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS)
            else ""
        )
        raise LedgerUnavailable(f"cannot create the nightly lock {path}: {exc}{hint}") from exc
    try:
        status = os.fstat(descriptor)
    except OSError as exc:
        os.close(descriptor)
        raise LedgerUnavailable(f"cannot use the nightly lock {path}: {exc}") from exc
    if not stat.S_ISREG(status.st_mode):
        os.close(descriptor)  # a FIFO or a device opened without blocking: nothing written
        raise LedgerUnavailable(f"{refuse} ({_kind(path)})")
    return descriptor


def _kind(path: Path) -> str:
    """What stands at ``path``, in words (for a refusal)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return "gone"
    for test, word in (
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return word
    return "not a regular file"


def _read_holder(descriptor: int) -> str:
    with contextlib.suppress(OSError, ValueError):
        text = os.pread(descriptor, 32, 0).decode().strip()
        if text:
            return f" (pid {int(text)})"
    return ""


# --------------------------------------------------------------------------- the run


async def run_nightly(
    ledger_path: Path | str,
    *,
    devices: Sequence[str] = (),
    key_path: Path | None = None,
    progress: Progress | None = None,
    clock: Callable[[], float] = time.monotonic,
    read_as_system: bool | None = None,
    dry_run: bool = False,
    resume: bool = False,
    resume_wait_s: float = 30.0,
    unsent_after: timedelta = UNSENT_AFTER,
    gate: Any = None,
) -> NightlyReport:
    """Reconcile every device with attempts in flight (plus ``devices``), then build the report.

    ``resume``: then finish what was started (``SmsAgent.resume``, each action waiting up to
    ``resume_wait_s`` for its proof) on ``devices`` and on the phones of the actions that
    FAILED with attempts left; PLANNED actions go to ``devices`` only. Without it, actions
    nothing is sending past ``unsent_after`` are attention items.

    ``read_as_system``: read the phones through ``su 1000`` (default:
    ``$STAREBRAIN_READ_AS_SYSTEM``). ``dry_run``: read no phone and write nothing: the
    report of the ledger as it stands, opened read-only (a read-only file or directory, an
    auditor's copy, a backup); no lock is needed.

    On SQLite the caller holds :func:`nightly_lock` (unless ``dry_run``); on PostgreSQL
    (``ledger_path`` a URL) this takes the ledger's advisory lock ``nightly`` itself, before
    anything is read. A device that is down is reported, never fatal.

    Raises:
        NightlyBusy: (PostgreSQL) another run, on any host, holds the lock.
        LedgerUnavailable, SchemaTooNew: the ledger cannot be opened.
    """
    from starebrain_actions.orchestration.agent import reconcile_pending
    from starebrain_actions.orchestration.reconciler import FENCE_RETENTION

    started = clock()
    async with contextlib.AsyncExitStack() as stack:
        ledger = await stack.enter_async_context(
            Ledger.open(ledger_path, read_only=dry_run, create=False)
        )
        if not dry_run:
            # a no-op yielding True on SQLite, where the caller holds the file lock
            held = await stack.enter_async_context(ledger.exclusive(NIGHTLY_LOCK, wait=False))
            if not held:
                raise NightlyBusy(
                    f"another nightly run holds the lock {NIGHTLY_LOCK!r} of {ledger.path};"
                    " leaving this run without touching anything"
                )
        busy = [] if dry_run else await ledger.devices_in_flight()
        targets = [] if dry_run else list(dict.fromkeys([*busy, *devices]))
        result: ReconcilePass | None = None
        failure: str | None = None
        if targets:
            try:
                result = await reconcile_pending(
                    ledger,
                    targets,
                    key_path=str(key_path) if key_path is not None else None,
                    progress=progress,
                    read_as_system=read_as_system,
                    fence_retention=FENCE_RETENTION,
                )
            except Exception as exc:  # a bad key, a bridge bug: report it, keep the report
                failure = f"{type(exc).__name__}: {exc}"
        resumed: list[ResumeLine] = []
        resume_errors: list[str] = []
        if resume and not dry_run:
            resumed, resume_errors = await _resume(
                ledger,
                ledger_path,
                devices,
                key_path=key_path,
                read_as_system=read_as_system,
                wait_s=resume_wait_s,
                gate=gate,
            )
        now = ledger.now()
        # one snapshot for every read below: the counts and the lists agree with each other
        async with ledger.read_snapshot():
            tally = await ledger.ledger_tally()
            in_flight = await ledger.in_flight()
            builder = _ReportBuilder(now)
            duplicates: list[DuplicateLine] = []
            # only actions with an attempt that is not a clean success are read one by one;
            # the others are SUCCEEDED with nothing to list, counted by the tally
            async for summary in ledger.iter_summaries(notable_only=True, now=now):
                builder.add(summary)
                if {ReviewReason.DUPLICATE, ReviewReason.AMBIGUOUS} & set(summary.review_reasons):
                    for row in await ledger.duplicates(summary.action.action_id):
                        duplicates.append(
                            DuplicateLine(
                                action_id=summary.action.action_id,
                                dispatch_id=str(row["dispatch_id"]),
                                device=str(row["device"]),
                                provider_object_id=int(row["provider_object_id"]),
                                seen_at=str(row["seen_at"]),
                                provider_kind=str(row["provider_kind"]),
                            )
                        )
            unsent = await _unsent(ledger, now, unsent_after)
    pending_per_device: dict[str, int] = {}
    for record in in_flight:
        pending_per_device[record.device] = pending_per_device.get(record.device, 0) + 1
    device_lines = _device_lines(targets, result, failure, pending_per_device)
    report = builder.report(
        ledger_path=ledger.path,
        duration_s=clock() - started,
        devices=device_lines,
        duplicates=duplicates,
        tally=tally,
    )
    attention = list(report.attention)
    if unsent:
        attention.append(
            f"{len(unsent)} action(s) not sent and nothing is sending them (PLANNED, or FAILED"
            " with attempts left, idle past"
            f" {int(unsent_after.total_seconds() // 60)} min): `starebrain resume --device"
            " …` or `starebrain nightly --resume` sends them"
        )
    attention.extend(f"resume: {error}" for error in resume_errors)
    return attrs.evolve(
        report,
        attention=tuple(attention),
        unsent=tuple(unsent),
        resumed=tuple(resumed),
        resume_errors=tuple(resume_errors),
    )


async def _unsent(ledger: Ledger, now: datetime, after: timedelta) -> list[UnsentLine]:
    """The actions nothing is sending: resumable (``Ledger.resumable``) and idle past
    ``after`` (PLANNED since their creation, the others since their latest attempt ended)."""
    from starebrain_actions.core.decisions import not_ready

    lines = []
    for summary in await ledger.resumable(now=now):
        latest = summary.latest
        if latest is None:
            idle_since = summary.action.created_at
        else:
            idle_since = latest.failed_at or latest.rejected_at or latest.dispatched_at
        if now - idle_since < after:
            continue
        remedy = latest.evidence.get("remedy") if latest is not None else None
        lines.append(
            UnsentLine(
                action_id=summary.action.action_id,
                status=summary.status.value,
                device=latest.device if latest is not None else None,
                idle_since=idle_since,
                attempts=spent_attempts(summary),
                maximum_attempts=summary.action.budget,
                not_ready=(
                    remedy
                    if latest is not None and not_ready(latest) and isinstance(remedy, str)
                    else None
                ),
            )
        )
    return lines


async def _resume(
    ledger: Ledger,
    target: Path | str,
    devices: Sequence[str],
    *,
    key_path: Path | None,
    read_as_system: bool | None,
    wait_s: float,
    gate: Any = None,
) -> tuple[list[ResumeLine], list[str]]:
    """``SmsAgent.resume`` on ``devices`` and on the phones of the resumable actions that
    have one (their latest attempt's, or the one their sender named), one phone after
    another; what it did, and the phones it could not use."""
    from starebrain_actions.core.exceptions import StarebrainError
    from starebrain_actions.orchestration.agent import SmsAgent
    from starebrain_actions.phone.android import PhoneUnavailable

    pinned = [
        where
        for s in await ledger.resumable()
        if (where := s.latest.device if s.latest is not None else s.action.planned_device)
    ]
    keys = list(dict.fromkeys([*[await ledger.phone_key_for(d) for d in devices], *pinned]))
    given = {await ledger.phone_key_for(device) for device in devices}
    sharing = [key for key in keys if key in given]
    lines: list[ResumeLine] = []
    errors: list[str] = []
    for key in keys:
        address = await ledger.phone_address(key)
        # PLANNED actions no sender named a phone for go only to the phones given
        share = (sharing.index(key), len(sharing)) if key in given else None
        try:
            async with SmsAgent.open(
                db=target,
                device=address,
                key_path=key_path,
                read_as_system=read_as_system,
                gate=gate,
            ) as agent:
                report = await agent.resume(wait=wait_s, share=share)
        except (PhoneUnavailable, StarebrainError) as exc:
            errors.append(f"{address}: {exc}")
            continue
        lines.extend(
            ResumeLine(
                device=report.device,
                action_id=item.action_id,
                before=item.before.value,
                after=item.after.value,
                attempts_started=item.sent,
                note=item.note,
            )
            for item in report.items
        )
    return lines, errors


def _device_lines(
    targets: Sequence[str],
    result: ReconcilePass | None,
    failure: str | None,
    pending_per_device: Mapping[str, int],
) -> tuple[DeviceLine, ...]:
    reports = {report.device: report for report in result.devices} if result else {}
    lines = []
    for device in targets:
        report = reports.get(device)
        if report is None:
            lines.append(
                DeviceLine(
                    device=device,
                    reachable=False,
                    error=failure or "the reconciler did not report on this device",
                    mode=None,
                    round_trips=0,
                    changes=(),
                    duplicates_recorded=0,
                    in_flight_after=pending_per_device.get(device, 0),
                )
            )
            continue
        lines.append(
            DeviceLine(
                device=device,
                reachable=report.reachable,
                error=report.error,
                mode=report.mode,
                round_trips=report.round_trips,
                changes=tuple(
                    ChangeLine(
                        action_id=change.action_id,
                        dispatch_id=change.dispatch_id,
                        event=str(change.event.value),
                        from_status=str(change.from_status.value),
                        to_status=str(change.to_status.value),
                    )
                    for change in report.changes
                ),
                duplicates_recorded=report.duplicates_recorded,
                in_flight_after=pending_per_device.get(device, 0),
            )
        )
    return tuple(lines)


def _bucket(elapsed: timedelta) -> str:
    for key, bound in AGE_BUCKETS:
        if bound is None or elapsed < bound:
            return key
    raise AssertionError("the last bucket has no bound")  # pragma: no cover


def _action_line(summary: ActionSummary) -> ActionLine:
    latest = summary.latest
    return ActionLine(
        action_id=summary.action.action_id,
        status=summary.status.value,
        reasons=tuple(reason.value for reason in summary.review_reasons),
        attempts=spent_attempts(summary),
        maximum_attempts=summary.action.budget,
        duplicates=summary.duplicates,
        device=latest.device if latest else None,
        latest_dispatch_id=latest.dispatch_id if latest else None,
        last_error=latest.last_error if latest else None,
        superseded=tuple(reason.value for reason in summary.superseded_reasons),
    )


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
) -> NightlyReport:
    """Assemble the report from what the ledger holds after the pass (pure).

    ``summaries`` is read once, in order. With ``tally``, they are only the actions with a
    notable attempt (``Ledger.iter_summaries(notable_only=True)``), and the tally counts the
    others and every duplicate."""
    builder = _ReportBuilder(now)
    for summary in summaries:
        builder.add(summary)
    return builder.report(
        ledger_path=ledger_path,
        duration_s=duration_s,
        devices=devices,
        duplicates=duplicates,
        tally=tally,
    )


class _ReportBuilder:
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
            self.unresolved.append(
                AttemptLine(
                    action_id=record.action_id,
                    dispatch_id=record.dispatch_id,
                    device=record.device,
                    status=derive_status(record, now, grace).value,
                    dispatched_at=record.dispatched_at,
                    age_seconds=max(0, int(elapsed.total_seconds())),
                    bucket=bucket,
                    review_reason=record.review_reason.value if record.review_reason else None,
                    last_error=record.last_error,
                    holds_lease=record.delivery is DeliveryState.PENDING
                    and record.review_reason not in LEASE_RELEASING_REVIEWS,
                    lease_limit_s=int(summary.action.policy.unverified_after.total_seconds()),
                )
            )
        line: ActionLine | None = None
        if summary.needs_review:
            line = _action_line(summary)
            self.review.append(line)
        if (
            summary.status is Status.MISMATCH
            or ReviewReason.MISMATCH in summary.review_reasons
            or ReviewReason.MISMATCH in summary.superseded_reasons
        ):
            line = line or _action_line(summary)
            self.mismatches.append(line)
        if ReviewReason.BUDGET_EXHAUSTED in summary.review_reasons:
            self.exhausted.append(line or _action_line(summary))

    def report(
        self,
        *,
        ledger_path: Path | str,
        duration_s: float,
        devices: Sequence[DeviceLine],
        duplicates: Sequence[DuplicateLine],
        tally: LedgerTally | None,
    ) -> NightlyReport:
        """The report of everything added (and of ``tally``, the actions not added)."""
        counts = dict(self.counts)
        duplicates_total = self.duplicates_total
        if tally is not None:
            counts[Status.PLANNED.value] += tally.planned
            counts[Status.SUCCEEDED.value] += tally.quietly_succeeded
            duplicates_total = tally.duplicates
        unresolved = sorted(self.unresolved, key=lambda line: line.dispatched_at)
        unreachable = tuple(line.device for line in devices if not line.reachable)
        attention: list[str] = []
        if self.review:
            attention.append(f"{len(self.review)} action(s) need review")
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
        )


# --------------------------------------------------------------------------- output


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` so readers see the old file or the new one, never
    half of one: a temporary file in the same directory, fsynced, then renamed over.

    Raises:
        FileNotFoundError: the directory does not exist (it is not created: a typo in a
            cron line should fail, not scatter directories).
        OSError: the file cannot be written.
    """
    if not path.parent.is_dir():
        raise FileNotFoundError(f"directory {path.parent} does not exist (it is not created)")
    # as printed: characters a terminal could act on (C1 controls, bidi overrides) escaped
    text = json_text(data) + "\n"
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    with contextlib.suppress(OSError):
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def summary_lines(report: NightlyReport) -> list[str]:
    """The human summary printed on stdout (no numbers, no bodies; ids whole; every value
    through ``clean_text``)."""
    t = clean_text
    lines = [
        f"starebrain nightly {format_time(report.generated_at)}"
        f"  ledger {t(report.ledger)}  ({report.duration_s:.1f}s)"
    ]
    if not report.devices:
        lines.append("devices: none with attempts in flight")
    for device in report.devices:
        if device.reachable:
            lines.append(
                f"device {t(device.device)}: reachable ({t(device.mode or '?')} mode,"
                f" {device.round_trips} round trip(s), {len(device.changes)} change(s),"
                f" {device.duplicates_recorded} duplicate(s) recorded,"
                f" {device.in_flight_after} still in flight)"
            )
        else:
            lines.append(
                f"device {t(device.device)}: UNREACHABLE ({t(device.error or 'no detail')});"
                f" {device.in_flight_after} attempt(s) in flight, left untouched"
            )
        for change in device.changes:
            lines.append(
                f"  {t(change.action_id)} {t(change.dispatch_id)} {t(change.event)}:"
                f" {change.from_status} -> {change.to_status}"
            )
    lines.append(f"status: {status_counts_text(report.status_counts)}")
    buckets = ", ".join(
        f"{_BUCKET_LABELS[key]} {count}" for key, count in report.unresolved_by_age.items()
    )
    lines.append(f"unresolved attempts by age: {buckets}")
    for attempt in report.unresolved:
        lines.append(
            f"  {t(attempt.action_id)} {t(attempt.dispatch_id)} on {t(attempt.device)}:"
            f" {attempt.status}, {age(timedelta(seconds=attempt.age_seconds))} old"
        )
    lines.append(f"mismatches: {len(report.mismatches)}")
    for item in report.mismatches:
        lines.append(f"  {t(item.action_id)} ({item.status}) on {t(item.device or '-')}")
    lines.append(
        f"duplicates seen on phones: {len(report.duplicates)} open,"
        f" {report.duplicates_total} ever recorded"
    )
    for duplicate in report.duplicates:
        lines.append(
            f"  {t(duplicate.action_id)}: {t(duplicate.row_text)} on"
            f" {t(duplicate.device)} repeats attempt {t(duplicate.dispatch_id)}"
        )
    lines.append(f"budget exhausted: {len(report.budget_exhausted)}")
    for item in report.budget_exhausted:
        lines.append(f"  {t(item.action_id)}: {item.attempts}/{item.maximum_attempts} attempts")
    lines.append(
        "unreachable devices: " + (", ".join(map(t, report.unreachable_devices)) or "none")
    )
    lines.append(f"review: {len(report.review)}")
    for item in report.review:
        lines.append(f"  {t(item.action_id)} ({item.status}): {t(_reasons(item))}")
    if report.resumed or report.resume_errors:
        lines.append(f"resumed: {len(report.resumed)}")
        for done in report.resumed:
            moved = done.before if done.before == done.after else f"{done.before} -> {done.after}"
            lines.append(f"  {t(done.action_id)} on {t(done.device)}: {moved}; {t(done.note)}")
        for error in report.resume_errors:
            lines.append(f"  not resumed: {t(error)}")
    lines.append(f"not sent: {len(report.unsent)}")
    for unsent in report.unsent:
        where = f" on {t(unsent.device)}" if unsent.device else ""
        ready = f"; phone not ready: {t(unsent.not_ready)}" if unsent.not_ready else ""
        lines.append(
            f"  {t(unsent.action_id)} ({unsent.status}){where}, idle since"
            f" {format_time(unsent.idle_since)}{ready}"
        )
    if report.needs_person:
        lines.append("NEEDS A PERSON: " + t("; ".join(report.attention)))
    else:
        lines.append("nothing needs a person")
    return lines


def _reasons(item: ActionLine) -> str:
    """Review reasons, then superseded ones, or ``-``."""
    return ", ".join([*item.reasons, *(f"{r} (superseded)" for r in item.superseded)]) or "-"


def report_markdown(report: NightlyReport) -> str:
    """The report as a Markdown document, for the archive (no numbers, no bodies). Ids are
    whole; every value is literal text (``md_text``: cleaned, Markdown syntax escaped)."""
    verdict = (
        "**Needs a person:** " + md_text("; ".join(report.attention))
        if report.needs_person
        else "Nothing needs a person."
    )
    lines = [
        f"# starebrain nightly report {report.generated_at.date().isoformat()}",
        "",
        f"- generated: {md_code(format_time(report.generated_at))}",
        f"- ledger: {md_code(report.ledger)}",
        f"- duration: {report.duration_s:.1f}s",
        f"- exit status: {report.exit_code}",
        "",
        verdict,
        "",
        "## Devices",
        "",
    ]
    lines += md_table(
        [
            "device",
            "reachable",
            "mode",
            "round trips",
            "changes",
            "duplicates",
            "in flight",
            "error",
        ],
        [
            [
                device.device,
                "yes" if device.reachable else "NO",
                device.mode or "-",
                str(device.round_trips),
                str(len(device.changes)),
                str(device.duplicates_recorded),
                str(device.in_flight_after),
                device.error or "-",
            ]
            for device in report.devices
        ],
    )
    changes = [(device.device, change) for device in report.devices for change in device.changes]
    lines += ["## Changes in this pass", ""]
    lines += md_table(
        ["device", "action", "dispatch id", "event", "from", "to"],
        [
            [device, c.action_id, c.dispatch_id, c.event, c.from_status, c.to_status]
            for device, c in changes
        ],
    )
    lines += ["## Actions by status", ""]
    lines += md_table(
        ["status", "actions"],
        [[status, str(count)] for status, count in report.status_counts.items()],
    )
    lines += ["## Unresolved attempts by age", ""]
    lines += md_table(
        ["age", "attempts"],
        [[_BUCKET_LABELS[key], str(count)] for key, count in report.unresolved_by_age.items()],
    )
    lines += md_table(
        ["action", "dispatch id", "device", "status", "dispatched", "age", "review", "last error"],
        [
            [
                a.action_id,
                a.dispatch_id,
                a.device,
                a.status,
                format_time(a.dispatched_at),
                age(timedelta(seconds=a.age_seconds)),
                a.review_reason or "-",
                a.last_error or "-",
            ]
            for a in report.unresolved
        ],
    )
    action_columns = ["action", "status", "reasons", "attempts", "duplicates", "device"]

    def action_rows(items: Sequence[ActionLine]) -> list[list[str]]:
        return [
            [
                item.action_id,
                item.status,
                _reasons(item),
                f"{item.attempts}/{item.maximum_attempts}",
                str(item.duplicates),
                item.device or "-",
            ]
            for item in items
        ]

    lines += ["## Mismatches", "", *md_table(action_columns, action_rows(report.mismatches))]
    lines += [
        "## Duplicates seen on phones",
        "",
        f"{report.duplicates_total} provider row(s) ever recorded as duplicates; open ones below.",
        "",
    ]
    lines += md_table(
        ["action", "dispatch id", "device", "provider row", "seen"],
        [[d.action_id, d.dispatch_id, d.device, d.row_text, d.seen_at] for d in report.duplicates],
    )
    lines += ["## Budget exhausted", ""]
    lines += md_table(action_columns, action_rows(report.budget_exhausted))
    lines += ["## Unreachable devices", ""]
    lines += [
        f"- {md_text(device, block_start=True)}" for device in report.unreachable_devices
    ] or ["_none_"]
    lines += ["", "## For review", ""]
    lines += md_table(action_columns, action_rows(report.review))
    lines += ["## Not sent (nothing is sending them)", ""]
    lines += md_table(
        ["action", "status", "device", "idle since", "attempts", "phone not ready"],
        [
            [
                u.action_id,
                u.status,
                u.device or "-",
                format_time(u.idle_since),
                f"{u.attempts}/{u.maximum_attempts}",
                u.not_ready or "-",
            ]
            for u in report.unsent
        ],
    )
    if report.resumed or report.resume_errors:
        lines += ["## Resumed", ""]
        lines += md_table(
            ["device", "action", "before", "after", "attempts started", "note"],
            [
                [r.device, r.action_id, r.before, r.after, str(r.attempts_started), r.note]
                for r in report.resumed
            ],
        )
        lines += [f"- {md_text(error, block_start=True)}" for error in report.resume_errors]
    return "\n".join(lines).rstrip() + "\n"


# --------------------------------------------------------------------------- archive


@attrs.frozen(kw_only=True)
class ArchiveResult:
    """Where the Markdown copy went and whether it was committed."""

    path: Path
    #: the commit id, when the archive is a git repository and the commit succeeded
    commit: str | None = None
    #: why it was not committed, when it should have been
    error: str | None = None
    #: True when the directory is inside a git work tree
    in_git: bool = False


def archive_path(directory: Path, report: NightlyReport) -> Path:
    """``DIR/YYYY-MM-DD.md`` (UTC date); a later run the same day gets ``-2``, ``-3``…, so no
    report is ever overwritten."""
    day = report.generated_at.date().isoformat()
    candidate = directory / f"{day}.md"
    number = 2
    while candidate.exists():
        candidate = directory / f"{day}-{number}.md"
        number += 1
    return candidate


def archive_report(directory: Path, report: NightlyReport) -> ArchiveResult:
    """Write the Markdown copy into ``directory``; commit it when that is a git repository."""
    directory.mkdir(parents=True, exist_ok=True)
    path = archive_path(directory, report)
    path.write_text(report_markdown(report), encoding="utf-8")
    git = shutil.which("git")
    if git is None:
        return ArchiveResult(path=path)
    probe = _git(git, directory, "rev-parse", "--is-inside-work-tree")
    if probe.returncode != 0 or probe.stdout.strip() != "true":
        return ArchiveResult(path=path)
    message = f"nightly report {path.stem}: " + (
        clean_text("; ".join(report.attention)) if report.needs_person else "nothing needs a person"
    )
    for args in (("add", "--", path.name), ("commit", "--quiet", "-m", message, "--", path.name)):
        done = _git(git, directory, *args)
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip().splitlines()
            return ArchiveResult(
                path=path,
                in_git=True,
                error=f"git {args[0]} failed: {detail[-1] if detail else done.returncode}",
            )
    head = _git(git, directory, "rev-parse", "HEAD")
    return ArchiveResult(path=path, in_git=True, commit=head.stdout.strip() or None)


def _git(git: str, directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [
        git,
        "-C",
        str(directory),
        "-c",
        f"user.name={GIT_AUTHOR_NAME}",
        "-c",
        f"user.email={GIT_AUTHOR_EMAIL}",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)
