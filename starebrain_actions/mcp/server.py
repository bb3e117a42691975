"""The MCP server behind ``starebrain mcp``: ``SmsAgent`` offered to AI agents as tools.

A model that retries a tool call after a timeout is the duplicate-send case this product
exists for, so every guarantee of the agent holds through the tools: ``send_sms`` is
idempotent on ``action_id`` and the intent (the ledger's fingerprint), never resends while an
attempt is unresolved, and returns within the caller's wait with the status as it stands.

The server is in pieces: ``config`` (what the options decided), ``service`` (what the tools
do, with the running sends they share), ``phones`` (one connected agent per phone),
``send_cap`` (``--max-sends-per-hour``), ``scoped`` (a ``--clients`` client's own action ids),
``results`` (what a model is told) and ``auth`` (who may call over HTTP). This module makes
the tools of a service and serves them.

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
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Annotated, Final, Literal

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from starebrain_actions._logging import get_logger
from starebrain_actions.core.exceptions import InvalidInput
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
from starebrain_actions.mcp.config import WAIT_CEILING_S, ServerConfig
from starebrain_actions.mcp.results import (
    EventsPage,
    ReconcileResult,
    RepliesResult,
    ReviewList,
    SmsResult,
)
from starebrain_actions.mcp.service import EVENTS_PAGE, SmsService, open_service
from starebrain_actions.render.values import duration_text

__all__ = ["build_server", "parse_http_address", "serve"]

_log = get_logger("starebrain.mcp")

SERVER_INSTRUCTIONS: Final = (
    "starebrain sends SMS through the user's Android phones and never sends the same message"
    " twice. Give every message you intend to send its own stable action_id and reuse exactly"
    " that action_id, recipient and text on every retry (after a timeout, an error or a"
    " restart): a repeated call resumes the same action and never sends a second SMS. Read"
    " `status` and follow `next_step` in every result; `earlier_message: true` means the call"
    " sent nothing and answers with a message sent before. Never work around an unresolved or"
    " failed result by sending under a new action_id: that is how duplicates happen. Actions"
    " listed by list_review wait for a person: tell the user instead of resending. To learn"
    " what happened to queued or earlier sends, call get_events with the last next_after"
    " instead of polling sms_status."
)


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


#: How a tool learns the calling client's view of action ids from its context.
ScopeOf = Callable[[Context], ActionScope]


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
    scope_of = _scope_reader(clients)
    _add_send_sms(server, service, scope_of)
    _add_sms_status(server, service, scope_of)
    _add_reconcile(server, service, scope_of)
    _add_list_review(server, service, scope_of)
    _add_get_events(server, service, scope_of)
    _add_get_replies(server, service, scope_of)
    if config.allow_resolve:
        _add_resolve(server, service, scope_of)
    return server


def _scope_reader(clients: Clients | None) -> ScopeOf:
    """How a tool call finds the calling client's view of action ids."""

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

    return scope_of


def _add_send_sms(server: MCPServer, service: SmsService, scope_of: ScopeOf) -> None:
    """The ``send_sms`` tool."""

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
            Field(
                description="Which of the server's phones to send a new action through. An"
                " action keeps the phone it was made for: a later call naming another phone"
                " sends it through its own, never through the one named."
            ),
        ] = None,
        pool: Annotated[
            str | None,
            Field(
                description="Queue the action for this pool's workers instead of sending it"
                " here: the call reaches no phone and returns at once (status PLANNED while"
                " it waits); a worker beside the pool's phones sends it. Follow it with"
                " sms_status. Not with device.",
                min_length=1,
                max_length=100,
            ),
        ] = None,
        wait_settled: Annotated[
            bool,
            Field(
                description="Keep reading a message the phone shows sent until it settles"
                " (within wait_seconds), resending it on proof of an early failure. Without"
                " it, a message that cannot settle within wait_seconds (the messaging app's"
                " row settles 30 minutes after the send) is answered as soon as it is"
                " found: VERIFYING, with settles_at.",
            ),
        ] = False,
        not_after: Annotated[
            str | None,
            Field(
                description="The message's deadline: an ISO 8601 time with its zone"
                " ('2026-12-08T09:00:00+01:00', '...Z') or a duration from the action's"
                " creation ('90s', '10m', '2h', '1d': a repeated call names the same one)."
                " No attempt starts at or after it, on any path; once it passes with nothing"
                " sent the status is EXPIRED and the message is never sent. Part of the"
                " message: repeat it unchanged on every retry.",
                max_length=64,
            ),
        ] = None,
        not_before: Annotated[
            str | None,
            Field(
                description="The message's schedule, as not_after: no attempt starts before"
                " it (with pool, no worker takes it before then). Part of the message.",
                max_length=64,
            ),
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
            pool=pool,
            wait_settled=wait_settled,
            not_after=not_after,
            not_before=not_before,
        )

    server.add_tool(
        send_sms,
        name="send_sms",
        title="Send an SMS at most once",
        description=_send_sms_description(service.config),
        annotations=ToolAnnotations(
            title="Send an SMS at most once",
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=True,
        ),
        structured_output=True,
    )


def _send_sms_description(config: ServerConfig) -> str:
    """What ``send_sms`` tells a model, with this server's windows, waits, phones and
    limits."""
    devices = ", ".join(config.devices)
    window = duration_text(timedelta(seconds=config.derived_id_window_s))
    return (
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
        " same action_id, never a new one; VERIFYING is answered as soon as the phone"
        " shows the message sent when it cannot settle within wait_seconds, settles_at"
        " saying when it does, unless wait_settled), FAILED (nothing went out), MISMATCH (another"
        " text went out), DENIED (the policy gate or a person denied it: it is never sent;"
        " policy names the rule), EXPIRED (its not_after deadline passed with nothing sent:"
        " it is never sent). Follow next_step.\n\n"
        f"Phones: {devices} (the first is the default; an action keeps the phone it was"
        " made for)."
        + (
            f" With pool (this server's: {', '.join(config.pools)}), the action is queued"
            " instead, for the workers beside that pool's phones: the call reaches no phone,"
            " returns at once with the action's status (PLANNED, or the policy gate's"
            " verdict) and its pool, and a repeat never queues it twice; sms_status follows"
            " it (claim: the worker and phone driving it)."
            if config.pools
            else " This server queues for no pool: leave pool out."
        )
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
    )


def _add_sms_status(server: MCPServer, service: SmsService, scope_of: ScopeOf) -> None:
    """The ``sms_status`` tool."""

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


def _add_reconcile(server: MCPServer, service: SmsService, scope_of: ScopeOf) -> None:
    """The ``reconcile`` tool."""
    devices = ", ".join(service.config.devices)

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


def _add_get_replies(server: MCPServer, service: SmsService, scope_of: ScopeOf) -> None:
    """The ``get_replies`` tool."""

    async def get_replies(
        *,
        action_id: Annotated[
            str, Field(description="The action_id send_sms returned.", min_length=1)
        ],
        ctx: Context,
    ) -> RepliesResult:
        return await service.get_replies(action_id=action_id, scope=scope_of(ctx))

    server.add_tool(
        get_replies,
        name="get_replies",
        title="Replies to an SMS action",
        description=(
            "The replies the recipient sent to this action's SMS, as the ledger recorded them"
            " when the phone was read (reads nothing now, never sends), and whether the"
            " recipient opted out (STOP): then never text it again."
        ),
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
        structured_output=True,
    )


def _add_list_review(server: MCPServer, service: SmsService, scope_of: ScopeOf) -> None:
    """The ``list_review`` tool."""

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


def _add_get_events(server: MCPServer, service: SmsService, scope_of: ScopeOf) -> None:
    """The ``get_events`` tool."""

    async def get_events(
        *,
        after: Annotated[
            int,
            Field(
                description="Return the events after this position: 0 the first time, then"
                " the next_after of the previous call.",
                ge=0,
            ),
        ] = 0,
        limit: Annotated[
            int, Field(description="At most this many events.", ge=1, le=EVENTS_PAGE)
        ] = 100,
        types: Annotated[
            list[str] | None,
            Field(
                description="Only these types (e.g. action.succeeded, action.needs_person,"
                " or a family such as action.*); default: every type."
            ),
        ] = None,
        action_id: Annotated[
            str | None, Field(description="Only this action's events.", min_length=1)
        ] = None,
        ctx: Context,
    ) -> EventsPage:
        return await service.get_events(
            after=after,
            limit=limit,
            types=types or (),
            action_id=action_id,
            scope=scope_of(ctx),
        )

    server.add_tool(
        get_events,
        name="get_events",
        title="What happened to your SMS actions",
        description=(
            "The ledger's events, oldest first, after a cursor: each send taken by the phone"
            " (action.sent), succeeded, failed for good, waiting for a person (with the"
            " command that answers it), denied; replies and opt-outs. Read only, reads no"
            " phone. Keep next_after and pass it as `after` next time: you see each event"
            " once, in order, without polling sms_status for every action."
        ),
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
        structured_output=True,
    )


def _add_resolve(server: MCPServer, service: SmsService, scope_of: ScopeOf) -> None:
    """The ``resolve`` tool (only with ``--allow-resolve``): an operator's ruling."""
    config = service.config

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
    if any, of this server's (``auth.transport_security``)."""
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
    from starebrain_actions.orchestration.webhooks import deliver_in_background

    async with open_service(config) as service:
        # the ledger's webhooks, beside the tools: bounded, errors logged, never raised
        hooks = asyncio.create_task(deliver_in_background(service.ledger))
        try:
            await _serve_service(service, config, http=http, announce=announce)
        finally:
            hooks.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await hooks


async def _serve_service(
    service: SmsService,
    config: ServerConfig,
    *,
    http: HttpOptions | None,
    announce: Callable[[str], None],
) -> None:
    """``serve``'s transport, over the open service."""
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
