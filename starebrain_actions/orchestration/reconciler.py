"""Reconcile in-flight attempts against what phones show: reads only, never a send.

A pass reads each device once (one windowed read, paged by ``_id``: one round trip per few
thousand rows above the lowest watermark watched), attributes new outgoing rows to attempts,
and applies every resulting transition of the pass in one transaction; the incoming rows the
same read carried are then kept as replies (``Ledger.record_replies``). The attribution itself
(:func:`~starebrain_actions.orchestration.attribution.plan_device`, whose docstring gives its
rules) is pure; so is where a watched attempt's rows can lie
(:mod:`starebrain_actions.orchestration.watched`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

import attrs

from starebrain_actions._logging import get_logger
from starebrain_actions.core import transitions as _core
from starebrain_actions.core.exceptions import LedgerError, LinkDown, PassOutdated, PhoneError
from starebrain_actions.core.model import (
    AcceptanceState,
    Action,
    ActionRecord,
    DeliveryState,
    Event,
    ProviderKind,
    Status,
    Transition,
    require_aware,
)
from starebrain_actions.core.ports import Phone, PhoneRead
from starebrain_actions.ledger.devices import IN_FLIGHT_PAGE
from starebrain_actions.ledger.store import Ledger
from starebrain_actions.orchestration.attribution import MatchKeys, plan_device
from starebrain_actions.orchestration.watched import (
    Watched,
    awaits_fence,
    keys_may_come,
    mms_window,
    read_anchor,
    reanchor_before,
)

_log = get_logger("starebrain.reconciler")

#: How old an unresolved attempt must be before a pass voids its fence: longer than a live
#: sender's command can take (the default command timeout, 20 s, and a margin). The fence
#: makes a void safe at any age (the send script and the pass cannot both claim it); waiting
#: only spares a live sender a wasted attempt, and two live senders from voiding each other.
VOID_AFTER = timedelta(seconds=25)


def void_after_for(command_timeout_s: float) -> timedelta:
    """How old another sender's unresolved attempt must be before a pass voids its fence:
    longer than its send command can take (its timeout, plus 5 s), at least ``VOID_AFTER``."""
    return max(VOID_AFTER, timedelta(seconds=command_timeout_s + 5))


#: How long after confirmation extra copies of a message are watched for as duplicates.
DUPLICATE_WATCH = timedelta(hours=24)


@attrs.frozen(kw_only=True)
class Change:
    """One state change a pass made, for people and reports."""

    action_id: str
    dispatch_id: str
    event: Event
    from_status: Status
    to_status: Status


@attrs.frozen(kw_only=True)
class DeviceReport:
    """What one pass did on one device."""

    device: str
    #: False when the device's messages could not be read this pass (nothing changed but the
    #: error, and what the fences of its attempts proved where the phone answered)
    reachable: bool
    error: str | None = None
    #: "shell" or "root", when read
    mode: str | None = None
    round_trips: int = 0
    changes: tuple[Change, ...] = ()
    duplicates_recorded: int = 0
    #: attempts on the device still unresolved after the pass
    in_flight: int = 0
    #: fence names of long-resolved attempts removed from the phone this pass
    fences_removed: int = 0
    #: replies the pass's read saw and recorded (``Ledger.record_replies``)
    replies_recorded: int = 0


@attrs.frozen(kw_only=True)
class ReconcilePass:
    """The result of one reconcile pass over several devices."""

    started_at: datetime
    finished_at: datetime
    devices: tuple[DeviceReport, ...]
    #: actions whose expiry the pass recorded (deadline passed, nothing sent: EXPIRED)
    expired: tuple[str, ...] = ()

    @property
    def changes(self) -> tuple[Change, ...]:
        """Every change, all devices."""
        return tuple(change for report in self.devices for change in report.changes)

    @property
    def unreachable(self) -> tuple[DeviceReport, ...]:
        """Devices that could not be read."""
        return tuple(report for report in self.devices if not report.reachable)


async def _fence_transitions(
    phone: Phone,
    watched: Sequence[Watched],
    planned: Sequence[Transition],
    clock: Callable[[], datetime],
    void_after: timedelta,
    void_now: Collection[str],
) -> list[Transition]:
    """Void the fences of the unresolved attempts this read did not settle; what each proves
    (stamped by ``clock`` once the phone answered)."""
    now = clock()
    settled = {transition.before.dispatch_id for transition in planned}
    candidates = [
        item.record
        for item in watched
        if _core.can_void(item.record)
        and item.record.dispatch_id not in settled
        and _voidable(item.record, now, void_after, void_now)
    ]
    return await _check_fences(phone, candidates, clock, claim=True)


#: Fences voided or read in one command: about 400 bytes of script each, so a command stays
#: far below one ``execve`` argument's limit (128 KiB) and a phone's few seconds.
FENCES_PER_COMMAND: Final = 100


async def _check_fences(
    phone: Phone, records: Sequence[ActionRecord], clock: Callable[[], datetime], *, claim: bool
) -> list[Transition]:
    """Void (``claim``) or peek at the fences of ``records`` in one round trip; what each
    proves, stamped by ``clock`` once the phone answered. A peek that finds a script claimed
    but without its keys recorded proves nothing yet: its sender may be pressing the keys
    right now, and recording the fence now would leave the window open for good (a void,
    later, sees it whole)."""
    if not records:
        return []
    pairs = [(record.dispatch_id, str(record.evidence["fence_epoch"])) for record in records]
    checks: list[Any] = []
    # a bounded number of fences per command (a backlog's thousands in one would outgrow
    # what one command may carry and what the phone does within the command timeout); each
    # command's answers stand on their own, so a failing one keeps what the ones before proved
    # (a void that did succeed unseen is found again, idempotently, by a later pass)
    for start in range(0, len(pairs), FENCES_PER_COMMAND):
        chunk = pairs[start : start + FENCES_PER_COMMAND]
        try:
            checks += await (phone.void(chunk) if claim else phone.peek(chunk))
        except PhoneError as exc:
            _log.warning("fence_check_failed", device=phone.device, error=str(exc))
            break
    if not checks:
        return []
    now = clock()
    by_id = {record.dispatch_id: record for record in records}
    transitions = []
    for check in checks:
        record = by_id.get(check.dispatch_id)
        if record is None:
            continue
        if (
            not claim
            and check.state == "claimed"
            and "keys" not in {name for name, _ms in check.stages}
        ):
            continue
        transition = _core.settle_by_fence(
            record, check.state, check.stages, now=now, voided_at=check.voided_at
        )
        if transition is not None:
            transitions.append(transition)
    return transitions


async def _fence_first(
    phone: Phone,
    watched: Sequence[Watched],
    clock: Callable[[], datetime],
    void_after: timedelta | None,
    void_now: Collection[str],
) -> list[Transition]:
    """The fences of the attempts that await one (:func:`awaits_fence`), read before the
    pass attributes anything: voided where this pass may void (old enough, or its own sender
    gave up on it), else only peeked at (its sender may be running): a claimed fence whose
    script recorded its keys bounds the window; anything less waits for a later pass, whose
    void sees it whole (a script cut off before recording its keys leaves the window open:
    see :func:`plan_device`)."""
    now = clock()
    awaiting = [
        item.record
        for item in watched
        if item.record.delivery is DeliveryState.PENDING
        and awaits_fence(item.record, now)
        and _core.can_void(item.record)
    ]
    # a script found past ``go`` without its keys: read again (only the marker can change)
    again = [item.record for item in watched if keys_may_come(item.record, now)]
    if not awaiting and not again:
        return []
    voidable = [r for r in awaiting if _voidable(r, now, void_after, void_now)]
    peeked = [r for r in awaiting if r not in voidable] + again
    return [
        *await _check_fences(phone, voidable, clock, claim=True),
        *await _check_fences(phone, peeked, clock, claim=False),
    ]


def _voidable(
    record: ActionRecord, now: datetime, void_after: timedelta | None, void_now: Collection[str]
) -> bool:
    """May this pass void the attempt's fence: old enough, or its own sender gave up on it."""
    return void_after is not None and (
        record.dispatch_id in void_now or now - record.dispatched_at >= void_after
    )


def _status(record: ActionRecord, action: Action, now: datetime) -> Status:
    return _core.derive_status(record, now, action.policy.grace_window)


async def _watched(
    ledger: Ledger, device: str, now: datetime, duplicate_watch: timedelta = DUPLICATE_WATCH
) -> list[Watched]:
    # the attempts and their actions in one call (one hop to the ledger's connection)
    records, actions = await ledger.watched_attempts(device, now - duplicate_watch)
    return await _watch(ledger, device, records, actions)


async def _watch(
    ledger: Ledger,
    device: str,
    records: Sequence[ActionRecord],
    actions: Mapping[str, Action] | None = None,
) -> list[Watched]:
    """``records`` of ``device`` as a pass looks at them: each with its action (read unless
    given) and its floor (its watermark, else the row the ledger knew on the device before
    its dispatch)."""
    if actions is None:
        actions = await ledger.actions(record.action_id for record in records)
    watched = []
    for record in records:
        action = actions[record.action_id]
        if record.watermark_id is not None:
            watched.append(Watched(record=record, action=action, floor_id=record.watermark_id))
            continue
        floor, floor_date = await ledger.device_floor_row(device, record.dispatched_at)
        watched.append(
            Watched(record=record, action=action, floor_id=floor, floor_date_ms=floor_date)
        )
    return watched


#: How far before the oldest unresolved attempt on a device an attempt a person ruled not
#: sent is still looked at, for the row out of sight it may have left (``_ruled_not_sent``).
RULED_LOOKBACK: Final = timedelta(days=1)


def _ruled_since(watched: Sequence[Watched]) -> datetime | None:
    """Since when the attempts a person ruled not sent are looked at: shortly before the
    unresolved ones (``RULED_LOOKBACK``), for attribution only: each may account for one row
    the read cannot see (``attribution._earlier_unseen``). None while no attempt is
    unresolved (no query)."""
    pending = [item for item in watched if item.record.delivery is DeliveryState.PENDING]
    if not pending:
        return None
    return min(item.record.dispatched_at for item in pending) - RULED_LOOKBACK


async def reconcile_device(
    ledger: Ledger,
    phone: Phone,
    *,
    now: datetime | None = None,
    duplicate_watch: timedelta = DUPLICATE_WATCH,
    void_after: timedelta | None = VOID_AFTER,
    void_now: Collection[str] = (),
) -> DeviceReport:
    """One pass on one connected phone: one windowed read, one transaction.

    Unresolved attempts the read does not settle, dispatched at least ``void_after`` ago
    and created with a fence, are voided on the phone (one more round trip for all of
    them): an attempt whose send script never ran becomes FAILED, safe to retry; one whose
    script ran keeps its stages as evidence. ``None``: no fence is touched. ``void_now``:
    dispatch ids whose sender knows its command is over (it timed out), voided at any age.

    The read covers the unresolved attempts and the attempts confirmed within
    ``duplicate_watch`` (to catch copies the phone sent later); a sender polling its own
    attempt passes ``timedelta(0)`` so that its reads stay as small as its own window.
    """
    reason = ""
    for _ in range(_PASS_TRIES):
        try:
            # one pass per device at a time across hosts (PostgreSQL: an advisory lock; on
            # SQLite the snapshot check of apply_pass, under its one writer, does the work)
            async with ledger.exclusive(f"reconcile:{phone.device}"):
                return await _reconcile_device_once(
                    ledger, phone, now, duplicate_watch, void_after, void_now
                )
        except PassOutdated as exc:
            reason = str(exc)
            _log.info("reconcile_pass_redone", device=phone.device, reason=reason)
    # attempts kept starting on the phone: nothing was written; the next pass settles it
    still = await ledger.count_in_flight(phone.device)
    return DeviceReport(
        device=phone.device, reachable=True, error=f"pass not applied: {reason}", in_flight=still
    )


#: From how many watched attempts a pass plans on a worker thread rather than on the event
#: loop (a few hundred take milliseconds; 25,000 took seconds).
PLAN_OFF_LOOP_AT: Final = 500

#: How many times a pass is tried when attempts keep starting on the device meanwhile.
_PASS_TRIES = 3


async def _reconcile_device_once(
    ledger: Ledger,
    phone: Phone,
    now: datetime | None,
    duplicate_watch: timedelta,
    void_after: timedelta | None,
    void_now: Collection[str],
) -> DeviceReport:
    """One try of :func:`reconcile_device`: the read, the fences that await one, the plan,
    the voids of what the read did not settle, then one transaction (``PassOutdated`` when an
    attempt started on the device since the attempts were listed)."""
    # Every transition is stamped when it is decided, after the read that justifies it (never
    # before its evidence: a confirmation dated before the row it cites). A caller's ``now``
    # fixes every stamp (tests, a replayed pass).
    clock: Callable[[], datetime] = (
        (lambda: require_aware("now", now)) if now is not None else ledger.now
    )
    started = clock()
    listed_at = ledger.now()
    watched = await _watched(ledger, phone.device, started, duplicate_watch)
    if not watched:
        return DeviceReport(device=phone.device, reachable=True, in_flight=0)
    anchor_id, anchor_date = read_anchor(watched)
    mms_after_id, mms_since_ms = mms_window(watched)
    try:
        read = await _read_device(
            phone, watched, (anchor_id, anchor_date), (mms_after_id, mms_since_ms)
        )
    except PhoneError as exc:
        # the phone answers but its messages cannot be read (locked after a reboot, the
        # provider failing): its fences can still prove what they prove, on the phone itself
        voided = (
            []
            if isinstance(exc, LinkDown) or void_after is None
            else await _fence_transitions(phone, watched, (), clock, void_after, void_now)
        )
        return await _unreachable(ledger, phone.device, watched, str(exc), clock(), voided)
    # only the rows this read saw can be taken: claims above its highest row are not loaded
    # (a phone that lost its rows, a fleet back from an outage: every confirmed attempt of
    # the device above a low anchor would be)
    highest = max(
        (m.provider_object_id for m in read.messages if m.kind is ProviderKind.SMS), default=None
    )
    # attempts whose round trip never ended: their fence first, so that this very pass can
    # attribute their rows inside the window its stage markers give (or fail them if voided)
    fenced = await _fence_first(phone, watched, clock, void_after, void_now)
    watched = _as_fenced(watched, fenced)
    # the rows already claimed and the attempts ruled not sent, in one call (one hop)
    claimed, claimed_mms, ruled_records = await ledger.pass_claims(
        phone.device,
        min(anchor_id, read.after_id),
        highest,
        mms_after_id,
        _ruled_since(watched),
    )
    ruled = await _watch(ledger, phone.device, ruled_records) if ruled_records else []
    # the plan is decided now, after the read and the fences it rests on
    when = clock()
    planning = functools.partial(
        plan_device,
        [*watched, *ruled],
        read,
        claimed,
        phone.judge,
        when,
        claimed_mms=claimed_mms,
        keys=phone if isinstance(phone, MatchKeys) else None,
    )
    # pure work that grows with the backlog (seconds for tens of thousands of attempts): on
    # a worker thread, so that the event loop goes on serving the other phones' commands,
    # whose time-outs would otherwise run while it is blocked; a sender's few attempts are
    # planned in place (a thread hop per poll would cost every send)
    plan = (
        await asyncio.to_thread(planning)
        if len(watched) + len(ruled) >= PLAN_OFF_LOOP_AT
        else planning()
    )
    transitions = [*fenced, *plan.transitions]
    if void_after is not None:
        transitions += await _fence_transitions(
            phone, watched, transitions, clock, void_after, void_now
        )
    known = {item.record.dispatch_id for item in watched}
    results, added = await ledger.apply_pass(
        transitions, plan.duplicates, now=when, snapshot=(phone.device, listed_at, known)
    )
    changes = _changes(watched, transitions, results, when)
    # the replies the same read saw (no round trip of their own), once the pass's own
    # changes are in: a reply is linked to what was sent before it
    replies = await ledger.record_replies(phone.device, read.incoming, now=now)
    still = await ledger.count_in_flight(phone.device)
    _log.info(
        "device_reconciled",
        device=phone.device,
        changes=len(changes),
        replies=len(replies),
        duplicates=added,
        complete=read.complete,
        mode=read.mode,
    )
    return DeviceReport(
        device=phone.device,
        reachable=True,
        mode=read.mode,
        round_trips=read.round_trips,
        changes=tuple(changes),
        duplicates_recorded=added,
        in_flight=still,
        replies_recorded=len(replies),
    )


def _as_fenced(watched: Sequence[Watched], fenced: Sequence[Transition]) -> list[Watched]:
    """The watched attempts with the records the fences read first left them in."""
    after_fence = {t.after.dispatch_id: t.after for t in fenced}
    return [
        attrs.evolve(item, record=after_fence.get(item.record.dispatch_id, item.record))
        for item in watched
    ]


async def _read_device(
    phone: Phone,
    watched: Sequence[Watched],
    anchor: tuple[int, int | None],
    mms_window: tuple[int | None, int | None],
) -> PhoneRead:
    """The pass's one windowed read: the rows above ``anchor`` (the lowest floor watched, and
    its date) and the MMS rows of ``mms_window`` (:func:`mms_window`).

    Raises:
        PhoneError: the phone could not be read.
    """
    anchor_id, anchor_date = anchor
    mms_after_id, mms_since_ms = mms_window
    return await phone.read_outgoing(
        after_id=anchor_id,
        anchor_date_ms=anchor_date,
        mms_after_id=mms_after_id,
        mms_since_ms=mms_since_ms,
        # the rows there are now (ids and dates) matter to an attempt not yet judged: rows
        # out of sight (see _doubt), a floor whose row is gone (see effective_floor)
        find_unseen=any(
            item.record.acceptance is AcceptanceState.PENDING
            and item.record.delivery is not DeliveryState.FAILED
            for item in watched
        ),
        reanchor_before_ms=reanchor_before(watched),
    )


def _changes(
    watched: Sequence[Watched],
    transitions: Sequence[Transition],
    results: Sequence[ActionRecord | LedgerError],
    when: datetime,
) -> list[Change]:
    """The state changes the pass made: each transition the ledger applied, with the derived
    status before and after (one it refused, ``LedgerError``, changed nothing)."""
    actions = {w.record.action_id: w.action for w in watched}
    changes = []
    for transition, result in zip(transitions, results, strict=True):
        if isinstance(result, LedgerError):
            continue
        action = actions[transition.before.action_id]
        before, after = _status(transition.before, action, when), _status(result, action, when)
        changes.append(
            Change(
                action_id=result.action_id,
                dispatch_id=result.dispatch_id,
                event=transition.event,
                from_status=before,
                to_status=after,
            )
        )
    return changes


async def _unreachable(
    ledger: Ledger,
    device: str,
    watched: Sequence[Watched],
    error: str,
    now: datetime,
    fenced: Sequence[Transition] = (),
) -> DeviceReport:
    """A device whose messages cannot be read changes nothing but the error recorded on its
    attempts, and what their fences proved (``fenced``: read on the phone all the same)."""
    settled = {transition.before.dispatch_id for transition in fenced}
    notes = _error_notes(
        (w.record for w in watched if w.record.dispatch_id not in settled), error, now
    )
    transitions = [*fenced, *notes]
    changes: list[Change] = []
    if transitions:
        results, _added = await ledger.apply_pass(transitions, now=now)
        changes = _changes(watched, fenced, results[: len(fenced)], now)
    _log.warning("device_unreadable", device=device, error=error)
    in_flight = sum(
        1
        for w in watched
        if w.record.delivery is DeliveryState.PENDING and w.record.dispatch_id not in settled
    )
    return DeviceReport(
        device=device, reachable=False, error=error, in_flight=in_flight, changes=tuple(changes)
    )


def _error_notes(records: Iterable[ActionRecord], error: str, now: datetime) -> list[Transition]:
    """The error noted on each unresolved attempt of ``records`` that does not say it yet."""
    text = f"reconcile read failed: {error}"
    return [
        _core.note_error(record, text, now=now)
        for record in records
        if record.delivery is DeliveryState.PENDING and record.last_error != text
    ]


async def _not_connected(
    ledger: Ledger, device: str, error: str, now: datetime, *, page_size: int
) -> DeviceReport:
    """A device that could not even be connected to: as :func:`_unreachable`, its unresolved
    attempts read and noted a page at a time (``page_size``), so that what is held stays
    bounded however many attempts a phone left in flight (a fleet back from an outage).
    Each page's notes are one transaction."""
    in_flight = 0
    async for page in ledger.iter_in_flight(device, page_size=page_size):
        in_flight += len(page)
        notes = _error_notes(page, error, now)
        if notes:
            await ledger.apply_pass(notes, now=now)
    _log.warning("device_unreadable", device=device, error=error)
    return DeviceReport(device=device, reachable=False, error=error, in_flight=in_flight)


#: How long the fence names of a resolved attempt stay on the phone before a pass removes them.
FENCE_RETENTION = timedelta(days=7)


async def clean_fences(
    ledger: Ledger, phone: Phone, *, now: datetime, retention: timedelta = FENCE_RETENTION
) -> int:
    """Remove from the phone the fence names of attempts resolved before ``now - retention``
    (one round trip to list them, then one per ``FENCES_PER_COMMAND`` names); names the
    ledger does not know are left alone. Returns how
    many attempts' names were removed; a phone that cannot be asked removes nothing."""
    try:
        names = await phone.fence_names()
    except PhoneError:
        return 0
    done: list[str] = []
    for record in (await ledger.attempts_by_id(names)).values():
        if record.device != phone.device or not record.is_final:
            continue
        ended = record.accepted_at or record.rejected_at or record.failed_at
        if ended is not None and ended <= now - retention:
            done.append(record.dispatch_id)
    removed = 0
    # a bounded number of names per command, as for the voids (``FENCES_PER_COMMAND``)
    for start in range(0, len(done), FENCES_PER_COMMAND):
        chunk = done[start : start + FENCES_PER_COMMAND]
        try:
            await phone.remove_fences(chunk)
        except PhoneError:
            break
        removed += len(chunk)
    return removed


PhoneOpener = Callable[[str], Any]

#: How many devices a ``reconcile_pending`` pass reads at once (each holds its phone's
#: watched attempts while it runs; the others wait, connected).
PASSES_AT_ONCE = 16
#: How many unresolved attempts the passes running at once may hold between them: a pass
#: over a phone with more waits until it can run alone. Four phones back from an outage with
#: 25,000 attempts each held about 100 MB more each at once (issue 37); one at a time, the
#: peak is one phone's, and the time the same (the work is the process's CPU either way).
WATCHED_AT_ONCE = 30_000


class _AttemptBudget:
    """A semaphore counted in attempts: a pass holds as many units as its phone has
    unresolved attempts (at most the whole budget) while it runs."""

    def __init__(self, total: int) -> None:
        self._total = total
        self._free = total
        self._changed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def hold(self, attempts: int) -> AsyncIterator[None]:
        units = min(max(attempts, 1), self._total)
        async with self._changed:
            await self._changed.wait_for(lambda: self._free >= units)
            self._free -= units
        try:
            yield
        finally:
            async with self._changed:
                self._free += units
                self._changed.notify_all()


async def bind_or_refuse(ledger: Ledger, phone: Any, key: str) -> None:
    """Bind ``phone`` (an ``AndroidPhone`` just connected at the last address of ``key``) to
    the ledger's phone ``key``, or refuse it: another phone answering there now is never read
    for ``key``'s attempts (their rows are on the phone they were sent from).

    Raises:
        PhoneUnavailable: the address now answers as another phone.
    """
    from starebrain_actions.phone.android import PhoneUnavailable

    binding = await phone.bind_in(ledger)
    if binding.key != key:
        _known, identity = await ledger.phone_identity(key)
        if identity is not None:
            raise PhoneUnavailable(
                f"{phone.address} now answers as another phone ({binding.identity}, known as"
                f" {binding.key}), not as {key} ({identity}): {key}'s attempts stay as they"
                " are until that phone answers again"
            )
        # a legacy key (named by an address before phones had identities) whose phone is
        # already known by another key: read as before, by its address
    phone.bind(key)


async def reconcile_pending(
    ledger: Ledger,
    devices: Sequence[str] | None = None,
    *,
    open_phone: PhoneOpener | None = None,
    key_path: str | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    now: datetime | None = None,
    read_as_system: bool | None = None,
    fence_retention: timedelta | None = None,
    in_flight_page: int = IN_FLIGHT_PAGE,
    watched_at_once: int = WATCHED_AT_ONCE,
) -> ReconcilePass:
    """One reconcile pass over ``devices`` (default: every device with in-flight attempts),
    then the expiry of every action whose deadline passed with nothing sent
    (``Ledger.expire_due``).

    Each device is connected, read once and closed; devices are read concurrently. A device
    that cannot be reached is reported (``reachable=False``) and changes nothing but the
    error recorded on its attempts. ``open_phone(serial)`` returns a connected ``Phone``
    (default: the Android bridge over ADB, with ``key_path`` and ``read_as_system``).
    ``fence_retention``: also remove the fence names of attempts resolved longer ago than
    this (the nightly job passes ``FENCE_RETENTION``). ``in_flight_page``: the attempts of a
    device that cannot be connected to are read and noted this many at a time.
    ``watched_at_once``: the passes running at once hold at most this many unresolved
    attempts between them (a phone with more is read alone), so that the peak memory is
    one large backlog's, not every phone's.
    """
    started = require_aware("now", now) if now is not None else ledger.now()
    given = devices if devices is not None else await ledger.devices_in_flight()
    # a device may be named by one of its addresses: the phone's key is what its attempts hold
    names = list(dict.fromkeys([await ledger.phone_key_for(name) for name in given]))
    if open_phone is None:
        from starebrain_actions.phone.android import AndroidPhone, PhoneUnavailable

        async def default_open(key: str) -> Phone:
            address = await ledger.phone_address(key)
            phone = await AndroidPhone.connect(
                address, key_path=key_path, read_as_system=read_as_system
            )
            try:
                await bind_or_refuse(ledger, phone, key)
            except PhoneUnavailable:
                await phone.close()
                raise
            return phone

        open_phone = default_open
    done = 0
    # what is held stays bounded however many phones come back with a backlog: the phones
    # that could not be connected to are noted one at a time (ledger work only, a page at a
    # time, which the one connection serializes anyway), and at most ``PASSES_AT_ONCE``
    # passes hold their phone's watched attempts at once (phones are still connected to
    # concurrently)
    noting = asyncio.Semaphore(1)
    passes = asyncio.Semaphore(PASSES_AT_ONCE)
    budget = _AttemptBudget(watched_at_once)

    async def one(serial: str) -> DeviceReport:
        nonlocal done
        try:
            try:
                phone: Phone = await open_phone(serial)
            except PhoneError as exc:
                async with noting:
                    return await _not_connected(
                        ledger, serial, str(exc), started, page_size=in_flight_page
                    )
            try:
                held = await ledger.count_in_flight(phone.device)
                async with passes, budget.hold(held):
                    report = await reconcile_device(ledger, phone, now=now)
                if fence_retention is not None and report.reachable:
                    removed = await clean_fences(
                        ledger, phone, now=now or ledger.now(), retention=fence_retention
                    )
                    report = attrs.evolve(report, fences_removed=removed)
                return report
            finally:
                await phone.close()
        finally:
            done += 1
            if progress is not None:
                progress(serial, done, len(names))

    reports = await asyncio.gather(*(one(serial) for serial in names))
    # what the reads settled may leave an action past its deadline with nothing sent
    expired = await ledger.expire_due(now=now)
    finished = ledger.now() if now is None else started
    return ReconcilePass(
        started_at=started, finished_at=finished, devices=tuple(reports), expired=tuple(expired)
    )
