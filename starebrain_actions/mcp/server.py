"""The MCP server behind ``starebrain mcp``: ``SmsAgent`` offered to AI agents as tools.

A model that retries a tool call after a timeout is the duplicate-send case this product
exists for, so every guarantee of the agent holds through the tools: ``send_sms`` is
idempotent on ``action_id`` and the intent (the ledger's fingerprint), never resends while an
attempt is unresolved, and returns within the caller's wait with the status as it stands.

Inside one server process, concurrent ``send_sms`` calls for one action share one running send
(a *flight*): the send runs in a task the server owns, so a call the client cancels or gives
up on (a timeout) leaves the send to finish its step on the phone instead of cutting it off
mid-command, and a repeat joins it. Calls for different actions on one phone share one ADB
connection (``android_bridge.Device`` runs one command at a time) and one ``SmsAgent``; the
ledger's device lease keeps a single send in flight per phone, across processes too.

``--max-sends-per-hour`` counts the attempts the ledger holds for the server's phones over
the last hour, so the limit holds across restarts; it is counted inside the write
transaction of a new attempt's receipt, so concurrent calls cannot overshoot it, not even
from several servers sharing one ledger.

Written with the official SDK's v2 ``MCPServer`` (the FastMCP API under its new name):
tools from annotated functions, pydantic models as structured output, stdio and streamable
HTTP transports.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import signal
import socket
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Final, Literal, cast

import attrs
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from android_bridge.exceptions import BridgeError
from starebrain_actions._logging import get_logger
from starebrain_actions.core.convert import format_time
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
    PhoneHold,
    RetryPolicy,
    SmsIntent,
    Status,
    check_action_id,
)
from starebrain_actions.core.transitions import (
    DERIVED_ID_WINDOW,
    should_redispatch,
)
from starebrain_actions.ledger.store import Ledger, dispatches_since
from starebrain_actions.mcp.auth import (
    UNSCOPED,
    ActionScope,
    Clients,
    ClientTokens,
    HttpOptions,
    is_loopback,
    is_wildcard,
    transport_security,
)
from starebrain_actions.mcp.results import (
    OPEN_STATUSES,
    ChangeView,
    DeviceView,
    ReconcileResult,
    ReviewList,
    SmsResult,
    sms_result,
    status_line,
)
from starebrain_actions.orchestration.agent import (
    MIN_DISPATCH_S,
    RATE_LIMIT_PER_MINUTE,
    SendOutcome,
    SmsAgent,
    hold_on,
)
from starebrain_actions.orchestration.reconciler import (
    DeviceReport,
    reconcile_device,
    void_after_for,
)
from starebrain_actions.phone.send_path import check_send_path, ledger_proof
from starebrain_actions.render.values import duration_text

__all__ = [
    "SEND_WINDOW",
    "WAIT_CEILING_S",
    "SendLimitReached",
    "ServerConfig",
    "SmsService",
    "build_server",
    "open_service",
    "parse_http_address",
    "serve",
]

_log = get_logger("starebrain.mcp")

#: The most ``wait_seconds`` may ask for in the tool's schema; ``--max-wait`` lowers it.
WAIT_CEILING_S: Final = 600.0
#: Sends started on the server's phones that ``--max-sends-per-hour`` counts over.
SEND_WINDOW: Final = timedelta(hours=1)

SERVER_INSTRUCTIONS: Final = (
    "starebrain sends SMS through the user's Android phones and never sends the same message"
    " twice. Give every message you intend to send its own stable action_id and reuse exactly"
    " that action_id, recipient and text on every retry (after a timeout, an error or a"
    " restart): a repeated call resumes the same action and never sends a second SMS. Read"
    " `status` and follow `next_step` in every result; `earlier_message: true` means the call"
    " sent nothing and answers with a message sent before. Never work around an unresolved or"
    " failed result by sending under a new action_id: that is how duplicates happen. Actions"
    " listed by list_review wait for a person: tell the user instead of resending."
)


class SendLimitReached(StarebrainError):
    """The server's ``--max-sends-per-hour`` is used up; no attempt was started."""


# --------------------------------------------------------------------------- configuration


@attrs.frozen(kw_only=True)
class ServerConfig:
    """What ``starebrain mcp``'s options decided."""

    #: the ledger: a SQLite file path, or a PostgreSQL URL (a ``str``)
    db: Path | str
    #: the phones, ``host:port``; the first is the default for a new action
    devices: tuple[str, ...]
    #: the ADB private key (None: the default key)
    key_path: Path | None = None
    #: read phones through ``su 1000`` (userdebug/eng builds)
    read_as_system: bool = False
    #: the retry policy of actions this server creates
    policy: RetryPolicy = attrs.field(factory=RetryPolicy)
    #: region for national numbers (None: international numbers only)
    region: str | None = None
    #: the longest ``wait_seconds`` honoured
    max_wait_s: float = 60.0
    #: ``wait_seconds`` when the call gives none
    default_wait_s: float = 20.0
    #: sends started on the server's phones per hour at most (None: no limit)
    max_sends_per_hour: int | None = None
    #: sends started on one phone per minute at most (Android's SmsUsageMonitor)
    rate_limit: int = RATE_LIMIT_PER_MINUTE
    #: "ui", "framework" or "auto" (``_send_path``)
    send_path: str = "auto"
    #: seconds to connect to a phone
    connect_timeout_s: float = 5.0
    #: seconds one command on a phone may take
    command_timeout_s: float = 20.0
    #: offer the ``resolve`` tool (an operator's ruling)
    allow_resolve: bool = False
    #: the name ``resolve`` records as the operator
    operator: str = "mcp"
    #: show numbers and bodies in results' ``record`` (redacted by default)
    show_private: bool = False
    #: the longest wait between two reads while waiting for proof (the first read after a
    #: send comes when the phone's messages have shown up before: ``SmsAgent``)
    poll_interval_s: float = 0.25
    #: seconds after its latest attempt during which a settled action answers a send_sms
    #: that names no action_id (``_core.derived_id_resumable``); past them the same text to
    #: the same number is a new action
    derived_id_window_s: float = DERIVED_ID_WINDOW.total_seconds()
    #: the policy gate (``_policy.Policy``) every send of the server passes (None: none;
    #: ``starebrain mcp`` always gives one: its approval mode is "new" unless the file says
    #: otherwise)
    gate: Any = None
    #: a client's own gate (``policy = "FILE"`` in ``--clients``), by client name: it
    #: replaces the server's for that client's sends
    client_gates: Mapping[str, Any] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        if not self.devices:
            raise InvalidInput("the MCP server needs at least one phone (--device HOST:PORT)")
        if not 0 <= self.derived_id_window_s < float("inf"):
            raise InvalidInput("derived_id_window_s must be a finite number of seconds >= 0")
        if not 1.0 <= self.max_wait_s <= WAIT_CEILING_S:
            raise InvalidInput(f"max_wait_s must be between 1 and {WAIT_CEILING_S:g}")
        if self.max_sends_per_hour is not None and self.max_sends_per_hour < 1:
            raise InvalidInput("max_sends_per_hour must be at least 1")


# --------------------------------------------------------------------------- the service


@attrs.define
class _SendCap:
    """``--max-sends-per-hour``: attempts the ledger holds for these phones in the window."""

    limit: int
    #: the phones' keys in the ledger (their addresses until each one is bound)
    devices: tuple[str, ...]

    def know(self, address: str, key: str) -> None:
        """The phone at ``address`` goes by ``key`` in the ledger: count its sends by it."""
        if key not in self.devices:
            self.devices = tuple(dict.fromkeys(key if d == address else d for d in self.devices))
            if key not in self.devices:
                self.devices = (*self.devices, key)

    async def started(self, ledger: Ledger) -> int:
        since = ledger.now() - SEND_WINDOW
        return sum([await ledger.dispatches_since(device, since) for device in self.devices])

    async def check(self, ledger: Ledger, action_id: str) -> None:
        """Raises SendLimitReached when the window is full (a check before connecting; the
        one that counts runs in the receipt's transaction, ``_CappedLedger._admit``)."""
        self._refuse_over(await self.started(ledger), action_id)

    def check_in_transaction(self, db: sqlite3.Connection, action_id: str, now: datetime) -> None:
        """Raises SendLimitReached when the window is full, counted inside the write
        transaction of the new attempt's receipt: no other process can add one meanwhile
        (SQLite lets one writer at a time; on PostgreSQL the count is taken under an advisory
        lock every capped receipt takes, last, after its action's and device's)."""
        from starebrain_actions.ledger.pg import lock

        lock(db, "mcp-send-cap")
        since = format_time(now - SEND_WINDOW)
        self._refuse_over(
            sum(dispatches_since(db, device, since) for device in self.devices), action_id
        )

    def _refuse_over(self, count: int, action_id: str) -> None:
        if count >= self.limit:
            raise SendLimitReached(
                f"send limit reached: {count} send(s) started on this server's phones in the"
                f" last hour (--max-sends-per-hour {self.limit}); no send was started for"
                f" action {action_id}"
            )


class _CappedLedger(Ledger):
    """The server's ledger: a new attempt's receipt is refused (``SendLimitReached``) when
    the hourly send limit is used up, counted in the receipt's own write transaction, so the
    limit holds for several servers sharing one ledger too."""

    cap: _SendCap | None = None

    def _admit(self, db: sqlite3.Connection, action_id: str, device: str, when: datetime) -> None:
        if self.cap is not None:
            self.cap.check_in_transaction(db, action_id, when)


class _Phones:
    """One connected ``SmsAgent`` per phone, connected on first use and kept."""

    def __init__(self, ledger: Ledger, config: ServerConfig) -> None:
        self._ledger = ledger
        self._config = config
        self._agents: dict[str, SmsAgent] = {}
        self._locks = {device: asyncio.Lock() for device in config.devices}
        #: address -> the phone's key in the ledger, once it connected
        self.keys: dict[str, str] = {}

    async def agent(self, device: str, *, within_s: float) -> SmsAgent:
        """The agent of ``device``, connecting within ``within_s`` seconds if needed.

        Raises:
            PhoneUnavailable: the phone cannot be reached now (nothing is recorded).
        """
        from starebrain_actions.phone.android import AndroidPhone, PhoneUnavailable

        config = self._config
        async with self._locks[device]:
            known = self._agents.get(device)
            if known is not None:
                return known
            try:
                async with asyncio.timeout(within_s):
                    phone = await AndroidPhone.connect(
                        device,
                        key_path=config.key_path,
                        connect_timeout_s=max(0.1, min(config.connect_timeout_s, within_s)),
                        command_timeout_s=config.command_timeout_s,
                        read_as_system=config.read_as_system,
                        send_path=config.send_path,
                        framework_proof=ledger_proof(self._ledger),
                    )
            except TimeoutError:
                raise PhoneUnavailable(
                    f"{device}: did not answer within {within_s:.1f} s"
                ) from None
            binding = await phone.bind_in(self._ledger)
            self.keys[device] = binding.key
            cap = getattr(self._ledger, "cap", None)
            if isinstance(cap, _SendCap):
                cap.know(device, binding.key)
            agent = SmsAgent(
                self._ledger,
                phone,
                policy=config.policy,
                region=config.region,
                poll_interval_s=config.poll_interval_s,
                rate_limit=config.rate_limit,
                actor="mcp",
                void_after=void_after_for(config.command_timeout_s),
            )
            agent.binding = binding
            self._agents[device] = agent
            _log.info("mcp_phone_connected", device=device, phone=binding.key)
            return agent

    async def key_of(self, address: str) -> str:
        """The ledger's key of the phone at ``address`` (bound when it connected; before, the
        phone the ledger last met there, else the address itself)."""
        known = self.keys.get(address)
        if known is None:
            known = await self._ledger.phone_key_for(address)
        return known

    async def address_of(self, key: str) -> str | None:
        """This server's address of the phone ``key`` (None: not one of its phones)."""
        for address in self._config.devices:
            if await self.key_of(address) == key:
                return address
        return None

    async def close(self) -> None:
        for agent in self._agents.values():
            with contextlib.suppress(Exception):
                await agent.phone.close()
        self._agents.clear()


#: What a client of ``--clients`` sees for another client's action holding a phone.
OTHER_CLIENTS_ACTION: Final = "(another client's action)"


def _seen(summary: ActionSummary, scope: ActionScope) -> ActionSummary:
    """``summary`` as the client of ``scope`` sees it: its own action id, not the ledger's."""
    own = scope.own(summary.action.action_id)
    if own is None or own == summary.action.action_id:
        return summary
    return attrs.evolve(summary, action=attrs.evolve(summary.action, action_id=own))


def _hold_seen(hold: PhoneHold | None, scope: ActionScope) -> PhoneHold | None:
    """A phone's holder as the client of ``scope`` sees it: another client's action is not
    named."""
    if hold is None:
        return None
    own = scope.own(hold.action_id)
    return attrs.evolve(hold, action_id=OTHER_CLIENTS_ACTION if own is None else own)


def _own_ids(text: str, ledger_id: str, scope: ActionScope) -> str:
    """``text`` with the ledger's id of a client's action replaced by the client's own."""
    own = scope.own(ledger_id)
    return text if own is None or own == ledger_id else text.replace(ledger_id, own)


def _check_scoped_id(action_id: str, scope: ActionScope) -> None:
    """Raises InvalidInput when the client's prefix makes ``action_id`` too long."""
    try:
        check_action_id(scope.ledger_id(action_id))
    except InvalidInput:
        room = 200 - len(scope.ledger_id(""))
        raise InvalidInput(
            f"action id {action_id!r} is too long for this client: at most {room} characters"
        ) from None


@attrs.define
class _Flight:
    """One running ``SmsAgent.send`` of an action, shared by every call that asks for it."""

    task: asyncio.Task[SendOutcome]
    #: loop time at which its wait ends
    ends_at: float
    #: the address of the phone it sends through
    device: str = ""


class SmsService:
    """What the tools do, over one ledger and the server's phones."""

    def __init__(self, ledger: _CappedLedger, config: ServerConfig) -> None:
        self.ledger = ledger
        self.config = config
        self.phones = _Phones(ledger, config)
        self._flights: dict[str, _Flight] = {}
        #: the step each running send is at (``SmsAgent.send``'s ``on_step``)
        self._steps: dict[str, str] = {}
        self._cap = (
            _SendCap(limit=config.max_sends_per_hour, devices=config.devices)
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
    ) -> SmsResult:
        """Send at most once per action; see the tool's description. ``scope``: the calling
        client's view of action ids (``--clients``: its own, ``NAME/ID`` in the ledger)."""
        loop = asyncio.get_running_loop()
        wait = self.config.default_wait_s if wait_seconds is None else wait_seconds
        give_up = loop.time() + min(max(wait, 0.0), self.config.max_wait_s)
        # a send this call starts gets at least the default wait, however short the call's:
        # it goes on in the server after a quick return, and a repeat joins it
        send_until = max(give_up, loop.time() + self.config.default_wait_s)
        if device is not None and device not in self.config.devices:
            raise ToolError(
                f"unknown device {device!r}, nothing sent; this server's phones are"
                f" {', '.join(self.config.devices)}"
            )
        try:
            intent = SmsIntent(recipient=to, body=body, region=self.config.region)
            if action_id is not None:
                check_action_id(action_id)
                _check_scoped_id(action_id, scope)
            check_send_path(self.config.send_path, intent.body)
        except InvalidInput as exc:
            raise ToolError(f"bad input, nothing sent: {exc}") from exc
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
        if known is not None and known.action.fingerprint != intent.fingerprint:
            raise self._changed_intent(chosen, scope)
        if known is None:
            # a first attempt would start: over the limit, nothing is written at all
            await self._check_cap(chosen, None, scope)
            try:
                await self.ledger.create_action(chosen, intent, self.config.policy)
            except FingerprintConflict as exc:  # created meanwhile with another intent
                raise self._changed_intent(chosen, scope) from exc
            except InvalidInput as exc:
                raise ToolError(f"bad input, nothing sent: {exc}") from exc
        while True:
            flight = self._flights.get(chosen)
            if flight is None:
                summary = await self.ledger.summary(chosen)
                earlier = earlier_message(known, summary)
                if settled(summary, datetime.now(UTC)):
                    return self._result(summary, scope, derived=derived, earlier=earlier)
                target = await self._device_for(summary, device)
                if target is None:
                    return self._result(summary, scope, derived=derived, earlier=earlier)
                await self._check_cap(chosen, summary, scope)
                gate = self.config.client_gates.get(scope.client or "")
                flight = self._launch(chosen, intent, target, send_until, gate=gate)
            left = give_up - loop.time()
            await asyncio.wait([flight.task], timeout=max(0.0, left))
            if not flight.task.done():
                # the send goes on in the server; the caller gets the status as it stands
                # (and, when it has not started, which action's attempt holds the phone)
                summary = await self.ledger.summary(chosen)
                held_by = await self._hold_on(flight.device, chosen)
                return self._result(
                    summary,
                    scope,
                    derived=derived,
                    sending=held_by is None,
                    earlier=earlier_message(known, summary),
                    held_by=held_by,
                )
            outcome = await self._landed(flight, chosen, scope)
            summary = outcome.summary
            rejoin = (
                summary.status in OPEN_STATUSES or summary.status is Status.PLANNED
            ) and flight.ends_at < give_up - MIN_DISPATCH_S
            if not rejoin or give_up - loop.time() < MIN_DISPATCH_S:
                return self._result(
                    summary,
                    scope,
                    derived=derived,
                    earlier=earlier_message(known, summary),
                    held_by=outcome.held_by,
                )
            # the send this call joined had a shorter wait: carry on with the time left

    async def _derived_id(self, intent: SmsIntent, scope: ActionScope) -> str:
        """The ledger's id for a call without an action_id (``cli.choose_derived_id``, within
        the client's own ids)."""
        base = scope.ledger_id(derive_action_id(intent))
        now = self.ledger.now()
        generations = await self.ledger.derived_generations(base, now=now)
        window = timedelta(seconds=self.config.derived_id_window_s)
        return derived_generation_id(
            base, choose_derived_generation(generations, intent.fingerprint, now, window)
        )

    async def _hold_on(self, address: str, action_id: str) -> PhoneHold | None:
        """Another action's unresolved attempt holding the phone at ``address``, if any."""
        key = await self.phones.key_of(address)
        return await hold_on(
            self.ledger, key, action_id, void_after_for(self.config.command_timeout_s)
        )

    async def _device_for(self, summary: ActionSummary, asked: str | None) -> str | None:
        """The address a send of this action runs on: an unresolved attempt's own phone (None
        when that phone is not this server's), else the one asked for, the latest
        attempt's, or the first. (Attempts name their phone by its key in the ledger.)"""
        latest = summary.latest
        if latest is not None and summary.status in OPEN_STATUSES:
            return await self.phones.address_of(latest.device)
        if asked is not None:
            return asked
        if latest is not None:
            address = await self.phones.address_of(latest.device)
            if address is not None:
                return address
        return self.config.devices[0]

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
                status_line(_seen(summary, scope))
                if summary is not None
                else "Nothing was recorded"
            )
            raise ToolError(
                f"{_own_ids(str(exc), action_id, scope)}. Nothing was sent. {where}. Do not"
                " retry under another action_id; tell the user, or try again later with the"
                " same one."
            ) from exc

    def _launch(
        self, action_id: str, intent: SmsIntent, device: str, give_up: float, *, gate: Any = None
    ) -> _Flight:
        """Start the send of an action in the server; ``gate``: the calling client's own
        policy gate (None: the server's)."""
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(
            self._fly(action_id, intent, device, give_up - loop.time(), gate=gate),
            name=f"starebrain-send-{action_id}",
        )
        flight = _Flight(task=task, ends_at=give_up, device=device)
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
        self, action_id: str, intent: SmsIntent, device: str, wait_s: float, *, gate: Any = None
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
                f"{_own_ids(str(error), action_id, scope)}. {await self._status(action_id, scope)}."
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
        line = status_line(_seen(await self.ledger.summary(action_id), scope))
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
        answer is about that earlier message (``_core.earlier_message``)."""
        return sms_result(
            _seen(summary, scope),
            now=self.ledger.now(),
            derived=derived,
            show_private=self.config.show_private,
            sending=sending,
            earlier=earlier,
            held_by=_hold_seen(held_by, scope),
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
            _seen(summary, scope),
            now=self.ledger.now(),
            detail=detail,
            show_private=self.config.show_private,
        )

    async def list_review(self, *, scope: ActionScope = UNSCOPED) -> ReviewList:
        """Actions waiting for a person (a client of ``--clients``: its own)."""
        now = self.ledger.now()
        found = [
            _seen(summary, scope)
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
    """Open the ledger and make the service; on exit, let running sends finish, then close
    the phones and the ledger.

    Raises:
        LedgerUnavailable / SchemaTooNew: the ledger cannot be used.
    """
    async with _CappedLedger.open(config.db) as opened:
        ledger = cast(_CappedLedger, opened)
        ledger.gate = config.gate
        service = SmsService(ledger, config)
        try:
            yield service
        finally:
            await service.drain(config.command_timeout_s)
            await service.phones.close()


# --------------------------------------------------------------------------- the MCP server


def _version() -> str:
    try:
        return importlib.metadata.version("starebrain-actions")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - not installed
        return "0"


def _auth_settings() -> AuthSettings:
    """The SDK's auth settings for bearer tokens this server checks itself (``ClientTokens``):
    no scopes, no authorization server (tokens are configured, not issued by OAuth), so a
    refusal is ``401`` with ``WWW-Authenticate: Bearer error="invalid_token"`` and no
    ``resource_metadata`` to point to."""
    return AuthSettings(
        # required by the model; unused without an authorization server provider or
        # resource_server_url (no OAuth routes, no protected resource metadata are served)
        issuer_url="http://localhost",  # type: ignore[arg-type]
        resource_server_url=None,
        required_scopes=[],
    )


def build_server(service: SmsService, *, clients: Clients | None = None) -> MCPServer:
    """The MCP server with its tools (``resolve`` only when the config allows it).

    ``clients``: the bearer tokens its HTTP app requires (None: no auth, for stdio and
    in-process use). With scoped clients (``--clients``) each tool call works on the calling
    client's own action ids.
    """
    config = service.config
    server: MCPServer = MCPServer(
        "starebrain",
        title="starebrain: SMS sent at most once",
        instructions=SERVER_INSTRUCTIONS,
        version=_version(),
        log_level="WARNING",
        token_verifier=ClientTokens(clients) if clients is not None else None,
        auth=_auth_settings() if clients is not None else None,
    )

    def scope_of(ctx: Context) -> ActionScope:
        """The calling client's view of action ids (its token's client, over HTTP)."""
        if clients is None or not clients.scoped:
            return UNSCOPED
        request = ctx.request_context.request
        user = getattr(request, "scope", {}).get("user")
        if not isinstance(user, AuthenticatedUser):  # pragma: no cover - auth runs first
            raise ToolError("no authenticated client: nothing done")
        client_id: str = user.access_token.client_id
        return clients.scope_of(client_id)

    devices = ", ".join(config.devices)
    window = duration_text(timedelta(seconds=config.derived_id_window_s))

    async def send_sms(
        *,
        action_id: Annotated[
            str | None,
            Field(
                description="Your stable id for this one message, e.g. 'otp-4821-alice' (1 to"
                " 200 printable ASCII characters, no spaces). Reuse it on every retry; give a"
                " new one whenever you mean a new message. Omitted, one is derived from the"
                " recipient and text (see the tool's description for how long it holds).",
                min_length=1,
                max_length=200,
            ),
        ] = None,
        to: Annotated[
            str,
            Field(description="Recipient phone number, international form preferred"),
        ],
        body: Annotated[str, Field(description="The message text, exactly as it should arrive.")],
        wait_seconds: Annotated[
            float | None,
            Field(
                description="Return within this many seconds with the status as it stands"
                " (the send itself goes on in the server).",
                ge=0,
                le=WAIT_CEILING_S,
            ),
        ] = None,
        device: Annotated[
            str | None,
            Field(description="Which of the server's phones to send a new action through."),
        ] = None,
        ctx: Context,
    ) -> SmsResult:
        return await service.send_sms(
            action_id=action_id,
            to=to,
            body=body,
            wait_seconds=wait_seconds,
            device=device,
            scope=scope_of(ctx),
        )

    server.add_tool(
        send_sms,
        name="send_sms",
        title="Send an SMS at most once",
        description=(
            "Send one SMS through the user's Android phone, at most once per action_id, and"
            " report what the phone proves happened.\n\n"
            "Choose one action_id per message you intend to send and reuse exactly that"
            " action_id, recipient and text whenever you retry (after a timeout, an error or"
            " a restart): a repeated call never sends a second SMS; it resumes the action and"
            " returns its status (the result repeats the action_id). A new action_id is a new"
            " SMS. The same action_id with another recipient or text is an error and sends"
            " nothing.\n\n"
            "Whenever you mean a new message, pass an action_id of your own, even for the same"
            " text to the same number. Without one, an id is derived from the recipient and"
            " text: a repeat while the message's outcome is not proven, or within"
            f" {window} of its latest attempt, is that earlier message and sends nothing"
            " (earlier_message: true, first_sent_at: when it went out); after"
            f" {window} the same text is a new SMS.\n\n"
            f"Returns within wait_seconds (default {config.default_wait_s:g}, at most"
            f" {config.max_wait_s:g}) with the status as it stands: SUCCEEDED (done),"
            " IN_FLIGHT, UNKNOWN or VERIFYING (not proven yet: call again later with the"
            " same action_id, never a new one), FAILED (nothing went out), MISMATCH (another"
            " text went out). Follow next_step.\n\n"
            f"Phones: {devices} (the first is the default)."
            + (
                f" At most {config.max_sends_per_hour} sends per hour; a call over it is an"
                " error and sends nothing."
                if config.max_sends_per_hour is not None
                else ""
            )
            + (
                " This server sends through the phone's framework, one SMS segment per"
                " message: a longer text (over about 160 characters, or 70 when it holds an"
                " emoji or another character outside the GSM alphabet) is an error that says"
                " how many segments it is, and sends nothing."
                if config.send_path == "framework"
                else ""
            )
        ),
        annotations=ToolAnnotations(
            title="Send an SMS at most once",
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=True,
        ),
        structured_output=True,
    )

    async def sms_status(
        *,
        action_id: Annotated[
            str, Field(description="The action_id send_sms returned.", min_length=1)
        ],
        detail: Annotated[
            bool,
            Field(description="Also return every attempt's full record (redacted)."),
        ] = False,
        ctx: Context,
    ) -> SmsResult:
        return await service.sms_status(action_id=action_id, detail=detail, scope=scope_of(ctx))

    server.add_tool(
        sms_status,
        name="sms_status",
        title="Status of an SMS action",
        description=(
            "Where an SMS action stands, from the ledger only: reads nothing on the phone and"
            " never sends. Returns the same fields as send_sms; follow next_step."
        ),
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
        structured_output=True,
    )

    async def reconcile(
        *,
        device: Annotated[
            str | None,
            Field(
                description="One of the server's phones (default: every phone with a send"
                " in flight)."
            ),
        ] = None,
        ctx: Context,
    ) -> ReconcileResult:
        return await service.reconcile(device=device, scope=scope_of(ctx))

    server.add_tool(
        reconcile,
        name="reconcile",
        title="Read the phones",
        description=(
            "Read the phones once and settle what they prove about sends still in flight"
            " (a send whose reply was lost, say). Never sends anything. Returns what changed;"
            f" check each action with sms_status. Phones: {devices}."
        ),
        annotations=ToolAnnotations(
            read_only_hint=True, idempotent_hint=True, open_world_hint=True
        ),
        structured_output=True,
    )

    async def list_review(ctx: Context) -> ReviewList:
        return await service.list_review(scope=scope_of(ctx))

    server.add_tool(
        list_review,
        name="list_review",
        title="Actions waiting for a person",
        description=(
            "The SMS actions automatic handling has stopped on, which a person must decide"
            " (ambiguous, duplicated, mismatched, out of attempts, never seen on the phone),"
            " with their reasons. Read only. Do not resend these; tell the user."
        ),
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
        structured_output=True,
    )

    if config.allow_resolve:

        async def resolve(
            *,
            action_id: Annotated[str, Field(description="The action to rule on.", min_length=1)],
            ruling: Annotated[
                Literal["sent", "not-sent"],
                Field(
                    description="sent: the message went out and is this action's effect;"
                    " not-sent: nothing went out (a later send_sms of it sends again)."
                ),
            ],
            reason: Annotated[
                str, Field(description="Why, kept in the action's history.", min_length=1)
            ],
            dispatch_id: Annotated[
                str | None, Field(description="The attempt to rule on (default: the latest).")
            ] = None,
            expect_version: Annotated[
                int | None,
                Field(
                    description="The attempt's version you looked at: refused if it changed.",
                    ge=0,
                ),
            ] = None,
            ctx: Context,
        ) -> SmsResult:
            return await service.resolve(
                action_id=action_id,
                ruling=ruling,
                reason=reason,
                dispatch_id=dispatch_id,
                expect_version=expect_version,
                scope=scope_of(ctx),
            )

        server.add_tool(
            resolve,
            name="resolve",
            title="Record an operator's ruling",
            description=(
                "Record an operator's ruling on an action's attempt, on behalf of"
                f" {config.operator!r} (this server was started with --allow-resolve). Only"
                " when the user has checked the phone and told you what happened; it clears"
                " review and is kept in the history."
            ),
            annotations=ToolAnnotations(
                read_only_hint=False, destructive_hint=True, open_world_hint=False
            ),
            structured_output=True,
        )
    return server


# --------------------------------------------------------------------------- transports


def parse_http_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8000`` for IPv6; port 0 picks a free one).

    Raises:
        InvalidInput: not HOST:PORT.
    """
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise InvalidInput(f"expected HOST:PORT such as 127.0.0.1:8000, got {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port_text)


async def _serve_http(
    server: MCPServer, http: HttpOptions, announce: Callable[[str], None]
) -> None:
    """Streamable HTTP at ``http://HOST:PORT/mcp`` (uvicorn; its logs go to stderr), every
    request with a bearer token (the server's ``token_verifier``) and a Host, and an Origin
    if any, of this server's (``_mcp_auth.transport_security``)."""
    import uvicorn

    host = http.host
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, http.port))
    bound_port = sock.getsockname()[1]
    app = server.streamable_http_app(
        host=host, transport_security=transport_security(http, bound_port)
    )
    shown = f"[{host}]" if family == socket.AF_INET6 else host

    class Runner(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                announce(f"listening on http://{shown}:{bound_port}/mcp")

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # uvicorn re-raises SIGINT/SIGTERM once it has shut down, which would end the
            # process before the sends still running could finish their step: only stop
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, self.handle_exit, signum, None)
            try:
                yield
            finally:
                for signum in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(signum)

    runner = Runner(uvicorn.Config(app, log_config=None, log_level="warning", lifespan="on"))
    try:
        await runner.serve(sockets=[sock])
    finally:
        sock.close()


async def serve(
    config: ServerConfig, *, http: HttpOptions | None, announce: Callable[[str], None]
) -> None:
    """Run the server over stdio, or over streamable HTTP when ``http`` is given;
    ``announce(text)`` is told where it listens (on stderr: stdout is the protocol's)."""
    async with open_service(config) as service:
        server = build_server(service, clients=http.clients if http is not None else None)
        _log.info(
            "mcp_server_started",
            transport="http" if http else "stdio",
            devices=list(config.devices),
            max_sends_per_hour=config.max_sends_per_hour,
        )
        if http is None:
            await server.run_stdio_async()
        else:
            if not is_loopback(http.host):
                announce(
                    f"listening on {http.host}, not a loopback address (--allow-remote): the"
                    " token crosses the network in clear text unless TLS is put in front"
                )
            if is_wildcard(http.host) and not http.allow_hosts:
                announce(
                    f"{http.host} is every interface, not a Host header a client sends: name"
                    " the addresses clients use with --allow-host HOST:PORT"
                )
            await _serve_http(server, http, announce)
