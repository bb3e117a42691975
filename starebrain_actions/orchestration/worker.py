"""The worker beside the phones (``starebrain worker``): takes the actions queued for its pool
and sends each on the first free phone it holds, through ``send``'s own path.

One task per phone: it connects (again and again while the phone does not answer), takes the
phone in the ledger (``Ledger.hold_phones``: one worker per phone; another worker's phone is
waited for until that worker's heartbeat stops), finishes what was left on it
(``SmsAgent.resume``), then loops: a reconcile pass now and then, the phone's rate limit, a
claim (``Ledger.claim_next``), the action driven as ``resume`` drives one (its proof awaited
up to ``wait``, with a hard deadline), the claim released. A phone found not ready (locked,
unreachable) rests, doubling its rest, before it takes the next action. One more task beats
the worker's heart in the ledger: phones another worker took over after a stale heartbeat
are left at once. And one delivers the ledger's webhooks (``webhooks.deliver_in_background``:
small passes, every request time-bounded, errors logged, never raised into a send).

``stop()`` (SIGTERM) lets every phone finish the action in hand (one sent: its proof is
awaited up to ``wait``; one not started, waiting on the rate limit, a backoff or a phone held
by another attempt, is let go of at once, unsent, with its claim: ``How.stop``), then lets go
of the phones;
``kill -9`` leaves claims and phones that pass to another worker once the heartbeat is stale,
and unresolved attempts that the phone's next holder settles by reading, as ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

import attrs

from starebrain_actions._logging import get_logger
from starebrain_actions.core import decisions as _decisions
from starebrain_actions.core.exceptions import InvalidInput, LedgerUnavailable, PhoneError
from starebrain_actions.core.model import Status
from starebrain_actions.ledger.queue import DEFAULT_POOL, STALE_AFTER, PhoneWorker, check_pool
from starebrain_actions.ledger.store import Ledger
from starebrain_actions.orchestration.send_loop import How
from starebrain_actions.orchestration.webhooks import deliver_in_background

if TYPE_CHECKING:
    from starebrain_actions.core.policy import Policy
    from starebrain_actions.orchestration.agent import SmsAgent
    from starebrain_actions.orchestration.outcome import SendOutcome

_log = get_logger("starebrain.worker")

#: Seconds between two heartbeats (a worker silent for ``STALE_AFTER`` loses its phones).
HEARTBEAT_S: Final = 5.0
#: Seconds an idle phone waits before it asks the queue again.
IDLE_S: Final = 0.5
#: Seconds between two reconcile passes of a phone (reads only).
RECONCILE_EVERY_S: Final = 30.0
#: Seconds between two reads of a phone while a row it sent has not settled past its time.
SETTLE_RETRY_S: Final = 0.5
#: A phone found not ready rests this long first, doubling up to ``REST_MAX_S``.
REST_S: Final = 5.0
REST_MAX_S: Final = 300.0


@attrs.frozen(kw_only=True)
class WorkerEvent:
    """Something a worker did, for its status line and ``--json`` supervisors."""

    #: "phone_ready", "phone_unavailable", "phone_held", "phone_taken", "phone_lost",
    #: "phone_replaced", "phone_other_ledger" (another ledger's attempts are open on it:
    #: waited for), "phone_shared" (another ledger sent from it last: warned once),
    #: "resumed", "claimed", "done", "resting", "stopping", "stopped"
    event: str
    #: the phone, as the worker was given it (its address)
    device: str
    at: datetime
    action_id: str | None = None
    #: the action's status after it was driven ("done")
    status: str | None = None
    detail: str = ""

    def data(self) -> dict[str, Any]:
        """As JSON (the package's converter: times as ``format_time``)."""
        from starebrain_actions.core.convert import to_jsonable

        data: dict[str, Any] = to_jsonable(self)
        return data


def worker_name() -> str:
    """This process's name as a worker: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _alive(pid: int) -> bool:
    """Does a process with this pid run on this host? A zombie does not: killed (``kill
    -9``) and not yet reaped by its parent, it answers ``kill -0`` but will never send
    (Linux ``/proc/PID/stat``: state ``Z``, or ``X`` while it is being reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            # "pid (comm) state ...": comm may hold spaces and parentheses, so after the last ")"
            state = stat.read().rpartition(b")")[2].split()[:1]
    except OSError:
        return True  # no /proc to tell (another OS): kill -0 said it is there
    return state not in ([b"Z"], [b"X"])


#: How often a worker waiting on a phone held by a live worker of this host looks whether
#: that process has ended (a look at this host's processes, not at the ledger).
_LOCAL_LOOK_S: Final = 0.1


@attrs.define
class _PhoneState:
    """What one phone's task remembers between its steps."""

    #: ``time.monotonic()`` of the phone's next reconcile pass
    next_pass: float
    #: attempts this phone sent whose rows are settling (VERIFYING)
    settling: set[str] = attrs.field(factory=set)
    #: how long the phone rests when it is found not ready next
    rest: float = REST_S
    #: the action driven last, whose claim the next claim lets go of
    pending: str | None = None


class Worker:
    """Sends the actions queued for ``pool`` on the phones at ``devices`` (see the module
    docstring). ``db``: the ledger (a SQLite file shared with the agents of this host, or a
    ``postgresql://`` URL shared by every host). ``phone_options`` go to ``SmsAgent.open``
    (``key_path``, ``connect_timeout_s``, ``command_timeout_s``, ``read_as_system``,
    ``send_path``, ``rate_limit``, ``share_phone``)."""

    def __init__(
        self,
        db: str | os.PathLike[str],
        devices: Sequence[str],
        *,
        pool: str = DEFAULT_POOL,
        wait: float = 30.0,
        gate: Policy | None = None,
        stale_after: timedelta = STALE_AFTER,
        heartbeat_s: float = HEARTBEAT_S,
        idle_s: float = IDLE_S,
        reconcile_every_s: float = RECONCILE_EVERY_S,
        on_event: Callable[[WorkerEvent], None] | None = None,
        name: str | None = None,
        deliver_webhooks: bool = True,
        **phone_options: Any,
    ) -> None:
        if not devices:
            raise InvalidInput("a worker needs at least one phone (--device)")
        if len(set(devices)) != len(devices):
            raise InvalidInput("a phone is named twice (--device)")
        if heartbeat_s <= 0 or stale_after.total_seconds() <= heartbeat_s * 2:
            raise InvalidInput("stale_after must be more than two heartbeats")
        self.db = db
        self.devices = tuple(devices)
        self.pool = check_pool(pool)
        self.wait = wait
        self.gate = gate
        self.stale_after = stale_after
        self.heartbeat_s = heartbeat_s
        self.idle_s = idle_s
        self.reconcile_every_s = reconcile_every_s
        self.on_event = on_event
        self.name = name or worker_name()
        self.phone_options = phone_options
        #: deliver the ledger's webhooks beside the sends (``deliver_in_background``)
        self.deliver_webhooks = deliver_webhooks
        #: what each phone (by address) is doing now, for the status line
        self.doing: dict[str, str] = dict.fromkeys(self.devices, "starting")
        #: actions driven to the end of their wait, by this worker
        self.driven = 0
        self._stopping = asyncio.Event()
        #: phone key -> address, for the phones this worker holds now
        self._held: dict[str, str] = {}
        self._ledger: Ledger | None = None

    # ------------------------------------------------------------------ running

    def stop(self) -> None:
        """Finish the action in hand on each phone, then let go of the phones and return
        from ``run`` (SIGTERM)."""
        if not self._stopping.is_set():
            self._stopping.set()
            for device in self.devices:
                self._tell("stopping", device)

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def run(self) -> None:
        """Serve the pool until ``stop()``; the phones are let go of on the way out, even on
        a cancellation.

        Raises:
            LedgerUnavailable / SchemaTooNew: the ledger cannot be used.
        """
        async with Ledger.open(self.db) as ledger:
            self._ledger = ledger
            # an earlier process of the same name (host:pid, as a container's restart gives
            # again) is gone, since this one has its pid: its phones and claims are free now
            await ledger.let_go(self.name)
            beat = asyncio.create_task(self._beat(ledger))
            # webhooks beside the sends: bounded, and never raising into them
            hooks = (
                asyncio.create_task(deliver_in_background(ledger))
                if self.deliver_webhooks
                else None
            )
            try:
                await asyncio.gather(*(self._serve(device) for device in self.devices))
            finally:
                for task in (beat, hooks):
                    if task is not None:
                        task.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await task
                with contextlib.suppress(LedgerUnavailable):
                    await asyncio.shield(ledger.let_go(self.name))
                self._held.clear()
                for device in self.devices:
                    self._tell("stopped", device)

    async def _serve(self, address: str) -> None:
        """One phone's task: connect (again while it does not answer), then drive it."""
        from starebrain_actions.core.exceptions import PhoneHeldByAnotherLedger
        from starebrain_actions.orchestration.agent import SmsAgent
        from starebrain_actions.phone.android import PhoneUnavailable

        rest = REST_S
        options = dict(self.phone_options)
        while not self.stopping:
            self._set(address, "connecting")
            try:
                async with SmsAgent.open(
                    db=self.db, device=address, gate=self.gate, **options
                ) as agent:
                    rest = REST_S
                    shared = agent.shared_phone
                    if shared is not None and not shared.allowed:
                        self._tell("phone_shared", address, detail=shared.message())
                    if not await self._drive_phone(agent, address):
                        return
                    # another phone answers at the address now: let go of the old one
                    # and connect again (the phone there is bound afresh)
                    key = agent.phone.device
                    self._held.pop(key, None)
                    with contextlib.suppress(LedgerUnavailable):
                        await agent.ledger.let_go(self.name, [key])
                    continue
            except PhoneUnavailable as exc:
                self._tell("phone_unavailable", address, detail=str(exc))
            except PhoneHeldByAnotherLedger as exc:
                self._tell("phone_other_ledger", address, detail=str(exc))
            except (PhoneError, LedgerUnavailable, OSError) as exc:
                # the phone or the ledger went away mid-way: what was in hand is in the
                # ledger (its receipt, its claim); connect again and carry on from there
                self._tell("phone_unavailable", address, detail=f"{type(exc).__name__}: {exc}")
            self._set(address, f"not answering; trying again in {rest:.0f} s")
            await self._rest(rest)
            rest = min(REST_MAX_S, rest * 2)

    async def _drive_phone(self, agent: SmsAgent, address: str) -> bool:
        """Hold the phone, resume what was left on it, then serve the queue until stopped
        (or until the phone stops answering: the caller connects again). True: another
        phone answers at the address now (wiped, reset, replaced): connect again."""
        ledger = agent.ledger
        key = agent.phone.device
        if not await self._hold(ledger, key, address):
            return False
        self._tell("phone_ready", address, detail=f"phone {key}")
        self._set(address, "resuming what was left")
        report = await agent.resume(wait=self.wait, share=None)
        if report.items:
            self._tell("resumed", address, detail=f"{len(report.items)} action(s) driven")
        state = _PhoneState(next_pass=time.monotonic() + self.reconcile_every_s)
        try:
            while not self.stopping:
                replaced = getattr(agent.phone, "replaced", None)
                if replaced:
                    self._tell("phone_replaced", address, detail=replaced)
                    return True
                if key not in self._held:
                    await self._let_pending(agent, state)
                    self._tell("phone_lost", address, detail="another worker took it over")
                    if not await self._hold(ledger, key, address):
                        return False
                    continue
                if time.monotonic() >= state.next_pass:
                    await self._let_pending(agent, state)
                    await self._read_phone(agent, address, state)
                if not await self._within_rate(agent):
                    await self._let_pending(agent, state)
                    self._set(address, f"at its send limit ({agent.rate_limit} per minute)")
                    await self._rest(1.0)
                    continue
                # the claim of the action driven last is let go of in the same transaction
                action = await ledger.claim_next(
                    self.pool, key, self.name, stale_after=self.stale_after, release=state.pending
                )
                state.pending = None
                if action is None:
                    self._set(address, "idle")
                    await self._rest(self.idle_s)
                    continue
                await self._send_one(agent, address, action, state)
            return False
        finally:
            with contextlib.suppress(LedgerUnavailable):
                await asyncio.shield(self._let_pending(agent, state))

    async def _read_phone(self, agent: SmsAgent, address: str, state: _PhoneState) -> None:
        """A reconcile pass of the phone; soon again while rows it sent are settling."""
        self._set(address, "reading the phone")
        await agent.reconcile()
        state.next_pass = time.monotonic() + self.reconcile_every_s
        if state.settling:
            # rows not settled yet (the phone's clock runs ahead of ours, or the app was
            # slow): read again soon
            still = await agent.ledger.attempts_by_id(state.settling)
            state.settling = {i for i, r in still.items() if _decisions.settling_until(r)}
            if state.settling:
                state.next_pass = min(state.next_pass, time.monotonic() + SETTLE_RETRY_S)

    async def _send_one(
        self, agent: SmsAgent, address: str, action: Any, state: _PhoneState
    ) -> None:
        """Drive one claimed action, tell what came of it, and plan the phone's next steps:
        a read when its row settles, a rest when the phone was not ready."""
        self._tell("claimed", address, action_id=action.action_id)
        self._set(address, f"sending {action.action_id}")
        outcome = await self._drive(agent, action.action_id, action.intent, state)
        self._tell(
            "done",
            address,
            action_id=action.action_id,
            status=outcome.status.value if outcome is not None else None,
            detail=_outcome_detail(outcome),
        )
        if outcome is None:
            return
        latest = outcome.summary.latest
        if outcome.status is Status.VERIFYING and latest is not None:
            # sent, its row settling: a read once it has settled ends it
            state.settling.add(latest.dispatch_id)
            state.next_pass = min(state.next_pass, time.monotonic() + _settles_in(agent, outcome))
        not_ready = outcome.not_ready
        if not_ready is not None and outcome.status in (Status.FAILED, Status.PLANNED):
            await self._let_pending(agent, state)
            self._tell("resting", address, detail=f"{not_ready}; resting {state.rest:.0f} s")
            self._set(address, f"not ready ({not_ready}); resting {state.rest:.0f} s")
            await self._rest(state.rest)
            state.rest = min(REST_MAX_S, state.rest * 2)
        else:
            state.rest = REST_S

    async def _let_pending(self, agent: SmsAgent, state: _PhoneState) -> None:
        """Let go now of the claim whose release waits for the phone's next claim."""
        if state.pending is not None:
            action_id, state.pending = state.pending, None
            await agent.ledger.release(action_id, self.name)

    async def _drive(
        self, agent: SmsAgent, action_id: str, intent: Any, state: _PhoneState
    ) -> SendOutcome | None:
        """Drive one claimed action as ``resume`` does. Its claim is let go of by the
        phone's next claim (``state.pending``), or at once when it cannot be sent here or the
        drive was cut short (a cancellation)."""
        how = How(
            wait=self.wait,
            clock=time.monotonic,
            hard_deadline=True,
            follow_settling=False,
            gate=self.gate,
            recorded=True,
            stop=self._stopping,
        )
        released = False
        try:
            outcome = await agent._drive(action_id, intent, how)
        except InvalidInput as exc:
            # this phone's send path cannot send it (``--send-path framework`` and a long
            # body): another phone of the pool may; this one looks again later
            _log.warning("queued_action_not_sent", action_id=action_id, error=str(exc))
            released = True
            later = agent.ledger.now() + timedelta(seconds=REST_MAX_S)
            await agent.ledger.release(action_id, self.name, not_before=later)
            return None
        except BaseException:
            released = True
            with contextlib.suppress(LedgerUnavailable):
                await asyncio.shield(agent.ledger.release(action_id, self.name))
            raise
        finally:
            self.driven += 1
            if not released:
                state.pending = action_id
        return outcome

    async def _within_rate(self, agent: SmsAgent) -> bool:
        """May the phone start another send now? Asked of the ledger (every sender's sends
        count) only once this worker's own sends of the last minute come near the limit:
        below it, the send's own check (``SmsAgent._within_rate``) is enough."""
        recent = agent.own_recent_dispatches()
        if recent < agent.rate_limit // 2:
            return True
        since = agent.ledger.now() - timedelta(minutes=1)
        return await agent.ledger.dispatches_since(agent.phone.device, since) < agent.rate_limit

    # ------------------------------------------------------------------ the phones held

    async def _hold(self, ledger: Ledger, key: str, address: str) -> bool:
        """Take the phone in the ledger, waiting while another live worker holds it; False
        when the worker stops first."""
        told = ""
        while not self.stopping:
            now = ledger.now()
            me = PhoneWorker(
                device=key,
                worker=self.name,
                host=socket.gethostname(),
                pid=os.getpid(),
                pool=self.pool,
                address=address,
                claimed_at=now,
                heartbeat_at=now,
                doing="starting",
            )
            holders = {w.device: w for w in await ledger.phone_workers()}
            other = holders.get(key)
            gone = []
            if other is not None and other.host == me.host and not _alive(other.pid):
                gone.append(other.worker)
            refused = await ledger.hold_phones(
                me, [(key, address)], stale_after=self.stale_after, gone=gone
            )
            if key not in refused:
                self._held[key] = address
                if other is not None and other.worker != self.name:
                    self._tell("phone_taken", address, detail=f"from worker {other.worker}")
                return True
            holder = refused[key]
            if holder.worker != told:
                told = holder.worker
                self._tell("phone_held", address, detail=f"by worker {holder.worker}")
            self._set(address, f"held by worker {holder.worker}; waiting")
            if holder.host != me.host:
                await self._rest(self.heartbeat_s)
                continue
            # a worker of this host: its end is seen here at once, without waiting for the
            # ledger's heartbeat (a kill -9 takes effect as the new worker starts)
            for _ in range(max(1, round(self.heartbeat_s / _LOCAL_LOOK_S))):
                if not _alive(holder.pid) or self.stopping:
                    break
                await self._rest(_LOCAL_LOOK_S)
        return False

    async def _beat(self, ledger: Ledger) -> None:
        """Beat the heart every ``heartbeat_s``; phones taken over meanwhile are left."""
        while True:
            await asyncio.sleep(self.heartbeat_s)
            if not self._held:
                continue
            doing = {key: self.doing.get(address, "") for key, address in self._held.items()}
            try:
                held = await ledger.heartbeat(self.name, doing)
            except LedgerUnavailable as exc:
                _log.warning("heartbeat_failed", worker=self.name, error=str(exc))
                continue
            for key in set(self._held) - held:
                self._held.pop(key, None)

    # ------------------------------------------------------------------ telling

    async def _rest(self, seconds: float) -> None:
        """Sleep, cut short by ``stop()``."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    def _set(self, address: str, doing: str) -> None:
        self.doing[address] = doing

    def _tell(self, event: str, device: str, **fields: Any) -> None:
        now = self._ledger.now() if self._ledger is not None else datetime.now(UTC)
        told = WorkerEvent(event=event, device=device, at=now, **fields)
        _log.info("worker_" + event, worker=self.name, device=device, **fields)
        if self.on_event is not None:
            self.on_event(told)


def _settles_in(agent: SmsAgent, outcome: SendOutcome) -> float:
    """Seconds until the row of a VERIFYING outcome has settled (and a read can end it)."""
    latest = outcome.summary.latest
    due = _decisions.settling_until(latest) if latest is not None else None
    if due is None:
        return 1.0
    return max(0.05, (due - agent.ledger.now()).total_seconds() + 0.05)


def _outcome_detail(outcome: SendOutcome | None) -> str:
    if outcome is None:
        return "not sent: the phone cannot send it (see the log)"
    if outcome.gate is not None:
        return f"{outcome.gate.verdict.value} by {outcome.gate.rule}: {outcome.gate.detail}"
    if outcome.not_ready is not None:
        return f"phone not ready: {outcome.not_ready}"
    if outcome.held_by is not None:
        return f"phone held by attempt {outcome.held_by.dispatch_id}"
    return ""
