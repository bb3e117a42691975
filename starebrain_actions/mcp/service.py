"""What the MCP server's tools do, over one ledger and the server's phones.

Inside one server process, concurrent ``send_sms`` calls for one action share one running send
(a *flight*): the send runs in a task the server owns, so a call the client cancels or gives
up on (a timeout) leaves the send to finish its step on the phone instead of cutting it off
mid-command, and a repeat joins it. Calls for different actions on one phone share one ADB
connection (``android_bridge.Device`` runs one command at a time) and one ``SmsAgent``; the
ledger's device lease keeps a single send in flight per phone, across processes too.

A call naming a ``pool`` reaches no phone: it queues the action in the ledger
(``Ledger.enqueue``, the policy gate judging it there and then) for the workers beside that
pool's phones (``starebrain worker --pool``), and returns at once. A queued action is the
workers' to send: a later call without ``pool`` answers with its status and sends nothing.

What binds an action is kept with it in the ledger (DESIGN.md invariant 9) and the service
only adds to it: an action is created with the phone the call sends it through
(``planned_device``, the phone's key) and, for a client of ``--clients``, its owner; a later
call sends it through that phone whatever ``device`` it names, and sends nothing when that
phone is not one of this server's. A DENY is final: a denied action is settled, never sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal, cast

import attrs
from mcp.server.mcpserver.exceptions import ToolError

from android_bridge.exceptions import BridgeError
from starebrain_actions._logging import get_logger
from starebrain_actions.core.decisions import should_redispatch
from starebrain_actions.core.derived_ids import (
    choose_derived_generation,
    derive_action_id,
    derived_generation_id,
    earlier_message,
    settled,
)
from starebrain_actions.core.exceptions import (
    FingerprintConflict,
    InvalidInput,
    NotFound,
    PhoneError,
    StaleTransition,
    StarebrainError,
)
from starebrain_actions.core.model import (
    ActionSummary,
    IntentTimes,
    PhoneHold,
    SmsIntent,
    Status,
    check_action_id,
    intent_times,
    read_time_spec,
)
from starebrain_actions.ledger.queue import check_pool
from starebrain_actions.mcp.auth import UNSCOPED, ActionScope
from starebrain_actions.mcp.config import ServerConfig
from starebrain_actions.mcp.phones import Phones
from starebrain_actions.mcp.results import (
    OPEN_STATUSES,
    ChangeView,
    DeviceView,
    EventsPage,
    EventView,
    ReconcileResult,
    RepliesResult,
    ReplyView,
    ReviewList,
    SmsResult,
    sms_result,
    status_line,
)
from starebrain_actions.mcp.scoped import check_scoped_id, hold_seen, own_ids, seen
from starebrain_actions.mcp.send_cap import CappedLedger, SendCap, SendLimitReached
from starebrain_actions.orchestration.outcome import SendOutcome, hold_on
from starebrain_actions.orchestration.reconciler import (
    DeviceReport,
    reconcile_device,
    void_after_for,
)
from starebrain_actions.orchestration.send_loop import MIN_DISPATCH_S
from starebrain_actions.phone.send_path import check_send_path
from starebrain_actions.render import values as _render_values

__all__ = ["SmsService", "open_service"]

_log = get_logger("starebrain.mcp")


@attrs.frozen(kw_only=True)
class _Route:
    """The phone a send of an action runs on, and what the call is told about it."""

    #: its address among the server's phones (None: none of them may send it)
    address: str | None
    #: said first in the result ("": nothing to say)
    note: str = ""
    #: the action is bound to a phone that is not this server's: ``note`` replaces the
    #: result's next step (a call here never sends it)
    elsewhere: bool = False


def _noted(result: SmsResult, note: str) -> SmsResult:
    """``result`` with ``note`` said before its next step."""
    if note:
        result.next_step = f"{note} {result.next_step}"
    return result


@attrs.define
class _Flight:
    """One running ``SmsAgent.send`` of an action, shared by every call that asks for it."""

    task: asyncio.Task[SendOutcome]
    #: loop time at which its wait ends
    ends_at: float
    #: the address of the phone it sends through
    device: str = ""
    #: it follows a settling row until it settles (``send_sms(wait_settled=True)``)
    wait_settled: bool = False


#: The most events one ``get_events`` call returns.
EVENTS_PAGE: Final = 500


class SmsService:
    """What the tools do, over one ledger and the server's phones."""

    def __init__(self, ledger: CappedLedger, config: ServerConfig) -> None:
        self.ledger = ledger
        self.config = config
        self.phones = Phones(ledger, config)
        self._flights: dict[str, _Flight] = {}
        #: the step each running send is at (``SmsAgent.send``'s ``on_step``)
        self._steps: dict[str, str] = {}
        self._cap = (
            SendCap(limit=config.max_sends_per_hour, devices=config.devices, pools=config.pools)
            if config.max_sends_per_hour is not None
            else None
        )
        ledger.cap = self._cap

    # ------------------------------------------------------------------ send_sms

    async def send_sms(
        self,
        *,
        action_id: str | None,
        to: str,
        body: str,
        wait_seconds: float | None,
        device: str | None,
        scope: ActionScope = UNSCOPED,
        pool: str | None = None,
        wait_settled: bool = False,
        not_after: str | None = None,
        not_before: str | None = None,
    ) -> SmsResult:
        """Send at most once per action; see the tool's description. ``scope``: the calling
        client's view of action ids (``--clients``: its own, ``NAME/ID`` in the ledger) and
        the pools it may queue for. ``pool``: queue it for that pool's workers instead, and
        return at once (``queue_sms``). ``wait_settled``: ``SmsAgent.send``'s (a call that
        asks for it and joins a send that does not is carried on by one that does, within
        its own wait; one that does not and joins one that does waits with it).
        ``not_after``, ``not_before``: the deadline and the schedule as the tool takes them
        (``core.model.read_time_spec``)."""
        times = _read_times(not_after, not_before)
        if pool is not None:
            if device is not None:
                raise ToolError(
                    "give device or pool, not both: nothing sent or queued. pool queues the"
                    " action for the workers beside that pool's phones; device sends it"
                    " through one of this server's phones"
                )
            return await self.queue_sms(
                action_id=action_id, to=to, body=body, pool=pool, scope=scope, times=times
            )
        loop = asyncio.get_running_loop()
        wait = self.config.default_wait_s if wait_seconds is None else wait_seconds
        give_up = loop.time() + min(max(wait, 0.0), self.config.max_wait_s)
        # a send this call starts gets at least the default wait, however short the call's:
        # it goes on in the server after a quick return, and a repeat joins it
        send_until = max(give_up, loop.time() + self.config.default_wait_s)
        intent = _timed(self._checked_intent(action_id, to, body, device, scope), times)
        derived = action_id is None
        chosen = (
            scope.ledger_id(action_id)
            if action_id is not None
            else await self._derived_id(intent, scope)
        )
        known = await self._known_or_created(chosen, intent, scope, device, times[2])
        note = ""  # what the call is told first: the action keeps its phone
        while True:
            flight = self._flights.get(chosen)
            if flight is None:
                started, note = await self._start(
                    chosen,
                    intent,
                    known,
                    device,
                    send_until,
                    scope,
                    derived=derived,
                    wait_settled=wait_settled,
                )
                if isinstance(started, SmsResult):
                    return started
                flight = started
            left = give_up - loop.time()
            await asyncio.wait([flight.task], timeout=max(0.0, left))
            if not flight.task.done():
                still = await self._still_sending(flight, chosen, known, scope, derived=derived)
                return _noted(still, note)
            try:
                outcome = await self._landed(flight, chosen, scope)
            except ToolError as exc:
                if not note:
                    raise
                said = str(exc)
                raise ToolError(f"{note} {said[:1].upper()}{said[1:]}") from exc
            summary = outcome.summary
            # PLANNED with no attempt: the phone was busy; one waiting for the phone (its
            # tries found it not ready) is answered, as its send already tried within its wait
            rejoin = (
                (
                    summary.status in OPEN_STATUSES
                    or (summary.status is Status.PLANNED and not summary.attempts)
                )
                and flight.ends_at < give_up - MIN_DISPATCH_S
            ) or (
                # the send this call joined answered early; this call follows the settle
                wait_settled and not flight.wait_settled and summary.status is Status.VERIFYING
            )
            if outcome.refused is not None:
                # the ledger refused the phone (``WrongPhone``): the action is bound elsewhere
                refused = own_ids(outcome.refused, chosen, scope)
                note = f"Not sent: {refused}."
                rejoin = False
            if not rejoin or give_up - loop.time() < MIN_DISPATCH_S:
                result = self._result(
                    summary,
                    scope,
                    derived=derived,
                    earlier=earlier_message(known, summary),
                    held_by=outcome.held_by,
                )
                return _noted(result, note)
            # the send this call joined had a shorter wait: carry on with the time left

    async def queue_sms(
        self,
        *,
        action_id: str | None,
        to: str,
        body: str,
        pool: str,
        scope: ActionScope = UNSCOPED,
        times: _Times = (None, None, None),
    ) -> SmsResult:
        """Queue the action for ``pool``'s workers, reaching no phone, and return at once:
        the policy gate (the client's own, else the server's) judges it now, its refusal
        kept and returned (DENY and HOLD take it out of the queue); the same id again
        answers with the stored action, queued again never.

        Raises:
            ToolError: a pool the client may not queue for, bad input, another intent under
                the id, or the send limit used up; nothing is written.
        """
        self._check_pool(pool, scope)
        # the send path is the worker's to check: it may send another way than this server
        intent = _timed(
            self._checked_intent(action_id, to, body, None, scope, send_path=False), times
        )
        derived = action_id is None
        chosen = (
            scope.ledger_id(action_id)
            if action_id is not None
            else await self._derived_id(intent, scope)
        )
        try:
            known: ActionSummary | None = await self.ledger.summary(chosen)
        except NotFound:
            known = None
        if known is not None:
            self._check_owner(known, scope)
        try:
            queued = await self.ledger.enqueue(
                chosen,
                intent,
                self.config.policy,
                pool=pool,
                gate=self.config.client_gates.get(scope.client or ""),
                owner=scope.client,
                times=times[2],
            )
        except FingerprintConflict as exc:
            raise self._changed_intent(chosen, scope) from exc
        except InvalidInput as exc:
            raise ToolError(
                f"bad input, nothing queued: {own_ids(str(exc), chosen, scope)}"
            ) from exc
        except SendLimitReached as exc:
            _log.warning("mcp_send_limit_reached", action_id=chosen, pool=pool)
            raise ToolError(
                f"{own_ids(str(exc), chosen, scope)}. Nothing was queued or sent. Do not retry"
                " under another action_id; tell the user, or try again later with the same one."
            ) from exc
        summary = queued.summary
        _log.info(
            "mcp_action_queued" if queued.created else "mcp_queued_action_reused",
            action_id=chosen,
            pool=summary.action.pool,
            verdict=queued.gate.verdict.value if queued.gate is not None else None,
        )
        result = self._result(
            summary, scope, derived=derived, earlier=earlier_message(known, summary)
        )
        stored = summary.action.pool
        if not queued.created and stored != pool:
            shown = scope.own(chosen) or chosen
            where = (
                "it is this server's to send: call send_sms with it and without pool"
                if stored is None
                else f"it is queued for pool {stored!r}"
            )
            result.next_step = (
                f"Action {shown!r} was already in the ledger, not queued for pool {pool!r};"
                f" this call queued nothing ({where}). {result.next_step}"
            )
        return result

    def _check_pool(self, pool: str, scope: ActionScope) -> None:
        """Raises ToolError unless ``pool`` is a pool the calling client may queue for."""
        try:
            check_pool(pool)
        except InvalidInput as exc:
            raise ToolError(f"bad input, nothing queued: {exc}") from exc
        if scope.may_queue(pool, self.config.pools):
            return
        allowed = scope.queue_pools(self.config.pools)
        if not self.config.pools:
            why = "this server queues for no pool (start it with --pool NAME to allow one)"
        elif not allowed:
            why = (
                "this client may queue for no pool (its table in --clients names none:"
                ' pools = ["NAME"])'
            )
        else:
            why = f"the pools it may queue for are {', '.join(allowed)}"
        raise ToolError(f"unknown pool {pool!r}, nothing queued: {why}")

    def _checked_intent(
        self,
        action_id: str | None,
        to: str,
        body: str,
        device: str | None,
        scope: ActionScope,
        *,
        send_path: bool = True,
    ) -> SmsIntent:
        """The call's intent, once its phone, action id, recipient and text (for this
        server's send path, with ``send_path``) are checked.

        Raises:
            ToolError: bad input; nothing is sent.
        """
        if device is not None and device not in self.config.devices:
            raise ToolError(
                f"unknown device {device!r}, nothing sent; this server's phones are"
                f" {', '.join(self.config.devices)}"
            )
        try:
            intent = SmsIntent(recipient=to, body=body, region=self.config.region)
            if action_id is not None:
                check_action_id(action_id)
                check_scoped_id(action_id, scope)
            if send_path:
                check_send_path(self.config.send_path, intent.body)
        except InvalidInput as exc:
            raise ToolError(f"bad input, nothing sent: {exc}") from exc
        return intent

    async def _known_or_created(
        self,
        action_id: str,
        intent: SmsIntent,
        scope: ActionScope,
        device: str | None,
        times: IntentTimes | None = None,
    ) -> ActionSummary | None:
        """The action as it stood before the call (None: new, and created now, bound to the
        phone the call sends it through, ``device`` or the server's first, by its key in the
        ledger, and owned by the calling client of ``--clients``, if any). ``times``: the
        deadline and schedule given as durations, counted from the action's creation.

        Raises:
            ToolError: the action exists with another intent, or is not the calling client's;
                the send limit is used up (a new action is then not written at all); bad
                input, or an id in a namespace that is not the caller's.
        """
        try:
            known: ActionSummary | None = await self.ledger.summary(action_id)
        except NotFound:
            known = None
        if known is not None and times is not None:
            intent = times.applied(intent, known.action.created_at)
        if known is not None and known.action.fingerprint != intent.fingerprint:
            raise self._changed_intent(action_id, scope)
        if known is not None:
            self._check_owner(known, scope)
            return known
        # a first attempt would start: over the limit, nothing is written at all
        await self._check_cap(action_id, None, scope)
        # a new phone's key is the address it is first reached at; the ledger maps an
        # address to its phone when it checks the route
        planned = await self.phones.key_of(device or self.config.devices[0])
        try:
            await self.ledger.create_action(
                action_id,
                intent,
                self.config.policy,
                device=planned,
                owner=scope.client,
                times=times,
            )
        except FingerprintConflict as exc:  # created meanwhile with another intent
            raise self._changed_intent(action_id, scope) from exc
        except InvalidInput as exc:
            raise ToolError(
                f"bad input, nothing sent: {own_ids(str(exc), action_id, scope)}"
            ) from exc
        return None

    def _check_owner(self, known: ActionSummary, scope: ActionScope) -> None:
        """Refuse a client of ``--clients`` an action in its namespace that another caller
        of the ledger created (its owner is not the client: the CLI, another process, or a
        server from before namespaces were kept), as ``Ledger.create_action`` would.

        Raises:
            ToolError: not the client's; nothing is sent or queued.
        """
        if scope.client is None or known.action.owner == scope.client:
            return
        action_id = known.action.action_id
        shown = scope.own(action_id) or action_id
        _log.info("mcp_action_not_owned", action_id=action_id, client=scope.client)
        raise ToolError(
            f"not this client's action, nothing sent: {shown!r} ({action_id} in the ledger)"
            " was created by another caller of the ledger, not through this client, and"
            f" this client never sends it; {status_line(seen(known, scope))}. Tell the user;"
            " never send this message under another action_id on your own: it may have"
            " gone out already."
        )

    async def _start(
        self,
        action_id: str,
        intent: SmsIntent,
        known: ActionSummary | None,
        device: str | None,
        send_until: float,
        scope: ActionScope,
        *,
        derived: bool,
        wait_settled: bool = False,
    ) -> tuple[_Flight | SmsResult, str]:
        """Start the action's send in the server; or, when it is settled (a DENY is final)
        or none of this server's phones may send it, the result as it stands (``known``: the
        action before the call). With what the call is told first ("" nothing): that the
        action keeps its phone, not the ``device`` the call asked for."""
        summary = await self.ledger.summary(action_id)
        earlier = earlier_message(known, summary)
        if settled(summary, datetime.now(UTC)) or summary.action.pool is not None:
            # a queued action is its pool's workers' to send, never this server's
            return self._result(summary, scope, derived=derived, earlier=earlier), ""
        route = await self._device_for(summary, device, scope)
        if route.address is None:
            result = self._result(summary, scope, derived=derived, earlier=earlier)
            if route.elsewhere:
                result.next_step = route.note
            return result, ""
        await self._check_cap(action_id, summary, scope)
        gate = self.config.client_gates.get(scope.client or "")
        # the stored intent: its deadline and schedule as the ledger counted them
        flight = self._launch(
            action_id,
            summary.action.intent,
            route.address,
            send_until,
            gate=gate,
            wait_settled=wait_settled,
        )
        return flight, route.note

    async def _still_sending(
        self,
        flight: _Flight,
        action_id: str,
        known: ActionSummary | None,
        scope: ActionScope,
        *,
        derived: bool,
    ) -> SmsResult:
        """The call's wait is over and the send goes on in the server: the status as it
        stands (and, when it has not started, which action's attempt holds the phone)."""
        summary = await self.ledger.summary(action_id)
        held_by = await self._hold_on(flight.device, action_id)
        return self._result(
            summary,
            scope,
            derived=derived,
            sending=held_by is None,
            earlier=earlier_message(known, summary),
            held_by=held_by,
        )

    async def _derived_id(self, intent: SmsIntent, scope: ActionScope) -> str:
        """The ledger's id for a call without an action_id (``cli.send.choose_derived_id``, within
        the client's own ids)."""
        base = scope.ledger_id(derive_action_id(intent))
        now = self.ledger.now()
        generations = await self.ledger.derived_generations(base, now=now)
        window = timedelta(seconds=self.config.derived_id_window_s)
        return derived_generation_id(
            base, choose_derived_generation(generations, intent.message_fingerprint, now, window)
        )

    async def _hold_on(self, address: str, action_id: str) -> PhoneHold | None:
        """Another action's unresolved attempt holding the phone at ``address``, if any."""
        key = await self.phones.key_of(address)
        return await hold_on(
            self.ledger, key, action_id, void_after_for(self.config.command_timeout_s)
        )

    async def _device_for(
        self, summary: ActionSummary, asked: str | None, scope: ActionScope
    ) -> _Route:
        """The address a send of this action runs on: an unresolved attempt's own phone
        (None when that phone is not this server's); else the phone the action was made for
        (``planned_device``: it binds every path, DESIGN.md invariant 9; None when it is not
        one of this server's phones), whatever phone the call asks for; else the one asked
        for, the latest attempt's, or the first. (Attempts and actions name their phone by
        its key in the ledger.)"""
        latest = summary.latest
        if latest is not None and summary.status in OPEN_STATUSES:
            return _Route(address=await self.phones.address_of(latest.device))
        action = summary.action
        shown = scope.own(action.action_id) or action.action_id
        planned = action.planned_device
        if planned is not None:
            address = await self.phones.address_of(planned)
            if address is None:
                return _Route(
                    address=None,
                    elsewhere=True,
                    note=(
                        f"Action {shown!r} was made for phone {planned}, which is not one of"
                        f" this server's phones ({', '.join(self.config.devices)}): it keeps"
                        " that phone, so this call sent nothing, and no call to this server"
                        " will send it. A send or resume on that phone sends it; tell the"
                        " user, and never send this message under another action_id."
                    ),
                )
            if asked is not None and asked != address:
                _log.info("mcp_action_keeps_its_phone", action_id=action.action_id, asked=asked)
                return _Route(
                    address=address,
                    note=(
                        f"Action {shown!r} keeps the phone it was made for, {address}: this"
                        f" call sends it through that phone, never through {asked}."
                    ),
                )
            return _Route(address=address)
        if asked is not None:
            return _Route(address=asked)
        if latest is not None:
            address = await self.phones.address_of(latest.device)
            if address is not None:
                return _Route(address=address)
        return _Route(address=self.config.devices[0])

    def _changed_intent(self, action_id: str, scope: ActionScope) -> ToolError:
        _log.info("mcp_intent_changed", action_id=action_id)
        shown = scope.own(action_id) or action_id
        return ToolError(
            f"changed intent, nothing sent: action {shown!r} already exists with another"
            " recipient or text. To retry that message, repeat its original recipient and"
            " text; to send a different message, use a new action_id."
        )

    async def _check_cap(
        self, action_id: str, summary: ActionSummary | None, scope: ActionScope
    ) -> None:
        """Refuse at once, before connecting, a call that would start a send over the limit
        (``summary`` None: a new action)."""
        if self._cap is None:
            return
        if summary is not None:
            decision = should_redispatch(summary.action, summary.attempts, self.ledger.now())
            if not decision.redispatch:
                return
        try:
            await self._cap.check(self.ledger, action_id)
        except SendLimitReached as exc:
            _log.warning("mcp_send_limit_reached", action_id=action_id)
            where = (
                status_line(seen(summary, scope)) if summary is not None else "Nothing was recorded"
            )
            raise ToolError(
                f"{own_ids(str(exc), action_id, scope)}. Nothing was sent. {where}. Do not"
                " retry under another action_id; tell the user, or try again later with the"
                " same one."
            ) from exc

    def _launch(
        self,
        action_id: str,
        intent: SmsIntent,
        device: str,
        give_up: float,
        *,
        gate: Any = None,
        wait_settled: bool = False,
    ) -> _Flight:
        """Start the send of an action in the server; ``gate``: the calling client's own
        policy gate (None: the server's); ``wait_settled``: ``SmsAgent.send``'s."""
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(
            self._fly(
                action_id,
                intent,
                device,
                give_up - loop.time(),
                gate=gate,
                wait_settled=wait_settled,
            ),
            name=f"starebrain-send-{action_id}",
        )
        flight = _Flight(task=task, ends_at=give_up, device=device, wait_settled=wait_settled)
        self._flights[action_id] = flight

        def landed(done: asyncio.Task[SendOutcome]) -> None:
            if self._flights.get(action_id) is flight:
                del self._flights[action_id]
                self._steps.pop(action_id, None)
            if not done.cancelled() and done.exception() is not None:
                _log.info(
                    "mcp_send_ended_with_error",
                    action_id=action_id,
                    error=type(done.exception()).__name__,
                )

        task.add_done_callback(landed)
        return flight

    async def _fly(
        self,
        action_id: str,
        intent: SmsIntent,
        device: str,
        wait_s: float,
        *,
        gate: Any = None,
        wait_settled: bool = False,
    ) -> SendOutcome:
        loop = asyncio.get_running_loop()
        started = loop.time()
        agent = await self.phones.agent(device, within_s=max(0.1, wait_s))

        def waiting(message: str) -> None:
            _log.info("mcp_send_waiting", action_id=action_id, device=device, detail=message)

        outcome = await agent.send(
            action_id,
            intent.recipient,
            intent.body,
            wait=max(0.0, wait_s - (loop.time() - started)),
            on_wait=waiting,
            on_step=lambda step: self._steps.__setitem__(action_id, step),
            hard_deadline=True,
            gate=gate,
            wait_settled=wait_settled,
            not_after=intent.not_after,
            not_before=intent.not_before,
        )
        return outcome

    async def _landed(self, flight: _Flight, action_id: str, scope: ActionScope) -> SendOutcome:
        """What a finished flight returned, or a tool error saying what happened."""
        task = flight.task
        if task.cancelled():
            raise ToolError(f"the server is shutting down; {await self._status(action_id, scope)}")
        error = task.exception()
        if error is None:
            return task.result()
        from starebrain_actions.phone.android import PhoneUnavailable

        if isinstance(error, SendLimitReached):
            raise ToolError(
                f"{own_ids(str(error), action_id, scope)}. {await self._status(action_id, scope)}."
                " Do not retry under another"
                " action_id; tell the user, or try again later with the same one."
            )
        if isinstance(error, PhoneUnavailable):
            raise ToolError(
                f"the phone cannot be reached ({error}); no send was started by this call."
                f" {await self._status(action_id, scope)}. Call send_sms again later with the same"
                " action_id."
            )
        if isinstance(error, StarebrainError | BridgeError):
            raise ToolError(
                f"{type(error).__name__}: {error}. {await self._status(action_id, scope)}; calling"
                " send_sms again with the same action_id never sends twice."
            )
        raise error

    async def _status(self, action_id: str, scope: ActionScope) -> str:
        line = status_line(seen(await self.ledger.summary(action_id), scope))
        return line[0].upper() + line[1:]

    def _result(
        self,
        summary: ActionSummary,
        scope: ActionScope,
        *,
        derived: bool | None,
        sending: bool = False,
        earlier: bool = False,
        held_by: PhoneHold | None = None,
    ) -> SmsResult:
        """``earlier``: the action had an attempt before the call and has no new one: the
        answer is about that earlier message (``derived_ids.earlier_message``)."""
        return sms_result(
            seen(summary, scope),
            now=self.ledger.now(),
            derived=derived,
            show_private=self.config.show_private,
            sending=sending,
            earlier=earlier,
            held_by=hold_seen(held_by, scope),
        )

    # ------------------------------------------------------------------ reads

    async def sms_status(
        self, *, action_id: str, detail: bool, scope: ActionScope = UNSCOPED
    ) -> SmsResult:
        """The action as the ledger holds it; reads no phone. A client of ``--clients``
        reads only its own actions."""
        try:
            summary = await self.ledger.summary(scope.ledger_id(action_id))
        except NotFound as exc:
            raise ToolError(
                f"no action {action_id!r} in the ledger: nothing was ever sent under that id"
            ) from exc
        return sms_result(
            seen(summary, scope),
            now=self.ledger.now(),
            detail=detail,
            show_private=self.config.show_private,
        )

    async def get_events(
        self,
        *,
        after: int,
        limit: int,
        types: Sequence[str],
        action_id: str | None,
        scope: ActionScope = UNSCOPED,
    ) -> EventsPage:
        """The ledger's events after ``after`` (a client of ``--clients``: only its own
        actions' events, with its own ids; events of no action are not shown to it)."""
        if after < 0 or not 1 <= limit <= EVENTS_PAGE:
            raise ToolError(
                f"after must be 0 or more and limit 1..{EVENTS_PAGE}; got after={after},"
                f" limit={limit}. Nothing was read."
            )
        try:
            found = await self.ledger.events(
                after=after,
                limit=limit,
                types=types,
                action_id=scope.ledger_id(action_id) if action_id is not None else None,
                owner=scope.client,
            )
        except InvalidInput as exc:
            raise ToolError(f"bad input, nothing read: {exc}") from exc
        views = []
        for event in found:
            shown = _render_values.event_data(event, show_private=self.config.show_private)
            own = scope.own(event.action_id) if event.action_id is not None else None
            if scope.client is not None and own is None:
                continue  # not the client's: an event of no action, or another's
            views.append(
                EventView(
                    id=shown["id"],
                    position=shown["position"],
                    type=shown["type"],
                    action_id=own if own is not None else event.action_id,
                    at=shown["at"],
                    data=shown["data"],
                )
            )
        last = found[-1].position if found else after
        more = len(found) == limit
        return EventsPage(
            events=views,
            next_after=last,
            more=more,
            next_step=(
                f"More events wait: call get_events again with after={last}."
                if more
                else f"That is everything so far; later, call get_events with after={last}."
            ),
        )

    async def get_replies(self, *, action_id: str, scope: ActionScope = UNSCOPED) -> RepliesResult:
        """The replies linked to the action (a client of ``--clients``: its own actions
        only, as every tool's ids are), from the ledger only: reads no phone."""
        from starebrain_actions.render.sanitize import redact_data

        ledger_id = scope.ledger_id(action_id)
        try:
            action = await self.ledger.get_action(ledger_id)
        except NotFound as exc:
            raise ToolError(
                f"no action {action_id!r} in the ledger: nothing was ever sent under that id"
            ) from exc
        replies = await self.ledger.replies(ledger_id, limit=1000)
        in_force = await self.ledger.opt_out_in_force(action.intent.recipient)
        opted_out = in_force is not None and in_force.opted_out
        views = []
        for reply in replies:
            data = redact_data(reply.data(), show_private=self.config.show_private)
            views.append(
                ReplyView(
                    reply_id=reply.reply_id,
                    number=str(data["number"]),
                    body=str(data["body"]),
                    received_at=str(data["received_at"]),
                    keyword=reply.keyword,
                )
            )
        if opted_out:
            step = (
                "The recipient opted out: do not text it again under any action_id (every"
                " send is refused, rule opted_out); tell the user."
            )
        elif views:
            step = "Read the replies; answer with send_sms under a new action_id if needed."
        else:
            step = "No reply recorded yet (replies are seen when the phone is read: reconcile)."
        return RepliesResult(
            action_id=action_id,
            count=len(views),
            replies=views,
            recipient_opted_out=opted_out,
            next_step=step,
        )

    async def list_review(self, *, scope: ActionScope = UNSCOPED) -> ReviewList:
        """Actions waiting for a person (a client of ``--clients``: its own)."""
        now = self.ledger.now()
        found = [
            seen(summary, scope)
            for summary in await self.ledger.needing_review(now=now)
            if scope.own(summary.action.action_id) is not None
        ]
        return ReviewList(
            count=len(found),
            actions=[sms_result(summary, now=now) for summary in found],
            next_step=(
                "Nothing needs a person."
                if not found
                else "A person must decide these (starebrain review / resolve): do not resend"
                " them under any action_id; tell the user which ones and why."
            ),
        )

    async def reconcile(
        self, *, device: str | None, scope: ActionScope = UNSCOPED
    ) -> ReconcileResult:
        """One read-only pass over ``device`` or every phone with a send in flight (the
        changes listed are the client's own actions'; the counts are the phones')."""
        if device is not None and device not in self.config.devices:
            raise ToolError(
                f"unknown device {device!r}; this server's phones are"
                f" {', '.join(self.config.devices)}"
            )
        if device is not None:
            targets = [device]
        else:
            busy = set(await self.ledger.devices_in_flight())
            targets = [
                name for name in self.config.devices if await self.phones.key_of(name) in busy
            ]
        reports = await asyncio.gather(*(self._reconcile_one(name) for name in targets))
        changes = [change for report in reports for change in report.changes]
        unreachable = [report.device for report in reports if not report.reachable]
        in_flight = sum(report.in_flight for report in reports)
        if not targets:
            step = "Nothing is in flight on this server's phones: nothing to read."
        elif unreachable:
            step = (
                f"Could not read {', '.join(unreachable)}: nothing changed there; try again"
                " later. Nothing was sent."
            )
        elif in_flight:
            step = (
                f"{in_flight} send(s) still unproven; call reconcile or sms_status again in a"
                " while. Nothing was sent."
            )
        else:
            step = "Every send on these phones is settled; check each action with sms_status."
        return ReconcileResult(
            devices=[
                DeviceView(
                    device=report.device,
                    reachable=report.reachable,
                    error=report.error,
                    changes=len(report.changes),
                    in_flight=report.in_flight,
                )
                for report in reports
            ],
            changes=[
                ChangeView(
                    action_id=own,
                    dispatch_id=change.dispatch_id,
                    event=change.event.value,
                    from_status=change.from_status,
                    to_status=change.to_status,
                )
                for change in changes
                if (own := scope.own(change.action_id)) is not None
            ],
            next_step=step,
        )

    async def _reconcile_one(self, device: str) -> DeviceReport:
        try:
            agent = await self.phones.agent(device, within_s=self.config.connect_timeout_s * 2)
        except PhoneError as exc:
            in_flight = len(await self.ledger.in_flight(await self.phones.key_of(device)))
            return DeviceReport(device=device, reachable=False, error=str(exc), in_flight=in_flight)
        return await reconcile_device(self.ledger, agent.phone, void_after=agent.void_after)

    # ------------------------------------------------------------------ resolve

    async def resolve(
        self,
        *,
        action_id: str,
        ruling: Literal["sent", "not-sent"],
        reason: str,
        dispatch_id: str | None,
        expect_version: int | None,
        scope: ActionScope = UNSCOPED,
    ) -> SmsResult:
        """An operator's ruling on an attempt (offered only with ``--allow-resolve``)."""
        try:
            await self.ledger.resolve(
                scope.ledger_id(action_id),
                as_sent=ruling == "sent",
                reason=reason,
                operator=self.config.operator,
                dispatch_id=dispatch_id,
                expect_version=expect_version,
            )
        except (NotFound, InvalidInput, StaleTransition) as exc:
            raise ToolError(f"not resolved: {exc}") from exc
        return await self.sms_status(action_id=action_id, detail=False, scope=scope)

    # ------------------------------------------------------------------ shutdown

    async def drain(self, timeout_s: float) -> None:
        """Stop the running sends: one whose command may be on its way to the phone gets
        ``timeout_s`` to finish it (no command takes longer); the others only wait for
        proof, and stop at once. A send cut off anyway is an unknown outcome a later read
        settles, never a reason to send again."""
        flights = dict(self._flights)
        if not flights:
            return
        sending = [
            flight.task
            for action_id, flight in flights.items()
            if self._steps.get(action_id) == "sending"
        ]
        _log.info("mcp_draining_sends", sends=len(flights), sending=len(sending))
        if sending:
            await asyncio.wait(sending, timeout=timeout_s)
        tasks = [flight.task for flight in flights.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@contextlib.asynccontextmanager
async def open_service(config: ServerConfig) -> AsyncIterator[SmsService]:
    """Open the ledger, register the clients of ``--clients`` as the owners of their
    namespaces (``ServerConfig.owners``), and make the service; on exit, let running sends
    finish, then close the phones and the ledger.

    Raises:
        LedgerUnavailable / SchemaTooNew: the ledger cannot be used.
    """
    async with CappedLedger.open(config.db) as opened:
        ledger = cast(CappedLedger, opened)
        ledger.gate = config.gate
        if config.owners:
            # from now on only a client's own calls create ids under its NAME/, whoever
            # else uses this ledger (the CLI, another server, a Python agent)
            await ledger.register_owners(config.owners)
            _log.info("mcp_owners_registered", owners=list(config.owners))
        service = SmsService(ledger, config)
        try:
            yield service
        finally:
            await service.drain(config.command_timeout_s)
            await service.phones.close()


#: A deadline and a schedule as a call gave them: the times, and the durations.
_Times = tuple[datetime | None, datetime | None, IntentTimes | None]


def _read_times(not_after: str | None, not_before: str | None) -> _Times:
    """``send_sms``'s ``not_after`` and ``not_before``, read (``read_time_spec``).

    Raises:
        ToolError: a time that cannot be read; nothing is sent or written.
    """
    try:
        return intent_times(
            read_time_spec(not_after, "not_after") if not_after is not None else None,
            read_time_spec(not_before, "not_before") if not_before is not None else None,
        )
    except InvalidInput as exc:
        raise ToolError(f"bad input, nothing sent: {exc}") from exc


def _timed(intent: SmsIntent, times: _Times) -> SmsIntent:
    """``intent`` with the deadline and schedule given as times.

    Raises:
        ToolError: a schedule not before the deadline; nothing is sent or written.
    """
    try:
        return attrs.evolve(intent, not_after=times[0], not_before=times[1])
    except InvalidInput as exc:
        raise ToolError(f"bad input, nothing sent: {exc}") from exc
