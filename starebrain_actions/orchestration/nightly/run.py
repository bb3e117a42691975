"""The nightly run: one reconciliation pass over every busy device (and, with ``--resume``,
finishing what was started), then one snapshot of the ledger, read into the report."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import attrs

from starebrain_actions.core.model import Action, ReviewReason
from starebrain_actions.ledger.store import Ledger, LedgerTally
from starebrain_actions.orchestration.nightly.lock import NIGHTLY_LOCK, NightlyBusy
from starebrain_actions.orchestration.nightly.report import (
    ApprovalLine,
    ChangeLine,
    DeviceLine,
    DuplicateLine,
    NightlyReport,
    ReportBuilder,
    ResumeLine,
    UnsentLine,
    WebhookLine,
    approval_line,
)
from starebrain_actions.render.values import spent_attempts

if TYPE_CHECKING:
    from starebrain_actions.orchestration.agent import ReconcilePass

#: An action PLANNED this long, or FAILED with attempts left and idle this long since its
#: latest attempt ended, is one nothing is sending: a person's attention item, or (with
#: ``--resume``) sent. Not one the policy gate holds for approval (listed apart, for a
#: person's ruling) or denied (nothing is ever sent for it): ``resume`` sends neither.
UNSENT_AFTER: Final = timedelta(hours=1)

Progress = Callable[[str, int, int], None]


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
    share_phone: bool = False,
) -> NightlyReport:
    """Reconcile every device with attempts in flight (plus ``devices``), then build the report.

    ``resume``: then finish what was started (``SmsAgent.resume``, each action waiting up to
    ``resume_wait_s`` for its proof) on ``devices`` and on the phones of the actions that
    FAILED with attempts left; PLANNED actions go to ``devices`` only. A phone whose fence
    names another ledger with attempts open is not resumed (one of the errors) unless
    ``share_phone``. Without it, actions
    nothing is sending past ``unsent_after`` are attention items. Actions the policy gate
    holds for a person's approval are attention items whatever their age, each with the
    commands that rule on it; denied ones are settled (nothing is ever sent for them).

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
    started = clock()
    async with contextlib.AsyncExitStack() as stack:
        ledger = await stack.enter_async_context(
            Ledger.open(ledger_path, read_only=dry_run, create=False)
        )
        if not dry_run:
            await _hold_nightly_lock(stack, ledger)
        busy = [] if dry_run else await ledger.devices_in_flight()
        targets = [] if dry_run else list(dict.fromkeys([*busy, *devices]))
        result, failure = await _reconcile(
            ledger, targets, key_path=key_path, progress=progress, read_as_system=read_as_system
        )
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
                share_phone=share_phone,
            )
        hooks = await _webhooks(ledger, deliver=not dry_run)
        read = await _read_ledger(ledger, ledger.now(), unsent_after)
    report = read.builder.report(
        ledger_path=ledger.path,
        duration_s=clock() - started,
        devices=_device_lines(targets, result, failure, read.in_flight_per_device),
        duplicates=read.duplicates,
        tally=read.tally,
        awaiting_approval=read.awaiting_approval,
    )
    report = _with_unsent_and_resumed(report, read.unsent, unsent_after, resumed, resume_errors)
    return _with_webhooks(report, hooks)


#: Seconds the nightly run spends delivering webhooks at most.
WEBHOOKS_S: Final = 120.0


@attrs.frozen(kw_only=True)
class _Webhooks:
    delivered: int = 0
    failed: int = 0
    off: tuple[WebhookLine, ...] = ()
    error: str | None = None


async def _webhooks(ledger: Ledger, *, deliver: bool) -> _Webhooks:
    """Deliver the webhooks due now (``deliver``; within ``WEBHOOKS_S``), then read the
    endpoints turned off. A failure is reported, never fatal."""
    import asyncio

    from starebrain_actions.orchestration.webhooks import DeliveryPass, WebhookDeliverer

    done = DeliveryPass()
    error = None
    if deliver:
        try:
            async with asyncio.timeout(WEBHOOKS_S), WebhookDeliverer(ledger) as sender:
                done = await sender.drain()
        except TimeoutError:
            error = f"webhooks: still delivering after {WEBHOOKS_S:.0f} s; the rest waits"
        except Exception as exc:
            error = f"webhooks: {type(exc).__name__}: {exc}"
    off = []
    for endpoint in await ledger.webhooks():
        if endpoint.enabled:
            continue
        off.append(
            WebhookLine(
                endpoint_id=endpoint.endpoint_id,
                url=endpoint.url,
                disabled_at=endpoint.disabled_at,
                reason=endpoint.disabled_reason or "-",
                pending=await ledger.webhook_pending(endpoint),
                command=f"starebrain webhook enable {endpoint.endpoint_id}",
            )
        )
    return _Webhooks(delivered=done.delivered, failed=done.failed, off=tuple(off), error=error)


def _with_webhooks(report: NightlyReport, hooks: _Webhooks) -> NightlyReport:
    """``report`` with what the webhooks did, and each endpoint turned off as an attention
    item."""
    attention = list(report.attention)
    if hooks.off:
        attention.append(
            f"{len(hooks.off)} webhook endpoint(s) turned off after their retry schedule:"
            f" `starebrain webhook list`; `starebrain webhook enable ID` turns one back on"
        )
    if hooks.error is not None:
        attention.append(hooks.error)
    return attrs.evolve(
        report,
        attention=tuple(attention),
        webhooks_delivered=hooks.delivered,
        webhooks_failed=hooks.failed,
        webhooks_off=hooks.off,
    )


async def _hold_nightly_lock(stack: contextlib.AsyncExitStack, ledger: Ledger) -> None:
    """Hold the ledger's lock ``NIGHTLY_LOCK`` until ``stack`` closes.

    Raises:
        NightlyBusy: another run holds it.
    """
    # a no-op yielding True on SQLite, where the caller holds the file lock
    held = await stack.enter_async_context(ledger.exclusive(NIGHTLY_LOCK, wait=False))
    if not held:
        raise NightlyBusy(
            f"another nightly run holds the lock {NIGHTLY_LOCK!r} of {ledger.path};"
            " leaving this run without touching anything"
        )


async def _reconcile(
    ledger: Ledger,
    targets: Sequence[str],
    *,
    key_path: Path | None,
    progress: Progress | None,
    read_as_system: bool | None,
) -> tuple[ReconcilePass | None, str | None]:
    """One reconciliation pass over ``targets`` (none: no pass), and why it failed as a
    whole, if it did: the report is written all the same."""
    from starebrain_actions.orchestration.agent import reconcile_pending
    from starebrain_actions.orchestration.reconciler import FENCE_RETENTION

    if not targets:
        return None, None
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
        return None, f"{type(exc).__name__}: {exc}"
    return result, None


@attrs.frozen(kw_only=True)
class _LedgerRead:
    """What the report reads of the ledger after the pass, in one snapshot."""

    tally: LedgerTally
    #: attempts still unresolved, per device
    in_flight_per_device: Mapping[str, int]
    #: the notable actions, added
    builder: ReportBuilder
    duplicates: Sequence[DuplicateLine]
    unsent: Sequence[UnsentLine]
    #: the actions the policy gate holds for a person's approval
    awaiting_approval: Sequence[ApprovalLine]


async def _read_ledger(ledger: Ledger, now: datetime, unsent_after: timedelta) -> _LedgerRead:
    """Read everything the report needs from the ledger."""
    # one snapshot for every read below: the counts and the lists agree with each other
    async with ledger.read_snapshot():
        tally = await ledger.ledger_tally(now=now)
        # counted per device, not loaded: a fleet back from an outage leaves a backlog
        in_flight = await ledger.in_flight_counts()
        builder = ReportBuilder(now)
        duplicates: list[DuplicateLine] = []
        # only actions with an attempt that is not a clean success are read one by one;
        # the others are SUCCEEDED with nothing to list, counted by the tally
        async for summary in ledger.iter_summaries(notable_only=True, now=now):
            builder.add(summary)
            if {ReviewReason.DUPLICATE, ReviewReason.AMBIGUOUS} & set(summary.review_reasons):
                duplicates += await _duplicate_lines(ledger, summary.action.action_id)
        unsent = await _unsent(ledger, now, unsent_after)
        # the same actions `starebrain review` lists as waiting for approval
        held = [approval_line(summary) for summary in await ledger.awaiting_approval(now=now)]
    return _LedgerRead(
        tally=tally,
        in_flight_per_device=in_flight,
        builder=builder,
        duplicates=duplicates,
        unsent=unsent,
        awaiting_approval=held,
    )


async def _duplicate_lines(ledger: Ledger, action_id: str) -> list[DuplicateLine]:
    """The provider rows recorded as duplicates of the action's attempts."""
    return [
        DuplicateLine(
            action_id=action_id,
            dispatch_id=str(row["dispatch_id"]),
            device=str(row["device"]),
            provider_object_id=int(row["provider_object_id"]),
            seen_at=str(row["seen_at"]),
            provider_kind=str(row["provider_kind"]),
        )
        for row in await ledger.duplicates(action_id)
    ]


def _with_unsent_and_resumed(
    report: NightlyReport,
    unsent: Sequence[UnsentLine],
    unsent_after: timedelta,
    resumed: Sequence[ResumeLine],
    resume_errors: Sequence[str],
) -> NightlyReport:
    """``report`` with the actions nothing is sending and what ``--resume`` did, both
    attention items when there are any."""
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


def _resume_sends(action: Action) -> bool:
    """False for an action ``resume`` never sends as it stands: one a person or a gate
    denied (never sent), or one the policy gate holds until a person approves it."""
    return not (action.denied or action.awaiting_approval)


async def _unsent(ledger: Ledger, now: datetime, after: timedelta) -> list[UnsentLine]:
    """The actions nothing is sending and ``resume`` would send: resumable
    (``Ledger.resumable``), neither denied nor held for approval, and idle past ``after``
    (PLANNED since their creation, the others since their latest attempt ended)."""
    from starebrain_actions.core.decisions import not_ready

    lines = []
    for summary in await ledger.resumable(now=now):
        if not _resume_sends(summary.action):
            continue
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
    share_phone: bool = False,
) -> tuple[list[ResumeLine], list[str]]:
    """``SmsAgent.resume`` on ``devices`` and on the phones of the resumable actions that
    have one (their latest attempt's, or the one their sender named) and that it may send
    (neither denied nor held for approval), one phone after another; what it did, and the
    phones it could not use."""
    from starebrain_actions.core.exceptions import StarebrainError
    from starebrain_actions.orchestration.agent import SmsAgent
    from starebrain_actions.phone.android import PhoneUnavailable

    # a phone is not opened only for actions the gate would refuse there
    pinned = [
        where
        for s in await ledger.resumable()
        if _resume_sends(s.action)
        and (where := s.latest.device if s.latest is not None else s.action.planned_device)
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
                share_phone=share_phone,
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
