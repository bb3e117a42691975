"""The agent facade: send an SMS exactly once through a phone, whatever fails on the way.

``SmsAgent.send`` creates the action (idempotent), commits the attempt's receipt and takes
the device's lease before anything reaches the phone, dispatches once, and then resolves the
outcome only by *reading* the phone, redispatching only when ``should_redispatch`` and the
budget allow. Calling it again with the same ``action_id`` (after a crash, a restart or a
timeout) resumes the same action and never sends while an earlier attempt is unresolved.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable, Collection, Iterable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Final, cast

import attrs

from starebrain_actions import _paths
from starebrain_actions._logging import get_logger
from starebrain_actions.core import transitions as _core
from starebrain_actions.core.events import LedgerEvent
from starebrain_actions.core.exceptions import (
    DispatchFenceLost,
    DispatchNotReady,
    DispatchNotSent,
    DispatchOutcomeUnknown,
    DispatchUnreachable,
    InvalidInput,
    LedgerError,
    LinkDown,
    PhoneError,
    StaleTransition,
)
from starebrain_actions.core.model import (
    ActionRecord,
    PhoneHold,
    RetryPolicy,
    SmsIntent,
    Status,
    TimeSpec,
    Transition,
    intent_times,
)
from starebrain_actions.core.ports import MarksLedgers, Phone
from starebrain_actions.core.replies import Reply
from starebrain_actions.ledger.phones import PhoneBinding, phone_for
from starebrain_actions.ledger.queue import DEFAULT_POOL, Queued
from starebrain_actions.ledger.store import Ledger
from starebrain_actions.orchestration.outcome import (
    ResumeItem,
    ResumeReport,
    SendOutcome,
    hold_on,
    resume_note,
)
from starebrain_actions.orchestration.phone_ledger import (
    SharedPhone,
    check_phone_ledger,
    forget_resolved_marks,
)
from starebrain_actions.orchestration.reconciler import (
    VOID_AFTER,
    Change,
    DeviceReport,
    ReconcilePass,
    reconcile_device,
    reconcile_pending,
    void_after_for,
)
from starebrain_actions.orchestration.send_loop import How, SendLoop
from starebrain_actions.orchestration.send_timer import SEND_TIME_HISTORY, SendTimer
from starebrain_actions.phone.send_path import ledger_proof

if TYPE_CHECKING:
    from starebrain_actions.core.policy import Policy
    from starebrain_actions.phone.android import AndroidPhone

__all__ = [
    "Change",
    "DeviceReport",
    "ReconcilePass",
    "SmsAgent",
    "reconcile_pending",
]

_log = get_logger("starebrain.agent")

#: How many times a send's result is applied again on an attempt another writer annotated
#: meanwhile (each a fresh read: a pass notes errors on every attempt of an unreachable phone).
_RESULT_TRIES = 4

#: Statuses in which an action waits for a new attempt (another action's hold may stop it).
_MAY_START = frozenset({Status.PLANNED, Status.FAILED, Status.MISMATCH})

#: Sends started on one phone per minute at most, by default: Android's SmsUsageMonitor lets a
#: package send about 30 SMS per 60 s before a confirmation dialog holds the next one.
RATE_LIMIT_PER_MINUTE = 30

#: Seconds at most a send's end, or a closing agent, gives the phone to remove this ledger's
#: marks of resolved attempts (a later check of this ledger removes what is left).
_TIDY_S = 2.0


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
        #: when (``time.monotonic()``) this agent's dispatches of the last minute started
        self._dispatched_at: collections.deque[float] = collections.deque()
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
        #: another ledger the fence on the phone named when ``open`` connected (warned of
        #: once, then; ``orchestration.phone_ledger``), or None
        self.shared_phone: SharedPhone | None = None
        #: attempts this agent sent whose fence claim marked this ledger on the phone, until
        #: the mark is removed once the ledger holds them resolved
        self._marked: set[str] = set()

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        *,
        db: str | os.PathLike[str] | None = None,
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
        check: bool | None = None,
        share_phone: bool = False,
    ) -> AsyncIterator[SmsAgent]:
        """Open the ledger at ``db`` (a SQLite file path, or a ``postgresql://`` URL for a
        ledger shared by several hosts) and connect to the phone at ``device`` (``host:port``).

        ``db`` None (the default): the ledger the ``starebrain`` command uses, so that a
        script and the command line never keep two truths about one action:
        ``$STAREBRAIN_DB``, else ``$XDG_DATA_HOME/starebrain/ledger.db``
        (``~/.local/share/starebrain/ledger.db``; its directory is made, mode 0700).

        ``read_as_system``: read the phone through ``su 1000`` (userdebug/eng builds), which
        also shows outbox, failed and queued rows (default: ``$STAREBRAIN_READ_AS_SYSTEM``).
        ``void_after``: how old another sender's unresolved attempt must be before this agent
        voids its fence on the phone (default: the command timeout plus 5 s, at least 25 s:
        a live sender's command is over by then). ``rate_limit``: sends started on the phone
        per minute at most (Android holds more behind a confirmation dialog). ``send_path``:
        "ui" (the messaging app), "framework" (``service call isms`` as the shell user: no
        UI, no RCS, our rows told apart by ``creator``; one SMS segment per message, so
        ``send`` refuses a longer body) or "auto" (the default: the framework where the probe
        passes, the body is one SMS and the code is proven on the phone's build, by its own
        framework.jar or by a framework send this ledger saw confirmed by the shell's own row;
        else the app; see ``phone.send_path``).
        ``deadline_s``: connecting (with its first round trips) must be over within this
        many seconds, or PhoneUnavailable. ``gate``: the policy gate's rules
        (``core.policy.load_policy``), checked before every attempt (None: no gate).
        ``check``: run ``starebrain doctor``'s checks of the phone on connecting (one more
        round trip), and refuse a phone on which one fails (a locked screen, no default SMS
        app, a fence the shell cannot use...) before anything is recorded. None (the
        default): only when this ledger has never met the phone (:func:`vet_new_phone`: a
        locked screen and no default SMS app are left to the send, which waits for them and
        spends nothing); False: never.
        ``share_phone``: send even when the fence on the phone names another ledger with
        attempts still open there (default: refused, ``PhoneHeldByAnotherLedger``, nothing
        recorded); another ledger that only sent from the phone before is warned of once
        either way (``shared_phone``, a log warning; ``orchestration.phone_ledger``).
        ``poll_interval_s``: the longest wait between two reads of the phone while an outcome
        is unproven (after a send, the first read comes when this phone's rows have shown up
        before, learnt per phone and seeded from the ledger, then reads come 50 ms apart, the
        wait doubling up to this).

        Raises:
            LedgerUnavailable / SchemaTooNew: the ledger cannot be used.
            PhoneUnavailable: the phone cannot be reached, or one of the checks ``check``
                runs fails (its message names each failing check, what it read and what
                follows; ``retryable`` False) (nothing is recorded).
            PhoneHeldByAnotherLedger: another ledger's attempts are open on the phone, and
                ``share_phone`` is False (nothing is recorded; its message names both).
            KeyPermissionError: the ADB key is readable by others.
        """
        if db is None:
            db = _paths.default_ledger()
            _paths.make_default_dir(db)
        async with Ledger.open(db) as ledger:
            ledger.gate = gate
            phone, binding, shared = await _ready_phone(
                ledger,
                device,
                share_phone=share_phone,
                check=check,
                deadline_s=deadline_s,
                key_path=key_path,
                connect_timeout_s=connect_timeout_s,
                command_timeout_s=command_timeout_s,
                read_as_system=read_as_system,
                send_path=send_path,
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
                agent.shared_phone = shared
                yield agent
                await agent.tidy_marks(within_s=_TIDY_S)
            finally:
                await phone.close()

    async def reconcile(self) -> DeviceReport:
        """One reconcile pass on this agent's phone (reads only; it may void the fence of an
        attempt whose command this agent gave up on, or that is older than ``void_after``),
        then the expiry of every action whose deadline passed with nothing sent
        (``Ledger.expire_due``: its ``action.expired`` event)."""
        report = await reconcile_device(
            self.ledger, self.phone, void_after=self.void_after, void_now=self._timed_out
        )
        await self.ledger.expire_due()
        await self.tidy_marks()
        return report

    async def tidy_marks(
        self, *, within_s: float | None = None, known: Iterable[ActionRecord] = ()
    ) -> None:
        """Remove from the phone this ledger's marks of the attempts this agent sent that the
        ledger now holds resolved (one round trip, none when there are none; within
        ``within_s`` seconds, else left for a later check): another ledger no longer counts
        them as open (``orchestration.phone_ledger``). Never raises a phone or ledger error
        (what is left stays for a later check). ``known``: attempts just read from the
        ledger, those final not read again (``forget_resolved_marks``)."""
        if not self._marked or not hasattr(self.phone, "forget_ledger_marks"):
            return
        phone = cast("MarksLedgers", self.phone)
        try:
            async with asyncio.timeout(within_s):
                self._marked -= await forget_resolved_marks(
                    self.ledger, phone, self._marked, known=known
                )
        except TimeoutError:
            _log.info("ledger_marks_kept", device=self.phone.device, why="timeout")
        except LedgerError as exc:
            _log.info("ledger_marks_kept", device=self.phone.device, why=str(exc))

    async def replies(self, action_id: str | None = None) -> list[Reply]:
        """The replies the ledger recorded (to ``action_id``, or every one), oldest first:
        read by this agent's reads and every reconcile pass, never by a read of their own
        (``Ledger.replies``; ``Reply.data()`` is unredacted: mind what you log)."""
        return await self.ledger.replies(action_id)

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
        wait_settled: bool = False,
        not_after: TimeSpec | None = None,
        not_before: TimeSpec | None = None,
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

        ``wait_settled``: a row the phone shows sent but that has not settled yet (VERIFYING:
        the messaging app may still mark it failed until ``settles_at``, 30 minutes by
        default) is read until it settles or ``wait`` ends, and a FAILED seen meanwhile is
        resent within the wait. False (the default): such a row is followed only when it
        settles within ``wait``; otherwise the call returns as soon as the row is found,
        VERIFYING with its ``settles_at`` (waiting could not prove it sooner). A later call
        with the same ``action_id``, ``resume``, a worker or a reconcile pass reads it again
        and never sends it twice (docs/guarantees.md, "The early answer").

        An attempt in review as ``AMBIGUOUS`` (a matching row that may be the owner's as well
        as ours) ends the wait at once: no later read can tell, a person rules.

        ``not_after``: the message's deadline, an aware datetime or a timedelta from the
        action's creation (the same call repeated later names the same deadline): no
        attempt starts at or after it, on any path; once it passes with nothing sent the
        action is EXPIRED, never sent. ``not_before``: its schedule, likewise: no attempt
        starts before it (the call waits for it within ``wait``, else returns PLANNED; a
        later call, ``resume`` or a worker sends it then). Both are part of the intent: the
        same ``action_id`` with other times is a changed intent.

        Raises:
            InvalidInput: empty or malformed recipient or body, a bad action id, or a body
                the send path named at ``open`` cannot send (more than one SMS segment on
                ``framework``); a new action whose deadline has passed, or whose schedule is
                not before its deadline; nothing is recorded or sent.
            FingerprintConflict: ``action_id`` exists with another recipient, body, deadline
                or schedule; nothing is sent.
        """
        after, before, relative = intent_times(not_after, not_before)
        intent = SmsIntent(
            recipient=to, body=body, region=self.region, not_after=after, not_before=before
        )
        how = How(
            wait=wait,
            clock=clock,
            on_wait=on_wait,
            on_step=on_step,
            hard_deadline=hard_deadline,
            gate=gate,
            wait_settled=wait_settled,
            times=relative,
        )
        return await self._drive(action_id, intent, how)

    async def enqueue(
        self,
        action_id: str,
        to: str,
        body: str,
        *,
        pool: str = DEFAULT_POOL,
        gate: Policy | None = None,
        not_after: TimeSpec | None = None,
        not_before: TimeSpec | None = None,
    ) -> Queued:
        """Record ``body`` to ``to`` for the workers of ``pool`` (``starebrain worker``) and
        return at once: this agent's phone is not used (``Ledger.enqueue``, with this agent's
        retry policy and region; ``gate``: the policy gate judging it now, None: the one
        given at ``open``). ``not_after`` and ``not_before`` as for ``send``: no worker
        claims it before ``not_before``, none sends it at or after ``not_after``.

        Raises:
            InvalidInput: a bad id, pool, recipient, body or time; nothing is recorded.
            FingerprintConflict: ``action_id`` exists with another intent (recipient, body,
                deadline or schedule).
        """
        after, before, relative = intent_times(not_after, not_before)
        intent = SmsIntent(
            recipient=to, body=body, region=self.region, not_after=after, not_before=before
        )
        return await self.ledger.enqueue(
            action_id, intent, self.policy, pool=pool, gate=gate, times=relative
        )

    def events(
        self,
        *,
        after: int = 0,
        types: Collection[str] = (),
        action_id: str | None = None,
        follow: bool = True,
        poll_s: float = 0.5,
    ) -> AsyncIterator[LedgerEvent]:
        """The ledger's events after position ``after``, in order, as an async iterator
        (``Ledger.follow_events``): with ``follow`` it waits for new ones and never ends.
        Keep the last ``position`` seen and pass it as ``after`` to resume exactly there
        (docs/events.md)."""
        return self.ledger.follow_events(
            after=after, types=types, action_id=action_id, poll_s=poll_s, follow=follow
        )

    async def _drive(self, action_id: str, intent: SmsIntent, how: How) -> SendOutcome:
        """``send``'s path for an intent as given (``resume`` passes the stored one). When it
        ends with no attempt of its own under way and another action's attempt holds the
        phone, the outcome names that hold (``held_by``). Then the phone's marks of this
        ledger's attempts it holds resolved are removed (``tidy_marks``)."""
        started = how.clock()
        outcome = await self._steps(action_id, intent, how)
        if outcome.held_by is None and outcome.status in _MAY_START:
            held_by = await self._hold(action_id)
            if held_by is not None:
                outcome = attrs.evolve(outcome, held_by=held_by)
        # the marks of what this send resolved, within what is left of a hard deadline
        left = how.wait - (how.clock() - started) if how.hard_deadline else _TIDY_S
        if left > 0:
            # the outcome's attempts were read at its end: those final are not read again
            await self.tidy_marks(within_s=min(_TIDY_S, left), known=outcome.summary.attempts)
        return outcome

    async def _steps(self, action_id: str, intent: SmsIntent, how: How) -> SendOutcome:
        """The steps of ``_drive``: a :class:`~.send_loop.SendLoop`, round after round."""
        return await SendLoop(self, action_id, intent, how).run()

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
        from ``index`` of every such action the ledger holds, oldest first (a deal no send
        changes: phones resuming at different moments, or one after another, deal alike);
        None: none of them (only this phone's own actions). A PLANNED action whose sender
        named a phone (``send`` does) goes to that phone only. ``on_item`` is told each
        action's result as it ends; ``on_step`` what is being done, for a progress display.

        Actions a person must rule on, unresolved attempts the pass could not settle, and
        actions with nothing left to try are left as they are (``starebrain review``), and
        so are actions queued for a pool (``Ledger.enqueue``): its workers send them (the
        pass still reads this phone for their attempts).
        """
        index, count = share if share is not None else (0, 1)
        if count < 1 or not 0 <= index < count:
            raise InvalidInput(f"share must be (index, count) with 0 <= index < count; got {share}")
        # PLANNED actions no sender named a phone for are dealt among the phones resuming by
        # their place among every such action the ledger holds, which no send changes: dealt
        # by their place in the list still PLANNED, a phone that reads the ledger after a
        # faster one (or, in nightly, after it finished) finds that list shortened, deals it
        # anew, and leaves some actions to no phone
        before = await self.ledger.resumable(self.phone.device, now=self.ledger.now())
        anywhere = [
            s.action.action_id
            for s in before
            if not s.attempts and s.action.planned_device is None and s.action.pool is None
        ]
        places = await self.ledger.deal_places(anywhere) if share is not None else {}
        mine = {action_id for action_id, place in places.items() if place % count == index}
        if on_step is not None:
            on_step("reading the phone")
        report = await self.reconcile()
        candidates = await self.ledger.resumable(self.phone.device, now=self.ledger.now())
        chosen = [
            s
            for s in candidates
            if s.action.pool is None  # a queued action is its pool's workers' to send
            and (s.attempts or s.action.planned_device is not None or s.action.action_id in mine)
        ]
        items: list[ResumeItem] = [
            ResumeItem(
                action_id=s.action.action_id,
                before=s.status,
                after=s.status,
                note=(
                    f"left alone: meant for phone {s.action.planned_device} (its sender named"
                    " it); a resume on that phone sends it"
                ),
            )
            for s in await self.ledger.approved_elsewhere(self.phone.device)
        ]
        for item in items:
            if on_item is not None:
                on_item(item)
        for position, summary in enumerate(chosen, start=1):
            action = summary.action
            if on_step is not None:
                on_step(f"action {position} of {len(chosen)}: {action.action_id}")
            try:
                how = How(
                    wait=wait,
                    clock=clock,
                    hard_deadline=True,
                    follow_settling=False,
                    recorded=True,
                )
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

    def own_recent_dispatches(self) -> int:
        """How many sends this agent started in the last minute (its own only; the ledger
        counts every sender's: ``Ledger.dispatches_since``)."""
        times, since = self._dispatched_at, time.monotonic() - 60.0
        while times and times[0] < since:
            times.popleft()
        return len(times)

    async def _within_rate(
        self,
        give_up: float,
        clock: Callable[[], float],
        on_wait: Callable[[str], None] | None,
        stop: asyncio.Event | None = None,
    ) -> bool:
        """Wait while this phone has started ``rate_limit`` sends in the last minute
        (Android's SmsUsageMonitor holds a package's sends past about 30 per 60 s behind a
        confirmation dialog). False when the wait is over first, or ``stop`` is set."""
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
            if not await self._pause(give_up, clock, stop=stop):
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
        self._dispatched_at.append(time.monotonic())
        receipt_taken = False
        epoch = record.evidence.get("fence_epoch")
        fence = (record.dispatch_id, epoch) if isinstance(epoch, str) else None
        if fence is not None and getattr(self.phone, "ledger_id", None) is not None:
            self._marked.add(record.dispatch_id)  # its claim marks this ledger on the phone
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
        except (DispatchUnreachable, DispatchNotReady, DispatchFenceLost) as exc:
            # an outage (another phone at the address too), a phone that refused before the
            # first key (locked, screen off...), or a fence folder cleared under the phone's
            # handle proves nothing about the message: the attempt fails without spending
            # the budget, and the next one waits for its backoff (the phone may come back;
            # the phone's new epoch is asked for)
            if isinstance(exc, DispatchNotReady):
                what = "phone not ready"
                kept: dict[str, object] = {"not_ready": exc.reason, "remedy": exc.remedy}
            elif isinstance(exc, DispatchFenceLost):
                what, kept = "fence lost", {"fence_lost": True}
            else:
                what, kept = "phone unreachable", {"unreachable": True}
            reason, error = f"{what}, nothing sent: {exc}", str(exc)

            def build(rec: ActionRecord) -> Transition:
                return _core.fail_delivery(
                    rec,
                    reason=reason,
                    now=self.ledger.now(),
                    actor=self.actor,
                    evidence={"error": error, **kept},
                )

        except DispatchNotSent as exc:
            reason, error = f"not sent: {exc}", str(exc)

            def build(rec: ActionRecord) -> Transition:
                return _core.fail_delivery(
                    rec,
                    reason=reason,
                    now=self.ledger.now(),
                    actor=self.actor,
                    evidence={"error": error},
                )

        except DispatchOutcomeUnknown as exc:
            # this sender's command is over (timed out, cut off): its fence may be voided now
            self._timed_out.add(record.dispatch_id)
            note = f"outcome unknown: {exc}"

            def build(rec: ActionRecord) -> Transition:
                return _core.note_error(rec, note, now=self.ledger.now(), actor=self.actor)

        else:
            receipt_taken = True

            def build(rec: ActionRecord) -> Transition:
                return _core.record_submission(
                    rec,
                    watermark_id=receipt.watermark_id,
                    device_clock_ms=receipt.device_clock_ms,
                    now=self.ledger.now(),
                    actor=self.actor,
                    evidence=receipt.evidence,
                )

        await self._record_result(record, build)
        return receipt_taken

    async def _record_result(
        self, record: ActionRecord, build: Callable[[ActionRecord], Transition]
    ) -> None:
        """Apply what the send proved (``build`` makes its transition from the attempt as the
        ledger holds it). A compare-and-set lost to a change that left both axes as they
        were (a pass noting an error, a review flag, its fence's stages) does not make the
        proof stale: it is applied again on the attempt as it is now. Lost to a change of
        state (a pass confirmed or failed it), it is superseded: the next read of the ledger
        carries on from what it holds."""
        for _ in range(_RESULT_TRIES):
            try:
                await self.ledger.apply(build(record))
                return
            except StaleTransition:
                fresh = await self.ledger.get_attempt(record.dispatch_id)
                if (fresh.delivery, fresh.acceptance) != (record.delivery, record.acceptance):
                    break
                record = fresh
        _log.info("dispatch_result_superseded", dispatch_id=record.dispatch_id)

    async def _pause(
        self,
        give_up: float,
        clock: Callable[[], float],
        seconds: float | None = None,
        stop: asyncio.Event | None = None,
    ) -> bool:
        """Sleep one poll interval (or ``seconds``) if time is left; False when the wait is
        over, or ``stop`` is set (before or during the sleep: it ends it at once)."""
        left = give_up - clock()
        if left <= 0 or (stop is not None and stop.is_set()):
            return False
        pause = min(self.poll_interval_s if seconds is None else seconds, left)
        if stop is None:
            await asyncio.sleep(pause)
            return True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), pause)
        return not stop.is_set()


async def _ready_phone(
    ledger: Ledger,
    device: str,
    *,
    share_phone: bool,
    check: bool | None,
    deadline_s: float | None,
    key_path: str | Path | None,
    connect_timeout_s: float,
    command_timeout_s: float,
    read_as_system: bool | None,
    send_path: str,
) -> tuple[AndroidPhone, PhoneBinding, SharedPhone | None]:
    """``SmsAgent.open``'s phone: connected (``_connect``), with ``check`` refused when one
    of doctor's checks fails, refused when another ledger's attempts are open on it (unless
    ``share_phone``: ``check_phone_ledger``, whose warning comes back), then bound in
    ``ledger``; closed again when any of that fails."""
    phone = await _connect(
        ledger,
        device,
        deadline_s=deadline_s,
        key_path=key_path,
        connect_timeout_s=connect_timeout_s,
        command_timeout_s=command_timeout_s,
        read_as_system=read_as_system,
        send_path=send_path,
    )
    try:
        if check is not False:
            if check:
                await _refuse_failing_checks(phone)
            else:
                await vet_new_phone(ledger, phone)
        shared = await check_phone_ledger(ledger, phone, phone.address, share_phone=share_phone)
    except BaseException:
        await phone.close()
        raise
    binding = await phone.bind_in(ledger)
    if phone.path_choice:
        _log.info(
            "send_path_chosen",
            device=phone.device,
            send_path=phone.send_path,
            why=phone.path_choice,
        )
    return phone, binding, shared


#: doctor's checks a first contact does not refuse a phone for: states of the moment that the
#: send itself checks, waiting for them and spending nothing (a locked or sleeping screen; no
#: default SMS app, which only the app's path needs).
LEFT_TO_THE_SEND: Final = frozenset({"screen", "sms-role"})


async def vet_new_phone(ledger: Ledger, phone: AndroidPhone) -> None:
    """The first time ``ledger`` meets ``phone`` (``ledger.phones.phone_for`` names none of
    its phones, as ``Ledger.bind_phone`` would), run doctor's checks of it (one round trip)
    and refuse it when one fails, but those in :data:`LEFT_TO_THE_SEND`: a phone that breaks
    an assumption the guarantees rest on (a shell that is not the shell user, a release
    outside 10 to 15, a fence the shell cannot write, a clock far off, an SMS store it cannot
    read…) is stopped before its first send, not found out by a lost or doubled SMS. A phone
    refused is not registered, so the next contact checks it again.

    Raises:
        PhoneUnavailable: a check failed (``retryable`` False), or the checks could not run
            (``retryable`` True); nothing was recorded.
    """
    if phone_for(phone.address, phone.identity, await ledger.phones()) is not None:
        return
    await _refuse_failing_checks(
        phone,
        leave=LEFT_TO_THE_SEND,
        lead="a phone this ledger never met is checked before its first send, and ",
    )


async def _refuse_failing_checks(
    phone: AndroidPhone, *, leave: frozenset[str] = frozenset(), lead: str = ""
) -> None:
    """Doctor's checks of ``phone``, and a refusal naming each one that fails (warnings
    pass: the product works with them, within their limits), but those named in ``leave``;
    ``lead`` goes before the message's "doctor's checks failed".

    Raises:
        PhoneUnavailable: a check failed (``retryable`` False: someone must mend the phone),
            or the checks could not run (``retryable`` True).
    """
    from starebrain_actions.phone.android import PhoneUnavailable

    checks = await phone.checks()
    failed = [check for check in checks if check.verdict == "fail" and check.name not in leave]
    _log.info(
        "phone_checked",
        device=phone.address,
        failed=[check.name for check in failed],
        warned=[check.name for check in checks if check.verdict == "warn"],
    )
    if failed:
        reasons = "; ".join(
            f"{check.name} ({check.evidence}): {check.consequence}" for check in failed
        )
        raise PhoneUnavailable(
            f"{phone.device}: {lead}doctor's checks failed: {reasons}", retryable=False
        )


async def _connect(
    ledger: Ledger,
    device: str,
    *,
    deadline_s: float | None,
    key_path: str | Path | None,
    connect_timeout_s: float,
    command_timeout_s: float,
    read_as_system: bool | None,
    send_path: str,
) -> AndroidPhone:
    """Connect to the phone at ``device`` for ``SmsAgent.open``, with the ledger's proof of
    the framework path, within ``deadline_s`` when given.

    Raises:
        PhoneUnavailable: the phone cannot be reached (or not within the deadline).
        KeyPermissionError: the ADB key is readable by others.
    """
    from starebrain_actions.phone.android import (
        AndroidPhone,
        PhoneUnavailable,
        connect_failure,
        connect_lasting,
    )

    try:
        async with asyncio.timeout(deadline_s):
            return await AndroidPhone.connect(
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
