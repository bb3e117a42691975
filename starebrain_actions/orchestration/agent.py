"""The agent facade: send an SMS exactly once through a phone, whatever fails on the way.

``SmsAgent.send`` creates the action (idempotent), commits the attempt's receipt and takes
the device's lease before anything reaches the phone, dispatches once, and then resolves the
outcome only by *reading* the phone, redispatching only when ``should_redispatch`` and the
budget allow. Calling it again with the same ``action_id`` (after a crash, a restart or a
timeout) resumes the same action and never sends while an earlier attempt is unresolved.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from starebrain_actions._logging import get_logger
from starebrain_actions.core import decisions as _decisions
from starebrain_actions.core import transitions as _core
from starebrain_actions.core.convert import age, format_time
from starebrain_actions.core.exceptions import (
    AttemptInFlight,
    AttemptRefused,
    DeviceBusy,
    DispatchNotReady,
    DispatchNotSent,
    DispatchOutcomeUnknown,
    DispatchUnreachable,
    InvalidInput,
    LinkDown,
    PhoneError,
    PolicyRefused,
    StaleTransition,
)
from starebrain_actions.core.model import (
    ActionRecord,
    ActionSummary,
    DeliveryState,
    PhoneHold,
    RedispatchReason,
    RetryPolicy,
    ReviewReason,
    SmsIntent,
    Status,
)
from starebrain_actions.core.ports import Phone
from starebrain_actions.ledger.phones import PhoneBinding
from starebrain_actions.ledger.store import Ledger
from starebrain_actions.orchestration.reconciler import (
    VOID_AFTER,
    Change,
    DeviceReport,
    ReconcilePass,
    reconcile_device,
    reconcile_pending,
    void_after_for,
)
from starebrain_actions.phone.send_path import ledger_proof

if TYPE_CHECKING:
    from starebrain_actions.core.policy import GateDecision, Policy

__all__ = [
    "Change",
    "DeviceReport",
    "ReconcilePass",
    "ResumeItem",
    "ResumeReport",
    "SendOutcome",
    "SmsAgent",
    "reconcile_pending",
]

_log = get_logger("starebrain.agent")

#: With a hard deadline, no attempt starts with less time left than this: a send cut off by
#: the deadline halfway through its script leaves an attempt only a later read or void can
#: settle, where not starting costs nothing.
MIN_DISPATCH_S = 0.5

#: Statuses in which an action waits for a new attempt (another action's hold may stop it).
_MAY_START = frozenset({Status.PLANNED, Status.FAILED, Status.MISMATCH})

#: Sends started on one phone per minute at most, by default: Android's SmsUsageMonitor lets a
#: package send about 30 SMS per 60 s before a confirmation dialog holds the next one.
RATE_LIMIT_PER_MINUTE = 30

#: After a read that did not find a dispatched message, the next read comes this long after it
#: (at once, the first time, when the phone's send time is known), and each further one twice
#: as long after the last, up to the poll interval.
FIRST_RETRY_S = 0.05
#: A phone's learnt send time is exact enough once the earliest offset known to find a message
#: and the latest known not to are this close (or this share of the send time, if larger).
SEND_TIME_TOLERANCE_S = 0.01
SEND_TIME_TOLERANCE_SHARE = 0.05
#: After this many sends found at the first read, the lower bound is loosened by one
#: tolerance, so that a phone that got faster is noticed (one probe read, rarely a miss).
SEND_TIME_RECHECK_AFTER = 32
#: Confirmed attempts of the phone whose timing seeds the send time of a new agent (the
#: smallest is taken: a window this long drifts up by a scheduling slip at most per window).
SEND_TIME_HISTORY = 16
#: Before its own first send, an agent reads first this share earlier than the quickest
#: confirmation the ledger holds for the phone, so that agents that each send once (the CLI)
#: still bring the seed down towards the phone's real send time.
SEED_PROBE_SHARE = 0.1
#: A send time seeded from the ledger is used only up to this (older confirmations may come
#: from a later reconcile pass, not from the sender's own read).
SEND_TIME_SEED_MAX_S = 5.0
#: While a send waits for another action's attempt that holds the phone, it reads the phone
#: for that attempt (as a reconcile pass) this often at most.
BLOCKED_PASS_S = 2.0
#: While a confirmed row settles (VERIFYING: the phone shows it sent, but the app may still
#: mark it failed), the sender reads the phone this often at most, and once more when it
#: settles.
SETTLE_POLL_S = 2.0


async def hold_on(
    ledger: Ledger, device: str, action_id: str, void_after: timedelta
) -> PhoneHold | None:
    """The attempt of another action than ``action_id`` holding the phone ``device`` (its
    key) now, and when a pass can free it; None: none does."""
    for record in await ledger.holders(device):
        if record.action_id != action_id:
            action = await ledger.get_action(record.action_id)
            return _core.phone_hold(record, action, void_after)
    return None


def hold_text(hold: PhoneHold, now: datetime) -> str:
    """What a send blocked by ``hold`` says it waits for, and when the phone can be freed."""
    held = age(now - hold.since)
    release = (
        f"a pass voids it from {format_time(hold.void_from)} if its send script never ran,"
        f" and moves it to review at {format_time(hold.review_at)} at the latest"
        if hold.void_from is not None
        else f"a pass moves it to review at {format_time(hold.review_at)} at the latest"
    )
    return (
        f"waiting for attempt {hold.dispatch_id} of action {hold.action_id}: it holds this"
        f" phone since {format_time(hold.since)} ({held} ago) until the phone proves its outcome;"
        f" this send reads the phone for it meanwhile: {release}"
    )


@attrs.define
class SendTimer:
    """When, after its send command returns, a read first finds a message a phone sent, learnt
    from this phone's sends (offsets in seconds from the end of the send command, which the
    keys or the framework call end: a slow command moves the message's time with it).

    A read finds the message only once the phone has written it as sent (the restricted view
    never shows the outbox; the radio takes the phone's send time). ``found_s`` is the earliest
    offset at which a read recently found it, ``missed_s`` the latest at which one did not: the
    first read of the next send comes at ``found_s`` when the two are close, or halfway between
    them to narrow them (a probe: when it misses, the next read comes at ``found_s``). A read at
    or past ``found_s`` that misses (the phone got slower) starts the bounds over. Before any
    send of its own, an agent starts from the ledger: the quickest confirmations of the phone's
    last attempts (``seed``).
    """

    #: earliest offset at which a read found a message (None: nothing learnt yet)
    found_s: float | None = None
    #: latest offset below ``found_s`` at which a read did not
    missed_s: float | None = None
    #: sends found at their first read since the bounds last moved
    quiet: int = 0
    #: sends learnt from
    sends: int = 0
    #: before any send of its own: the quickest confirmation in the ledger's history of the
    #: phone, in seconds from the start of the send command (the attempt's receipt)
    seed_s: float | None = None

    def tolerance(self) -> float:
        """How close the bounds must be for the first read to stop probing."""
        return max(SEND_TIME_TOLERANCE_S, SEND_TIME_TOLERANCE_SHARE * (self.found_s or 0.0))

    def due(self, command_s: float = 0.0) -> float | None:
        """The offset at which a read is expected to find the message of a send whose command
        took ``command_s``: ``found_s``, or before any send of its own the ledger's quickest
        confirmation (counted from the command's start); None: nothing known."""
        if self.found_s is not None:
            return self.found_s
        if self.seed_s is not None:
            return max(0.0, self.seed_s - command_s)
        return None

    def first_read(self, command_s: float = 0.0) -> float:
        """The offset of the first read after a send whose command took ``command_s`` (0: as
        soon as the command returns)."""
        if self.found_s is None:
            if self.seed_s is None:
                return 0.0
            # a share below the ledger's figure: each confirmation recorded lower lowers the
            # next agent's seed (a miss there is followed by a read at once)
            return max(0.0, (1 - SEED_PROBE_SHARE) * self.seed_s - command_s)
        if self.missed_s is None:
            # probe halfway down (a miss there costs no time when the next read, at found_s,
            # is still a round trip away)
            return self.found_s / 2
        if self.found_s - self.missed_s > self.tolerance():
            return (self.missed_s + self.found_s) / 2
        return self.found_s

    def next_read(
        self, missed_at: float, now: float, retry_s: float, cap_s: float, due: float | None
    ) -> tuple[float, float]:
        """After a read at ``missed_at`` that missed, ``now`` being the offset when it
        returned: the offset of the next read and the retry wait after that one. Below
        ``due`` (a probe), the next read comes at ``due``; otherwise ``retry_s`` after this
        one, and the wait doubles (from ``FIRST_RETRY_S`` if it was 0) up to ``cap_s``."""
        if due is not None and missed_at < due:
            return max(now, due), retry_s
        return now + retry_s, min(cap_s, max(FIRST_RETRY_S, 2 * retry_s))

    def first_retry(self, cap_s: float) -> float:
        """The wait after a send's first read at or past its due time, if it misses: none when
        a send time is known (the message is due; a read takes a round trip anyway), else
        ``FIRST_RETRY_S``; never more than ``cap_s``."""
        known = self.found_s is not None or self.seed_s is not None
        return 0.0 if known else min(FIRST_RETRY_S, cap_s)

    def seed(self, delays: list[float]) -> None:
        """Start from the ledger's history of this phone: seconds from attempts' receipts to
        their confirmations (upper bounds; the smallest is taken, ignored above a cap: a
        later pass, not the sender's read, confirmed those)."""
        usable = [delay for delay in delays if 0.0 <= delay <= SEND_TIME_SEED_MAX_S]
        if usable:
            self.seed_s = min(usable)

    def learn(self, missed: list[float], found: float, *, caught_sending: bool = False) -> None:
        """One send's reads: those at the offsets ``missed`` did not find its message, the
        one at ``found`` did. ``caught_sending``: that read saw the rows change while it ran
        and read again (the message was sent during it, which cost a round trip): it counts
        as a miss, and as found one tolerance later."""
        if caught_sending:
            missed, found = [*missed, found], found + self.tolerance()
        self.sends += 1
        last_miss = max(missed) if missed else None
        if self.found_s is None or (last_miss is not None and last_miss >= self.found_s):
            # the first send learnt, or the phone got slower than the bounds: start over
            self.found_s, self.missed_s, self.quiet = found, last_miss, 0
            return
        self.found_s = min(self.found_s, found)
        if last_miss is not None:
            self.missed_s = last_miss if self.missed_s is None else max(self.missed_s, last_miss)
            self.quiet = 0
            return
        self.quiet += 1
        if self.quiet >= SEND_TIME_RECHECK_AFTER and self.missed_s is not None:
            self.quiet = 0
            self.missed_s -= self.tolerance()


@attrs.define
class _Watch:
    """The reads of one attempt this agent dispatched, until its message is found."""

    dispatch_id: str
    #: ``clock()`` when the send command returned (offsets count from here)
    returned: float
    #: ``clock()`` of the next read
    next_at: float
    #: the wait after the next read, if it misses (the poll interval at most)
    retry_s: float
    #: the offset at which the message is expected (None: nothing known of the phone)
    due_s: float | None
    #: offsets of the reads that did not find the message
    missed: list[float] = attrs.field(factory=list)


@attrs.frozen(kw_only=True)
class SendOutcome:
    """Where an action stands when ``send`` returns."""

    #: the action, its attempts and what is derived from them
    summary: ActionSummary
    #: another action's attempt that held the phone when the send gave up waiting for it
    #: (None: the phone was not held by another action at the end)
    held_by: PhoneHold | None = None
    #: the policy gate's verdict when it stopped the send (``_policy.GateDecision``: DENY,
    #: HOLD for a person's approval, WAIT for quiet hours, OVER_LIMIT); None: it did not
    gate: GateDecision | None = None

    @property
    def status(self) -> Status:
        """The derived status of the latest attempt (PLANNED if none could start)."""
        return self.summary.status

    @property
    def record(self) -> ActionRecord | None:
        """The latest attempt."""
        return self.summary.latest

    @property
    def resolved(self) -> bool:
        """True when nothing is in flight any more."""
        return self.status not in (Status.IN_FLIGHT, Status.UNKNOWN, Status.VERIFYING)

    @property
    def settling(self) -> bool:
        """True when the phone shows the message sent but it has not settled yet: the app
        may still mark it failed until ``settles_at`` (never read this as SUCCEEDED)."""
        return self.status is Status.VERIFYING and self.settles_at is not None

    @property
    def not_ready(self) -> str | None:
        """What a person must do on the phone when the latest attempt found it not ready
        (locked, screen off, no SMS app...; such an attempt spent nothing), else None."""
        record = self.record
        if record is None or _decisions.not_ready(record) is None:
            return None
        remedy = record.evidence.get("remedy")
        return remedy if isinstance(remedy, str) else "make the phone ready for a send"

    @property
    def settles_at(self) -> datetime | None:
        """When the latest attempt's row settles, if it is settling (see ``settling``)."""
        record = self.record
        if record is None or self.status is not Status.VERIFYING:
            return None
        return _decisions.settling_until(record)


@attrs.frozen(kw_only=True)
class _How:
    """How one action is driven (``send``'s arguments; ``resume``'s own)."""

    wait: float
    clock: Callable[[], float]
    on_wait: Callable[[str], None] | None = None
    on_step: Callable[[str], None] | None = None
    hard_deadline: bool = False
    #: False: return once the phone shows the message sent and it only has to settle
    #: (VERIFYING: its attempt no longer holds the phone)
    follow_settling: bool = True
    #: the policy gate of this send (None: the ledger's)
    gate: Policy | None = None


@attrs.frozen(kw_only=True)
class ResumeItem:
    """What ``resume`` did with one action."""

    action_id: str
    #: its status before and after
    before: Status
    after: Status
    #: attempts started for it by this resume
    sent: int = 0
    #: in a few words: what happened, or why nothing was sent
    note: str = ""
    #: where the send left it (None: it was not sent through ``send``'s path)
    outcome: SendOutcome | None = None


@attrs.frozen(kw_only=True)
class ResumeReport:
    """What ``SmsAgent.resume`` did on one phone."""

    device: str
    #: the reconcile pass it started with
    reconciled: DeviceReport
    #: one per action it drove, in the order driven
    items: tuple[ResumeItem, ...] = ()


def resume_note(outcome: SendOutcome) -> str:
    """One phrase for where a resumed action stands."""
    status = outcome.status
    if outcome.gate is not None:
        gate = outcome.gate
        return f"stopped by the policy gate: {gate.verdict.value} ({gate.rule}: {gate.detail})"
    if outcome.not_ready is not None:
        return f"the phone is not ready: {outcome.not_ready} (no attempt spent)"
    if outcome.held_by is not None:
        return f"waiting: action {outcome.held_by.action_id} holds the phone"
    if status is Status.SUCCEEDED:
        return "sent and verified"
    if outcome.settling and outcome.settles_at is not None:
        return f"sent by the phone; settles at {format_time(outcome.settles_at)}"
    if status in (Status.IN_FLIGHT, Status.UNKNOWN, Status.VERIFYING):
        return "not proven yet: a later pass or resume settles it"
    if status is Status.PLANNED:
        return "not started (the phone is busy or its send limit was reached)"
    return status.value.lower().replace("_", " ")


class SmsAgent:
    """Sends SMS through one phone, recording every attempt in a ledger."""

    def __init__(
        self,
        ledger: Ledger,
        phone: Phone,
        *,
        policy: RetryPolicy | None = None,
        region: str | None = None,
        poll_interval_s: float = 0.25,
        actor: str = "agent",
        void_after: timedelta = VOID_AFTER,
        rate_limit: int = RATE_LIMIT_PER_MINUTE,
    ) -> None:
        if rate_limit < 1:
            raise InvalidInput("rate_limit must be at least 1 send per minute")
        self.ledger = ledger
        self.phone = phone
        self.policy = policy or RetryPolicy()
        self.region = region
        self.poll_interval_s = poll_interval_s
        self.actor = actor
        #: dispatches this agent sent to the phone (for tests and the demo)
        self.dispatches = 0
        #: an unresolved attempt of another sender is voided on the phone only this long
        #: after its receipt: longer than its command can take (it may be on its way)
        self.void_after = void_after
        #: attempts this agent dispatched whose command ended without an answer
        self._timed_out: set[str] = set()
        #: at most this many sends start on the phone per minute (SmsUsageMonitor: about 30)
        self.rate_limit = rate_limit
        #: when reads find this phone's messages after a send (seeded from the ledger once)
        self.send_timer = SendTimer()
        self._timer_seeded = False
        #: which phone of the ledger answered (``open`` binds it: its key, whether it is new,
        #: and the phone this address named before if another one answers there now)
        self.binding: PhoneBinding | None = None

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        *,
        db: str | os.PathLike[str],
        device: str,
        policy: RetryPolicy | None = None,
        key_path: str | Path | None = None,
        region: str | None = None,
        poll_interval_s: float = 0.25,
        connect_timeout_s: float = 5.0,
        command_timeout_s: float = 20.0,
        read_as_system: bool | None = None,
        void_after: timedelta | None = None,
        rate_limit: int = RATE_LIMIT_PER_MINUTE,
        send_path: str = "auto",
        deadline_s: float | None = None,
        gate: Policy | None = None,
    ) -> AsyncIterator[SmsAgent]:
        """Open the ledger at ``db`` (a SQLite file path, or a ``postgresql://`` URL for a
        ledger shared by several hosts) and connect to the phone at ``device`` (``host:port``).

        ``read_as_system``: read the phone through ``su 1000`` (userdebug/eng builds), which
        also shows outbox, failed and queued rows (default: ``$STAREBRAIN_READ_AS_SYSTEM``).
        ``void_after``: how old another sender's unresolved attempt must be before this agent
        voids its fence on the phone (default: the command timeout plus 5 s, at least 25 s:
        a live sender's command is over by then). ``rate_limit``: sends started on the phone
        per minute at most (Android holds more behind a confirmation dialog). ``send_path``:
        "ui" (the messaging app), "framework" (``service call isms`` as the shell user: no
        UI, no RCS, our rows told apart by ``creator``; one SMS segment per message, so
        ``send`` refuses a longer body) or "auto" (the default: the framework where the probe
        passes, the body is one SMS and this ledger holds proof of it on the phone's build, a
        framework send confirmed by the shell's own row; else the app; see ``_send_path``).
        ``deadline_s``: connecting (with its first round trips) must be over within this
        many seconds, or PhoneUnavailable. ``gate``: the policy gate's rules
        (``_policy.load_policy``), checked before every attempt (None: no gate).
        ``poll_interval_s``: the longest wait between two reads of the phone while an outcome
        is unproven (after a send, the first read comes when this phone's rows have shown up
        before, learnt per phone and seeded from the ledger, then reads come 50 ms apart, the
        wait doubling up to this).

        Raises:
            LedgerUnavailable / SchemaTooNew: the ledger cannot be used.
            PhoneUnavailable: the phone cannot be reached (nothing is recorded).
            KeyPermissionError: the ADB key is readable by others.
        """
        from starebrain_actions.phone.android import (
            AndroidPhone,
            PhoneUnavailable,
            connect_failure,
            connect_lasting,
        )

        async with Ledger.open(db) as ledger:
            ledger.gate = gate
            try:
                async with asyncio.timeout(deadline_s):
                    phone = await AndroidPhone.connect(
                        device,
                        key_path=key_path,
                        connect_timeout_s=connect_timeout_s,
                        command_timeout_s=command_timeout_s,
                        read_as_system=read_as_system,
                        send_path=send_path,
                        framework_proof=ledger_proof(ledger),
                    )
            except TimeoutError as exc:
                known = connect_failure(exc)
                raise PhoneUnavailable(
                    known or f"{device}: did not answer within the {deadline_s:g} s deadline",
                    retryable=not connect_lasting(exc),
                ) from None
            binding = await phone.bind_in(ledger)
            if phone.path_choice:
                _log.info(
                    "send_path_chosen",
                    device=phone.device,
                    send_path=phone.send_path,
                    why=phone.path_choice,
                )
            try:
                agent = cls(
                    ledger,
                    phone,
                    policy=policy,
                    region=region,
                    poll_interval_s=poll_interval_s,
                    rate_limit=rate_limit,
                    # another sender's command may take up to its timeout: void after that
                    void_after=(
                        void_after if void_after is not None else void_after_for(command_timeout_s)
                    ),
                )
                agent.binding = binding
                yield agent
            finally:
                await phone.close()

    async def reconcile(self) -> DeviceReport:
        """One reconcile pass on this agent's phone (reads only; it may void the fence of an
        attempt whose command this agent gave up on, or that is older than ``void_after``)."""
        return await reconcile_device(
            self.ledger, self.phone, void_after=self.void_after, void_now=self._timed_out
        )

    async def send(
        self,
        action_id: str,
        to: str,
        body: str,
        *,
        wait: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        on_wait: Callable[[str], None] | None = None,
        on_step: Callable[[str], None] | None = None,
        hard_deadline: bool = False,
        gate: Policy | None = None,
    ) -> SendOutcome:
        """Send ``body`` to ``to`` at most once for ``action_id``; wait up to ``wait`` seconds
        for proof of the outcome. ``gate``: the policy gate of this send (None: the one
        given at ``open``).

        ``on_wait(message)`` is told, once per blocker, when the send waits for another
        action's attempt that holds the phone. ``on_step(step)`` is told each step as it
        starts ("sending", "waiting for the phone's row", "waiting for attempt …", "backing
        off …"), for a progress display.

        ``hard_deadline``: ``wait`` bounds every step on the phone too (reads, the fence,
        the send command itself), so the call returns within ``wait`` seconds whatever the
        phone does; no attempt starts with less than ``MIN_DISPATCH_S`` left, and a send cut
        off by the deadline is an unknown outcome, settled later by a read (never resent).
        Without it, a step already started runs to its own timeout.

        An attempt in review as ``AMBIGUOUS`` (a matching row that may be the owner's as well
        as ours) ends the wait at once: no later read can tell, a person rules.

        Raises:
            InvalidInput: empty or malformed recipient or body, a bad action id, or a body
                the send path named at ``open`` cannot send (more than one SMS segment on
                ``framework``); nothing is recorded or sent.
            FingerprintConflict: ``action_id`` exists with another recipient or body;
                nothing is sent.
        """
        intent = SmsIntent(recipient=to, body=body, region=self.region)
        how = _How(
            wait=wait,
            clock=clock,
            on_wait=on_wait,
            on_step=on_step,
            hard_deadline=hard_deadline,
            gate=gate,
        )
        return await self._drive(action_id, intent, how)

    async def _drive(self, action_id: str, intent: SmsIntent, how: _How) -> SendOutcome:
        """``send``'s path for an intent as given (``resume`` passes the stored one). When it
        ends with no attempt of its own under way and another action's attempt holds the
        phone, the outcome names that hold (``held_by``)."""
        outcome = await self._steps(action_id, intent, how)
        if outcome.held_by is not None or outcome.status not in _MAY_START:
            return outcome
        held_by = await self._hold(action_id)
        return attrs.evolve(outcome, held_by=held_by) if held_by is not None else outcome

    async def _steps(self, action_id: str, intent: SmsIntent, how: _How) -> SendOutcome:
        """The steps of ``_drive``."""
        wait, clock, on_wait, on_step = how.wait, how.clock, how.on_wait, how.on_step
        hard_deadline, follow_settling = how.hard_deadline, how.follow_settling
        check_body = getattr(self.phone, "check_body", None)
        if callable(check_body):
            check_body(intent.body)  # a path named by the caller that cannot send it
        await self.ledger.create_action(action_id, intent, self.policy, device=self.phone.device)
        give_up = clock() + max(0.0, wait)
        told = ""
        step = ""

        def tell(now_doing: str) -> None:
            nonlocal step
            if on_step is not None and now_doing != step:
                step = now_doing
                on_step(now_doing)

        def bound() -> float | None:
            """Seconds a phone step may take (None: its own timeout only)."""
            return max(0.0, give_up - clock()) if hard_deadline else None

        #: the reads of the attempt this call dispatched, while its message is not found
        watch: _Watch | None = None
        #: ``clock()`` from which a send blocked by another action's attempt reads the phone
        blocked_pass_at = clock()
        while True:
            summary = await self.ledger.summary(action_id)
            latest = summary.latest
            unresolved = latest is not None and (
                latest.delivery is DeliveryState.PENDING or summary.status is Status.VERIFYING
            )
            if unresolved and latest is not None and latest.device == self.phone.device:
                # only this device's unresolved attempts: a poll reads just their window
                # a read, then (if it settles nothing) the fence: an attempt whose script
                # never ran is voided at once and retried, whoever started it
                tell("waiting for the phone's row")
                if watch is not None and watch.dispatch_id != latest.dispatch_id:
                    watch = None
                read_at = 0.0
                if watch is not None:
                    # not before the phone can have sent it (a read that early shows nothing);
                    # the wait's end still gets its read, as without a plan
                    delay = min(watch.next_at, give_up) - clock()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    read_at = clock() - watch.returned
                try:
                    async with asyncio.timeout(bound()):
                        report = await self._read_pass()
                except TimeoutError:
                    return SendOutcome(summary=await self.ledger.summary(action_id))
                summary = await self.ledger.summary(action_id)
                latest = summary.latest
                unresolved = latest is not None and (
                    latest.delivery is DeliveryState.PENDING or summary.status is Status.VERIFYING
                )
                if watch is not None and latest is not None:
                    if latest.dispatch_id != watch.dispatch_id:
                        watch = None
                    elif latest.delivery is not DeliveryState.PENDING:
                        if latest.delivery is DeliveryState.CONFIRMED:
                            # one windowed read is one round trip unless the rows changed
                            # while it ran (the phone was sending it)
                            self.send_timer.learn(
                                watch.missed, read_at, caught_sending=report.round_trips > 1
                            )
                        watch = None
                    else:
                        watch.missed.append(read_at)
                        offset, watch.retry_s = self.send_timer.next_read(
                            read_at,
                            clock() - watch.returned,
                            watch.retry_s,
                            self.poll_interval_s,
                            watch.due_s,
                        )
                        watch.next_at = watch.returned + offset
            if (
                unresolved
                and latest is not None
                and latest.review_reason in (ReviewReason.AMBIGUOUS, ReviewReason.UNSETTLED)
            ):
                # a person must rule: whose the row is (AMBIGUOUS), or whether a row that
                # left the phone's view before it settled went out (UNSETTLED); no later read
                # can tell, so waiting out ``wait`` would only delay the answer
                return SendOutcome(summary=summary)
            if unresolved:
                if watch is not None:
                    if give_up - clock() <= 0:
                        return SendOutcome(summary=summary)
                    continue  # the next read comes at the watch's time
                due = _decisions.settling_until(latest) if latest is not None else None
                if due is not None and summary.status is Status.VERIFYING:
                    if not follow_settling:
                        return SendOutcome(summary=summary)  # the phone is free for the next
                    # sent by the phone, not yet settled: read now and then (an early FAILED
                    # is worth seeing), and once more when it settles
                    tell("sent by the phone, waiting for it to settle")
                    until = (due - self.ledger.now()).total_seconds() + 0.01
                    pause = max(self.poll_interval_s, min(SETTLE_POLL_S, until))
                    if not await self._pause(give_up, clock, pause):
                        return SendOutcome(summary=summary)
                    continue
                if not await self._pause(give_up, clock):
                    return SendOutcome(summary=summary)
                continue
            now = self.ledger.now()
            # the stored action (an operator's grant may have come since it was created)
            action = summary.action
            decision = _decisions.should_redispatch(action, summary.attempts, now)
            if not decision:
                if decision.reason is RedispatchReason.BACKOFF and decision.retry_at:
                    delay = (decision.retry_at - now).total_seconds()
                    if clock() + delay <= give_up:
                        remedy = SendOutcome(summary=summary).not_ready
                        tell(
                            f"the phone is not ready: {remedy}; trying again in {delay:.1f} s"
                            if remedy is not None
                            else f"backing off {delay:.1f} s before the next attempt"
                        )
                        await asyncio.sleep(delay)
                        continue
                return SendOutcome(summary=summary)
            if not await self._within_rate(give_up, clock, on_wait):
                return SendOutcome(summary=await self.ledger.summary(action_id))
            if hard_deadline and give_up - clock() < MIN_DISPATCH_S:
                tell("no time left to start a send")
                return SendOutcome(summary=summary)
            tell("sending")
            try:
                async with asyncio.timeout(bound()):
                    fence_evidence = await self._fence_evidence(intent.body)
            except TimeoutError:
                return SendOutcome(summary=await self.ledger.summary(action_id))
            except LinkDown:
                # an outage: start no attempt whose fence could not be read; wait for the
                # phone within the wait (an attempt without a fence could never be voided)
                tell("waiting for the phone to answer")
                if not await self._pause(give_up, clock):
                    return SendOutcome(summary=await self.ledger.summary(action_id))
                continue
            try:
                record = await self.ledger.begin_attempt(
                    action_id,
                    self.phone.device,
                    actor=self.actor,
                    evidence=fence_evidence,
                    gate=how.gate,
                )
            except AttemptInFlight:
                continue  # another sender won the race: reconcile its attempt instead
            except PolicyRefused as refused:
                tell(f"stopped by the policy gate: {refused}")
                return SendOutcome(summary=await self.ledger.summary(action_id), gate=refused.gate)
            except DeviceBusy as busy:
                hold = await self._hold(action_id)
                tell(f"waiting for attempt {busy.holder_dispatch_id} (it holds the phone)")
                if on_wait is not None and hold is not None and hold.dispatch_id != told:
                    told = hold.dispatch_id
                    on_wait(hold_text(hold, self.ledger.now()))
                if clock() >= blocked_pass_at:
                    # what a reconcile pass runs on the holder, by the pass's own code: read,
                    # void its fence once old enough, move it to review past its limit
                    blocked_pass_at = clock() + BLOCKED_PASS_S
                    try:
                        async with asyncio.timeout(bound()):
                            await self._read_pass()
                    except TimeoutError:
                        return await self._outcome(action_id)
                    if not await self.ledger.holders(self.phone.device):
                        continue  # freed: start this action's attempt now
                if not await self._pause(give_up, clock):
                    return await self._outcome(action_id)
                continue
            except AttemptRefused:
                return SendOutcome(summary=await self.ledger.summary(action_id))
            await self._seed_send_timer()
            started = clock()
            if await self._dispatch(record, intent, budget_s=bound()):
                returned = clock()
                watch = _Watch(
                    dispatch_id=record.dispatch_id,
                    returned=returned,
                    next_at=returned + self.send_timer.first_read(returned - started),
                    due_s=self.send_timer.due(returned - started),
                    retry_s=self.send_timer.first_retry(self.poll_interval_s),
                )

    async def resume(
        self,
        *,
        wait: float = 30.0,
        share: tuple[int, int] | None = (0, 1),
        on_item: Callable[[ResumeItem], None] | None = None,
        on_step: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> ResumeReport:
        """Finish what was started on this agent's phone: one reconcile pass (reads settle
        what they can, old fences are voided), then every action that can move is sent
        through ``send``'s own path, oldest first: PLANNED actions, and those whose latest
        attempt on this phone FAILED (or sent another text) with attempts left, once their
        backoff has passed (or passes within ``wait``). Each action gets up to ``wait``
        seconds for its proof, as ``send`` would, but is left once the phone shows it sent and
        it only has to settle (VERIFYING, which a later pass or resume follows). Safe beside
        senders and other resumes (on any backend): the ledger's receipt and lease never let
        one action be sent twice.

        ``share=(index, count)``: when ``count`` phones resume together, the PLANNED actions
        no sender named a phone for are dealt among them, this one taking every ``count``-th
        from ``index``; None: none of them (only this phone's own actions). A PLANNED action
        whose sender named a phone (``send`` does) goes to that phone only. ``on_item`` is
        told each action's result as it ends; ``on_step`` what is being done, for a progress
        display.

        Actions a person must rule on, unresolved attempts the pass could not settle, and
        actions with nothing left to try are left as they are (``starebrain review``).
        """
        index, count = share if share is not None else (0, 1)
        if count < 1 or not 0 <= index < count:
            raise InvalidInput(f"share must be (index, count) with 0 <= index < count; got {share}")
        if on_step is not None:
            on_step("reading the phone")
        report = await self.reconcile()
        candidates = await self.ledger.resumable(self.phone.device, now=self.ledger.now())
        # PLANNED actions no sender named a phone for are dealt among the phones resuming
        anywhere = [s for s in candidates if not s.attempts and s.action.planned_device is None]
        mine = {s.action.action_id for s in anywhere[index::count]} if share is not None else set()
        chosen = [
            s
            for s in candidates
            if s.attempts or s.action.planned_device is not None or s.action.action_id in mine
        ]
        items: list[ResumeItem] = []
        for position, summary in enumerate(chosen, start=1):
            action = summary.action
            if on_step is not None:
                on_step(f"action {position} of {len(chosen)}: {action.action_id}")
            try:
                how = _How(wait=wait, clock=clock, hard_deadline=True, follow_settling=False)
                outcome = await self._drive(action.action_id, action.intent, how)
            except InvalidInput as exc:
                item = ResumeItem(
                    action_id=action.action_id,
                    before=summary.status,
                    after=summary.status,
                    note=f"not sent: {exc}",
                )
            else:
                item = ResumeItem(
                    action_id=action.action_id,
                    before=summary.status,
                    after=outcome.status,
                    sent=len(outcome.summary.attempts) - len(summary.attempts),
                    note=resume_note(outcome),
                    outcome=outcome,
                )
            items.append(item)
            if on_item is not None:
                on_item(item)
        return ResumeReport(device=self.phone.device, reconciled=report, items=tuple(items))

    async def _hold(self, action_id: str) -> PhoneHold | None:
        """Another action's attempt holding this agent's phone now (see ``hold_on``)."""
        return await hold_on(self.ledger, self.phone.device, action_id, self.void_after)

    async def _outcome(self, action_id: str) -> SendOutcome:
        """Where the action stands, with the hold that keeps it from starting, if another
        action's attempt still holds the phone."""
        summary = await self.ledger.summary(action_id)
        return SendOutcome(summary=summary, held_by=await self._hold(action_id))

    async def _read_pass(self) -> DeviceReport:
        """A reconcile pass over this phone's unresolved attempts only (a sender's read: no
        duplicate watch), voiding what it may: the pass a sender runs while it waits."""
        return await reconcile_device(
            self.ledger,
            self.phone,
            duplicate_watch=timedelta(0),
            void_after=self.void_after,
            void_now=self._timed_out,
        )

    async def _within_rate(
        self,
        give_up: float,
        clock: Callable[[], float],
        on_wait: Callable[[str], None] | None,
    ) -> bool:
        """Wait while this phone has started ``rate_limit`` sends in the last minute
        (Android's SmsUsageMonitor holds a package's sends past about 30 per 60 s behind a
        confirmation dialog). False when the wait is over first."""
        told = False
        while True:
            since = self.ledger.now() - timedelta(minutes=1)
            recent = await self.ledger.dispatches_since(self.phone.device, since)
            if recent < self.rate_limit:
                return True
            if on_wait is not None and not told:
                told = True
                on_wait(
                    f"waiting for the phone's send limit ({self.rate_limit} per minute;"
                    f" {recent} in the last minute)"
                )
            if not await self._pause(give_up, clock):
                return False

    async def _fence_evidence(self, body: str) -> dict[str, str]:
        """The phone's fence epoch, noted on the attempt before it is sent, so that a later
        pass can prove on the phone that its script never ran, and the send path's own
        evidence (the framework path's ``creator``). A phone that cannot give an epoch gives
        an attempt without a fence (it can then only be confirmed, never voided)."""
        choose = getattr(self.phone, "choose_path", None)
        if callable(choose):
            await choose(body)  # ``auto``: the path the ledger's proof allows now, for body
        path = getattr(self.phone, "path_evidence", None)
        known: dict[str, str] = dict(path()) if callable(path) else {}
        address = getattr(self.phone, "address", None)
        if isinstance(address, str) and address != self.phone.device:
            known["address"] = address  # the phone's key names it; this is how it was reached
        try:
            return {**known, "fence_epoch": await self.phone.fence_epoch()}
        except LinkDown:
            raise  # the phone is out of reach: no attempt starts now (the caller waits)
        except PhoneError as exc:
            _log.warning("fence_epoch_unavailable", device=self.phone.device, error=str(exc))
            return known

    async def _seed_send_timer(self) -> None:
        """Before this agent's first send, seed its phone's send time from the ledger."""
        if self._timer_seeded:
            return
        self._timer_seeded = True
        delays = await self.ledger.confirmation_delays(self.phone.device, SEND_TIME_HISTORY)
        self.send_timer.seed([delay.total_seconds() for delay in delays])

    async def _dispatch(
        self, record: ActionRecord, intent: SmsIntent, *, budget_s: float | None = None
    ) -> bool:
        """Send once; record what the result proves. Never raises a phone error, and a lost
        compare-and-set (another process settled the attempt meanwhile) is not an error: the
        next read of the ledger carries on from what it holds. ``budget_s`` cuts the send
        command off (an unknown outcome) when it has not answered within that time. True
        when the phone took the send command (its receipt is recorded)."""
        self.dispatches += 1
        receipt_taken = False
        epoch = record.evidence.get("fence_epoch")
        fence = (record.dispatch_id, epoch) if isinstance(epoch, str) else None
        try:
            try:
                async with asyncio.timeout(budget_s):
                    # the path the receipt names (``auto`` may choose another one meanwhile)
                    path = "framework" if record.evidence.get("send_path") == "framework" else "ui"
                    receipt = await self.phone.dispatch(intent, fence=fence, path=path)
            except TimeoutError:
                raise DispatchOutcomeUnknown(
                    f"the send command was cut off by the deadline after {budget_s:.1f} s"
                ) from None
        except (DispatchUnreachable, DispatchNotReady) as exc:
            # an outage, or a phone that refused before the first key (locked, screen off...),
            # proves nothing about the message: the attempt fails without spending the
            # budget, and the next one waits for its backoff (the phone may come back)
            if isinstance(exc, DispatchNotReady):
                what = "phone not ready"
                kept: dict[str, object] = {"not_ready": exc.reason, "remedy": exc.remedy}
            else:
                what, kept = "phone unreachable", {"unreachable": True}
            transition = _core.fail_delivery(
                record,
                reason=f"{what}, nothing sent: {exc}",
                now=self.ledger.now(),
                actor=self.actor,
                evidence={"error": str(exc), **kept},
            )
        except DispatchNotSent as exc:
            transition = _core.fail_delivery(
                record,
                reason=f"not sent: {exc}",
                now=self.ledger.now(),
                actor=self.actor,
                evidence={"error": str(exc)},
            )
        except DispatchOutcomeUnknown as exc:
            # this sender's command is over (timed out, cut off): its fence may be voided now
            self._timed_out.add(record.dispatch_id)
            transition = _core.note_error(
                record, f"outcome unknown: {exc}", now=self.ledger.now(), actor=self.actor
            )
        else:
            receipt_taken = True
            transition = _core.record_submission(
                record,
                watermark_id=receipt.watermark_id,
                device_clock_ms=receipt.device_clock_ms,
                now=self.ledger.now(),
                actor=self.actor,
                evidence=receipt.evidence,
            )
        try:
            await self.ledger.apply(transition)
        except StaleTransition:
            _log.info("dispatch_result_superseded", dispatch_id=record.dispatch_id)
        return receipt_taken

    async def _pause(
        self, give_up: float, clock: Callable[[], float], seconds: float | None = None
    ) -> bool:
        """Sleep one poll interval (or ``seconds``) if time is left; False when the wait is
        over."""
        left = give_up - clock()
        if left <= 0:
            return False
        await asyncio.sleep(min(self.poll_interval_s if seconds is None else seconds, left))
        return True
