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
from datetime import timedelta
from pathlib import Path

import attrs

from starebrain_actions import _core
from starebrain_actions._ledger import Ledger
from starebrain_actions._logging import get_logger
from starebrain_actions._model import (
    ActionRecord,
    ActionSummary,
    DeliveryState,
    RedispatchReason,
    RetryPolicy,
    SmsIntent,
    Status,
)
from starebrain_actions._ports import Phone
from starebrain_actions._reconciler import (
    VOID_AFTER,
    Change,
    DeviceReport,
    ReconcilePass,
    reconcile_device,
    reconcile_pending,
)
from starebrain_actions.exceptions import (
    AttemptInFlight,
    AttemptRefused,
    DeviceBusy,
    DispatchNotSent,
    DispatchOutcomeUnknown,
    DispatchUnreachable,
    InvalidInput,
    LinkDown,
    PhoneError,
    StaleTransition,
)

__all__ = [
    "Change",
    "DeviceReport",
    "ReconcilePass",
    "SendOutcome",
    "SmsAgent",
    "reconcile_pending",
]

_log = get_logger("starebrain.agent")

#: With a hard deadline, no attempt starts with less time left than this: a send cut off by
#: the deadline halfway through its script leaves an attempt only a later read or void can
#: settle, where not starting costs nothing.
MIN_DISPATCH_S = 0.5

#: Sends started on one phone per minute at most, by default: Android's SmsUsageMonitor lets a
#: package send about 30 SMS per 60 s before a confirmation dialog holds the next one.
RATE_LIMIT_PER_MINUTE = 30


@attrs.frozen(kw_only=True)
class SendOutcome:
    """Where an action stands when ``send`` returns."""

    #: the action, its attempts and what is derived from them
    summary: ActionSummary

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
        send_path: str = "ui",
        deadline_s: float | None = None,
    ) -> AsyncIterator[SmsAgent]:
        """Open the ledger at ``db`` and connect to the phone at ``device`` (``host:port``).

        ``read_as_system``: read the phone through ``su 1000`` (userdebug/eng builds), which
        also shows outbox, failed and queued rows (default: ``$STAREBRAIN_READ_AS_SYSTEM``).
        ``void_after``: how old another sender's unresolved attempt must be before this agent
        voids its fence on the phone (default: the command timeout plus 5 s, at least 25 s:
        a live sender's command is over by then). ``rate_limit``: sends started on the phone
        per minute at most (Android holds more behind a confirmation dialog). ``send_path``:
        "ui" (the messaging app), "framework" (``service call isms`` as the shell user: no
        UI, no RCS, our rows told apart by ``creator``) or "auto" (the framework when a probe
        of the phone says it works). ``deadline_s``: connecting (with its first round trips)
        must be over within this many seconds, or PhoneUnavailable.

        Raises:
            LedgerUnavailable / SchemaTooNew: the ledger cannot be used.
            PhoneUnavailable: the phone cannot be reached (nothing is recorded).
            KeyPermissionError: the ADB key is readable by others.
        """
        from starebrain_actions._android import AndroidPhone, PhoneUnavailable, connect_failure

        async with Ledger.open(db) as ledger:
            try:
                async with asyncio.timeout(deadline_s):
                    phone = await AndroidPhone.connect(
                        device,
                        key_path=key_path,
                        connect_timeout_s=connect_timeout_s,
                        command_timeout_s=command_timeout_s,
                        read_as_system=read_as_system,
                        send_path=send_path,
                    )
            except TimeoutError as exc:
                raise PhoneUnavailable(
                    connect_failure(exc)
                    or f"{device}: did not answer within the {deadline_s:g} s deadline"
                ) from None
            phone.remember_highest_id(await ledger.device_floor(device, ledger.now()))
            try:
                yield cls(
                    ledger,
                    phone,
                    policy=policy,
                    region=region,
                    poll_interval_s=poll_interval_s,
                    rate_limit=rate_limit,
                    # another sender's command may take up to its timeout: void after that
                    void_after=(
                        void_after
                        if void_after is not None
                        else max(VOID_AFTER, timedelta(seconds=command_timeout_s + 5))
                    ),
                )
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
    ) -> SendOutcome:
        """Send ``body`` to ``to`` at most once for ``action_id``; wait up to ``wait`` seconds
        for proof of the outcome.

        ``on_wait(message)`` is told, once per blocker, when the send waits for another
        action's attempt that holds the phone. ``on_step(step)`` is told each step as it
        starts ("sending", "waiting for the phone's row", "waiting for attempt …", "backing
        off …"), for a progress display.

        ``hard_deadline``: ``wait`` bounds every step on the phone too (reads, the fence,
        the send command itself), so the call returns within ``wait`` seconds whatever the
        phone does; no attempt starts with less than ``MIN_DISPATCH_S`` left, and a send cut
        off by the deadline is an unknown outcome, settled later by a read (never resent).
        Without it, a step already started runs to its own timeout.

        Raises:
            InvalidInput: empty or malformed recipient or body, or a bad action id.
            FingerprintConflict: ``action_id`` exists with another recipient or body;
                nothing is sent.
        """
        intent = SmsIntent(recipient=to, body=body, region=self.region)
        action = await self.ledger.create_action(action_id, intent, self.policy)
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
                try:
                    async with asyncio.timeout(bound()):
                        await reconcile_device(
                            self.ledger,
                            self.phone,
                            duplicate_watch=timedelta(0),
                            void_after=self.void_after,
                            void_now=self._timed_out,
                        )
                except TimeoutError:
                    return SendOutcome(summary=await self.ledger.summary(action_id))
                summary = await self.ledger.summary(action_id)
                latest = summary.latest
                unresolved = latest is not None and (
                    latest.delivery is DeliveryState.PENDING or summary.status is Status.VERIFYING
                )
            if unresolved:
                if not await self._pause(give_up, clock):
                    return SendOutcome(summary=summary)
                continue
            now = self.ledger.now()
            decision = _core.should_redispatch(action, summary.attempts, now)
            if not decision:
                if decision.reason is RedispatchReason.BACKOFF and decision.retry_at:
                    delay = (decision.retry_at - now).total_seconds()
                    if clock() + delay <= give_up:
                        tell(f"backing off {delay:.1f} s before the next attempt")
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
                    fence_evidence = await self._fence_evidence()
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
                    action_id, self.phone.device, actor=self.actor, evidence=fence_evidence
                )
            except AttemptInFlight:
                continue  # another sender won the race: reconcile its attempt instead
            except DeviceBusy as busy:
                tell(f"waiting for attempt {busy.holder_dispatch_id} (it holds the phone)")
                if on_wait is not None and busy.holder_dispatch_id != told:
                    told = busy.holder_dispatch_id
                    on_wait(
                        f"waiting for attempt {busy.holder_dispatch_id} of action"
                        f" {busy.holder_action_id} on this phone (unresolved since"
                        f" {busy.holder_since}); resolve it or wait"
                    )
                if not await self._pause(give_up, clock):
                    return SendOutcome(summary=await self.ledger.summary(action_id))
                continue
            except AttemptRefused:
                return SendOutcome(summary=await self.ledger.summary(action_id))
            await self._dispatch(record, intent, budget_s=bound())

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

    async def _fence_evidence(self) -> dict[str, str]:
        """The phone's fence epoch, noted on the attempt before it is sent, so that a later
        pass can prove on the phone that its script never ran, and the send path's own
        evidence (the framework path's ``creator``). A phone that cannot give an epoch gives
        an attempt without a fence (it can then only be confirmed, never voided)."""
        path = getattr(self.phone, "path_evidence", None)
        known: dict[str, str] = dict(path()) if callable(path) else {}
        try:
            return {**known, "fence_epoch": await self.phone.fence_epoch()}
        except LinkDown:
            raise  # the phone is out of reach: no attempt starts now (the caller waits)
        except PhoneError as exc:
            _log.warning("fence_epoch_unavailable", device=self.phone.device, error=str(exc))
            return known

    async def _dispatch(
        self, record: ActionRecord, intent: SmsIntent, *, budget_s: float | None = None
    ) -> None:
        """Send once; record what the result proves. Never raises a phone error, and a lost
        compare-and-set (another process settled the attempt meanwhile) is not an error: the
        next read of the ledger carries on from what it holds. ``budget_s`` cuts the send
        command off (an unknown outcome) when it has not answered within that time."""
        self.dispatches += 1
        epoch = record.evidence.get("fence_epoch")
        fence = (record.dispatch_id, epoch) if isinstance(epoch, str) else None
        try:
            try:
                async with asyncio.timeout(budget_s):
                    receipt = await self.phone.dispatch(intent, fence=fence)
            except TimeoutError:
                raise DispatchOutcomeUnknown(
                    f"the send command was cut off by the deadline after {budget_s:.1f} s"
                ) from None
        except DispatchUnreachable as exc:
            # an outage proves nothing about the message: the attempt fails without spending
            # the budget, and the next one waits for its backoff (the phone may come back)
            transition = _core.fail_delivery(
                record,
                reason=f"phone unreachable, nothing sent: {exc}",
                now=self.ledger.now(),
                actor=self.actor,
                evidence={"error": str(exc), "unreachable": True},
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

    async def _pause(self, give_up: float, clock: Callable[[], float]) -> bool:
        """Sleep one poll interval if time is left; False when the wait is over."""
        left = give_up - clock()
        if left <= 0:
            return False
        await asyncio.sleep(min(self.poll_interval_s, left))
        return True
