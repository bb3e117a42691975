"""The loop of one send: ``SmsAgent.send`` (and each action ``resume`` drives) reads the phone
for the action's unresolved attempt, waits for its proof, or starts its next attempt, round
after round, until its outcome is proven or its wait is over.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from starebrain_actions.core import decisions as _decisions
from starebrain_actions.core.exceptions import (
    AttemptInFlight,
    AttemptRefused,
    DeviceBusy,
    LinkDown,
    PolicyRefused,
    WrongPhone,
)
from starebrain_actions.core.model import (
    ActionRecord,
    ActionSummary,
    DeliveryState,
    IntentTimes,
    RedispatchReason,
    ReviewReason,
    SmsIntent,
    Status,
)
from starebrain_actions.orchestration.outcome import SendOutcome, hold_text
from starebrain_actions.orchestration.reconciler import DeviceReport

if TYPE_CHECKING:
    from starebrain_actions.core.policy import Policy
    from starebrain_actions.orchestration.agent import SmsAgent

#: With a hard deadline, no attempt starts with less time left than this: a send cut off by
#: the deadline halfway through its script leaves an attempt only a later read or void can
#: settle, where not starting costs nothing.
MIN_DISPATCH_S = 0.5
#: While a send waits for another action's attempt that holds the phone, it reads the phone
#: for that attempt (as a reconcile pass) this often at most.
BLOCKED_PASS_S = 2.0
#: While a confirmed row settles (VERIFYING: the phone shows it sent, but the app may still
#: mark it failed), the sender reads the phone this often at most, and once more when it
#: settles.
SETTLE_POLL_S = 2.0


@attrs.frozen(kw_only=True)
class How:
    """How one action is driven (``send``'s arguments; ``resume``'s own)."""

    wait: float
    clock: Callable[[], float]
    on_wait: Callable[[str], None] | None = None
    on_step: Callable[[str], None] | None = None
    hard_deadline: bool = False
    #: False: return once the phone shows the message sent and it only has to settle
    #: (VERIFYING: its attempt no longer holds the phone), wherever its settle time lies
    follow_settling: bool = True
    #: True: follow a settling row until it settles or the wait ends; False (``send``'s
    #: default, the early answer): follow it only when it settles within the wait, else
    #: return at once with VERIFYING and its ``settles_at`` (waiting out ``wait`` could not
    #: prove it, only show an early FAILED sooner: docs/guarantees.md)
    wait_settled: bool = False
    #: the policy gate of this send (None: the ledger's)
    gate: Policy | None = None
    #: the deadline and schedule given as durations, counted from the action's creation
    times: IntentTimes | None = None
    #: the action is in the ledger already (``resume``, a worker): it is not created again
    recorded: bool = False
    #: set when the driver is told to stop (a worker's SIGTERM): every wait before the
    #: attempt's receipt (the rate limit, a backoff, a phone held by another attempt, an
    #: outage) ends at once, with nothing started; an attempt already sent is still
    #: followed (None: never told)
    stop: asyncio.Event | None = None


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


def _unresolved(summary: ActionSummary) -> bool:
    """Is the action's latest attempt still unresolved (its delivery unproven, or its row
    not settled yet)?"""
    latest = summary.latest
    return latest is not None and (
        latest.delivery is DeliveryState.PENDING or summary.status is Status.VERIFYING
    )


class SendLoop:
    """One action driven through ``send``'s path (``SmsAgent._steps``): each round reads the
    phone for the action's unresolved attempt, waits for its proof, or starts its next
    attempt, until its outcome is proven or the wait is over. The agent's own steps (its
    reads, pauses, rate limit, fence and dispatch) do the work; this holds what one call
    remembers between rounds."""

    def __init__(self, agent: SmsAgent, action_id: str, intent: SmsIntent, how: How) -> None:
        self.agent = agent
        self.ledger = agent.ledger
        self.action_id = action_id
        self.intent = intent
        self.how = how
        self.clock = how.clock
        self.give_up = 0.0
        #: the dispatch id of the last hold ``on_wait`` was told about
        self.told = ""
        #: the last step ``on_step`` was told
        self.step = ""
        #: the reads of the attempt this call dispatched, while its message is not found
        self.watch: _Watch | None = None
        #: ``clock()`` from which a send blocked by another action's attempt reads the phone
        self.blocked_pass_at = 0.0
        #: the attempt this call dispatched in the round just ended (its command returned)
        self.dispatched: ActionRecord | None = None

    async def run(self) -> SendOutcome:
        """Create the action (idempotent; unless it is ``recorded``), then go round until a
        round returns the outcome."""
        agent, clock = self.agent, self.clock
        check_body = getattr(agent.phone, "check_body", None)
        if callable(check_body):
            check_body(self.intent.body)  # a path named by the caller that cannot send it
        if not self.how.recorded:
            await self.ledger.create_action(
                self.action_id,
                self.intent,
                agent.policy,
                device=agent.phone.device,
                times=self.how.times,
            )
        self.give_up = clock() + max(0.0, self.how.wait)
        self.blocked_pass_at = clock()
        while True:
            outcome = await self._round()
            if outcome is not None:
                return outcome

    def tell(self, now_doing: str) -> None:
        """Tell ``on_step`` the step now being done, once per change."""
        on_step = self.how.on_step
        if on_step is not None and now_doing != self.step:
            self.step = now_doing
            on_step(now_doing)

    def bound(self) -> float | None:
        """Seconds a phone step may take (None: its own timeout only)."""
        return max(0.0, self.give_up - self.clock()) if self.how.hard_deadline else None

    async def _summary_outcome(self) -> SendOutcome:
        """Where the action stands now."""
        return SendOutcome(summary=await self.ledger.summary(self.action_id))

    async def _round(self) -> SendOutcome | None:
        """One round: read the phone for this device's unresolved attempt, then wait for its
        proof, or start the next attempt. None: go round again."""
        dispatched, self.dispatched = self.dispatched, None
        if dispatched is not None:
            # the attempt this call just dispatched, its submission recorded PENDING by this
            # call: the summary would only say "read the phone for it", so it is not read;
            # the read's own summary says where it stands (had another sender settled it
            # meanwhile, the read finds nothing new)
            read = await self._read(dispatched)
            if read is None:
                return await self._summary_outcome()
            return await self._after_read(read)
        summary = await self.ledger.summary(self.action_id)
        latest = summary.latest
        if _unresolved(summary) and latest is not None and latest.device == self.agent.phone.device:
            # only this device's unresolved attempts: a poll reads just their window
            # a read, then (if it settles nothing) the fence: an attempt whose script
            # never ran is voided at once and retried, whoever started it
            read = await self._read(latest)
            if read is None:
                return await self._summary_outcome()
            summary = read
        return await self._after_read(summary)

    async def _after_read(self, summary: ActionSummary) -> SendOutcome | None:
        """The round's end: wait for the unresolved attempt's proof, or start the next."""
        if _unresolved(summary):
            return await self._while_unresolved(summary)
        return await self._next_attempt(summary)

    async def _read(self, latest: ActionRecord) -> ActionSummary | None:
        """A reconcile pass for the unresolved attempt, when the watch of the attempt this
        call dispatched says a read can find its message; what the pass left. None: the
        deadline cut the read off."""
        self.tell("waiting for the phone's row")
        watch = self.watch
        if watch is not None and watch.dispatch_id != latest.dispatch_id:
            watch = self.watch = None
        read_at = 0.0
        if watch is not None:
            # not before the phone can have sent it (a read that early shows nothing);
            # the wait's end still gets its read, as without a plan
            delay = min(watch.next_at, self.give_up) - self.clock()
            if delay > 0:
                await asyncio.sleep(delay)
            read_at = self.clock() - watch.returned
        try:
            async with asyncio.timeout(self.bound()):
                report = await self.agent._read_pass()
        except TimeoutError:
            return None
        summary = await self.ledger.summary(self.action_id)
        self._learn(summary, read_at, report)
        return summary

    def _learn(self, summary: ActionSummary, read_at: float, report: DeviceReport) -> None:
        """What a read at ``read_at`` teaches the watch: the phone's send time once it found
        the message, else when to read next."""
        latest, watch = summary.latest, self.watch
        if watch is None or latest is None:
            return
        timer = self.agent.send_timer
        if latest.dispatch_id != watch.dispatch_id:
            self.watch = None
        elif latest.delivery is not DeliveryState.PENDING:
            if latest.delivery is DeliveryState.CONFIRMED:
                # one windowed read is one round trip unless the rows changed
                # while it ran (the phone was sending it)
                timer.learn(watch.missed, read_at, caught_sending=report.round_trips > 1)
            self.watch = None
        else:
            watch.missed.append(read_at)
            offset, watch.retry_s = timer.next_read(
                read_at,
                self.clock() - watch.returned,
                watch.retry_s,
                self.agent.poll_interval_s,
                watch.due_s,
            )
            watch.next_at = watch.returned + offset

    async def _while_unresolved(self, summary: ActionSummary) -> SendOutcome | None:
        """Wait for the unresolved attempt's proof: until the watch's next read, while its row
        settles, or one poll interval; the outcome when the wait is over or a person must
        rule."""
        latest = summary.latest
        if latest is not None and latest.review_reason in (
            ReviewReason.AMBIGUOUS,
            ReviewReason.UNSETTLED,
        ):
            # a person must rule: whose the row is (AMBIGUOUS), or whether a row that
            # left the phone's view before it settled went out (UNSETTLED); no later read
            # can tell, so waiting out ``wait`` would only delay the answer
            return SendOutcome(summary=summary)
        if self.watch is not None:
            if self.give_up - self.clock() <= 0:
                return SendOutcome(summary=summary)
            return None  # the next read comes at the watch's time
        due = _decisions.settling_until(latest) if latest is not None else None
        if due is not None and summary.status is Status.VERIFYING:
            until = (due - self.ledger.now()).total_seconds() + 0.01
            if not self.how.follow_settling or (
                not self.how.wait_settled and until > self.give_up - self.clock()
            ):
                # the phone is free for the next; and a settle past the wait's end cannot
                # be proven by waiting: the answer (VERIFYING, its settles_at) is known now
                return SendOutcome(summary=summary)
            # sent by the phone, not yet settled: read now and then (an early FAILED
            # is worth seeing), and once more when it settles
            self.tell("sent by the phone, waiting for it to settle")
            pause = max(self.agent.poll_interval_s, min(SETTLE_POLL_S, until))
            if not await self.agent._pause(self.give_up, self.clock, pause):
                return SendOutcome(summary=summary)
            return None
        if not await self.agent._pause(self.give_up, self.clock):
            return SendOutcome(summary=summary)
        return None

    async def _next_attempt(self, summary: ActionSummary) -> SendOutcome | None:
        """Start the action's next attempt if ``should_redispatch`` allows it now (else back
        off, or return), within the phone's rate limit and the time left."""
        now = self.ledger.now()
        # the stored action (an operator's grant may have come since it was created)
        action = summary.action
        decision = _decisions.should_redispatch(action, summary.attempts, now)
        if not decision:
            if decision.waits and decision.retry_at:
                delay = (decision.retry_at - now).total_seconds()
                if self.clock() + delay <= self.give_up:
                    remedy = SendOutcome(summary=summary).not_ready
                    if decision.reason is RedispatchReason.SCHEDULED:
                        self.tell(f"scheduled: waiting {delay:.1f} s for its --not-before")
                    elif remedy is not None:
                        self.tell(
                            f"the phone is not ready: {remedy}; trying again in {delay:.1f} s"
                        )
                    else:
                        self.tell(f"backing off {delay:.1f} s before the next attempt")
                    if not await self.agent._pause(self.give_up, self.clock, delay, self.how.stop):
                        return await self._summary_outcome()  # told to stop: not started
                    return None
            if decision.reason is RedispatchReason.EXPIRED and await self.ledger.expire(
                self.action_id, now=now
            ):
                return await self._summary_outcome()  # its expiry is recorded: read afresh
            return SendOutcome(summary=summary)
        if not await self.agent._within_rate(
            self.give_up, self.clock, self.how.on_wait, self.how.stop
        ):
            return await self._summary_outcome()
        if self.how.stop is not None and self.how.stop.is_set():
            self.tell("told to stop: not started")
            return await self._summary_outcome()
        if self.how.hard_deadline and self.give_up - self.clock() < MIN_DISPATCH_S:
            self.tell("no time left to start a send")
            return SendOutcome(summary=summary)
        return await self._start_attempt()

    async def _start_attempt(self) -> SendOutcome | None:
        """Note the fence, take the attempt's receipt and the phone's lease, and dispatch
        once; a phone held by another action's attempt is waited for."""
        agent = self.agent
        replaced = getattr(agent.phone, "replaced", None)
        if isinstance(replaced, str) and replaced:
            # another phone answers at the address now (wiped, reset or replaced): this
            # connection refuses it for good, so no attempt of this call can reach a phone;
            # a new connection binds the phone there afresh (the worker makes one at once)
            self.tell(f"not sent: {replaced}")
            return await self._summary_outcome()
        self.tell("sending")
        try:
            async with asyncio.timeout(self.bound()):
                fence_evidence = await agent._fence_evidence(self.intent.body)
        except TimeoutError:
            return await self._summary_outcome()
        except LinkDown:
            # an outage: start no attempt whose fence could not be read; wait for the
            # phone within the wait (an attempt without a fence could never be voided)
            self.tell("waiting for the phone to answer")
            if not await agent._pause(self.give_up, self.clock, stop=self.how.stop):
                return await self._summary_outcome()
            return None
        try:
            record = await self.ledger.begin_attempt(
                self.action_id,
                agent.phone.device,
                actor=agent.actor,
                evidence=fence_evidence,
                gate=self.how.gate,
            )
        except AttemptInFlight:
            return None  # another sender won the race: reconcile its attempt instead
        except PolicyRefused as refused:
            self.tell(f"stopped by the policy gate: {refused}")
            summary = await self.ledger.summary(self.action_id)
            return SendOutcome(summary=summary, gate=refused.gate)
        except DeviceBusy as busy:
            return await self._blocked(busy)
        except WrongPhone as wrong:
            self.tell(f"not sent: {wrong}")
            summary = await self.ledger.summary(self.action_id)
            return SendOutcome(summary=summary, refused=str(wrong))
        except AttemptRefused:
            return await self._summary_outcome()
        await agent._seed_send_timer()
        started = self.clock()
        if await agent._dispatch(record, self.intent, budget_s=self.bound()):
            returned = self.clock()
            self.watch = _Watch(
                dispatch_id=record.dispatch_id,
                returned=returned,
                next_at=returned + agent.send_timer.first_read(returned - started),
                due_s=agent.send_timer.due(returned - started),
                retry_s=agent.send_timer.first_retry(agent.poll_interval_s),
            )
            self.dispatched = record
        return None

    async def _blocked(self, busy: DeviceBusy) -> SendOutcome | None:
        """Another action's attempt holds the phone: say so (once per holder), read the phone
        for it now and then, and wait; None: go round again (it may be freed)."""
        agent = self.agent
        hold = await agent._hold(self.action_id)
        self.tell(f"waiting for attempt {busy.holder_dispatch_id} (it holds the phone)")
        on_wait = self.how.on_wait
        if on_wait is not None and hold is not None and hold.dispatch_id != self.told:
            self.told = hold.dispatch_id
            on_wait(hold_text(hold, self.ledger.now()))
        if self.clock() >= self.blocked_pass_at:
            # what a reconcile pass runs on the holder, by the pass's own code: read,
            # void its fence once old enough, move it to review past its limit
            self.blocked_pass_at = self.clock() + BLOCKED_PASS_S
            try:
                async with asyncio.timeout(self.bound()):
                    await agent._read_pass()
            except TimeoutError:
                return await agent._outcome(self.action_id)
            if not await self.ledger.holders(agent.phone.device):
                return None  # freed: start this action's attempt now
        if not await agent._pause(self.give_up, self.clock, stop=self.how.stop):
            return await agent._outcome(self.action_id)
        return None
