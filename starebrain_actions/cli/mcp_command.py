"""``starebrain mcp``: the MCP server's command line (the server itself is ``mcp.server``).

This module imports neither the MCP SDK nor the server at import time, so ``starebrain``
starts, and lists this command, without the ``mcp`` extra installed.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from starebrain_actions.cli.context import CliError, CliUsageError, Settings, ledger_path
from starebrain_actions.cli.db import DB_HELP, LedgerTarget
from starebrain_actions.cli.options import (
    DEVICE_ENV,
    Seconds,
    db_option,
    derived_id_window_option,
    device_option,
    key_option,
    log_level_option,
    phone_options,
    policy_file_option,
    policy_options,
    region_option,
    retry_policy,
    share_phone_option,
    show_private_option,
)
from starebrain_actions.mcp.auth import TOKEN_ENV

if TYPE_CHECKING:
    from starebrain_actions.core.policy import Policy

#: ``--max-sends-per-hour`` unless given: an agent's ordinary traffic (a few texts an hour,
#: a burst of reminders) fits, while a model gone wrong or prompt-injected is stopped after
#: 20 texts, well under what the phone itself allows (Android prompts after 30 in 30 minutes).
DEFAULT_MAX_SENDS_PER_HOUR = 20

_INSTALL_HINT = "starebrain mcp needs the MCP SDK: pip install 'starebrain-actions[mcp]'"
_SDK_MODULES = frozenset({"mcp", "mcp_types", "pydantic", "pydantic_core", "uvicorn", "starlette"})


def _announce(message: str) -> None:
    click.echo(f"starebrain mcp: {message}", err=True)


@click.group("mcp", invoke_without_command=True)
@device_option(
    "devices",
    multiple=True,
    help="A phone to send through and read, as HOST:PORT; repeatable (the first is the default"
    f" for new actions). Also read from ${DEVICE_ENV} (several separated by spaces).",
)
@db_option(
    help=f"{DB_HELP} [default: starebrain's --db, $STAREBRAIN_DB, or the user's ledger]",
    envvar=None,
)
@click.option(
    "--http",
    "http_address",
    default=None,
    metavar="HOST:PORT",
    help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (port 0: any free"
    " port; the address is printed on stderr). Every request needs 'Authorization: Bearer"
    f" TOKEN': ${TOKEN_ENV}, else the token file in the config dir (`starebrain mcp token`"
    " prints it), or a client's from --clients.",
)
@click.option(
    "--clients",
    "clients_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help='With --http: a TOML file naming the clients, [clients.NAME] with token = "…" (at'
    ' least 32 characters) and policy = "FILE" (the client\'s own policy gate, instead of'
    " --policy's). It replaces the server's own token; each client's action ids are its own"
    " (NAME/ID in the ledger). Keep it private (chmod 600).",
)
@click.option(
    "--allow-remote",
    is_flag=True,
    help="With --http: allow an address that is not loopback. Put TLS in front (a reverse"
    " proxy): the token travels in every request.",
)
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="HOST[:PORT]",
    help="With --http: another Host header to accept (exactly; NAME:* for any port), e.g. the"
    " name a reverse proxy forwards; repeatable. [default: the bind address with its port,"
    " and localhost:PORT for a loopback bind]",
)
@click.option(
    "--allow-origin",
    "allow_origins",
    multiple=True,
    metavar="ORIGIN",
    help="With --http: another Origin header to accept, e.g. https://sms.example.com;"
    " repeatable. [default: http:// and each accepted default Host]",
)
@click.option(
    "--max-sends-per-hour",
    type=click.IntRange(min=0),
    default=DEFAULT_MAX_SENDS_PER_HOUR,
    show_default=True,
    help="Sends started on these phones in the last hour at most, counted in the ledger (so"
    " it holds across restarts); a call over it is a tool error that sends nothing. 0: no"
    " limit. The default lets an agent's ordinary traffic through and stops a model gone"
    " wrong after 20 texts, under Android's own 30 per 30 minutes.",
)
@click.option(
    "--pool",
    "pools",
    multiple=True,
    metavar="NAME",
    help="A pool send_sms may queue actions for (its pool argument), for the workers beside"
    " that pool's phones (`starebrain worker --pool NAME`) to send; repeatable. Queued"
    " actions count in --max-sends-per-hour. A client of --clients queues only for the pools"
    ' its table names (pools = ["NAME"]). [default: none: the server queues nothing]',
)
@click.option(
    "--allow-resolve",
    is_flag=True,
    help="Offer the resolve tool (an operator's ruling). Off by default: rulings are a"
    " person's to make, with `starebrain resolve`.",
)
@click.option(
    "--operator",
    default="mcp",
    show_default=True,
    help="The operator name resolve records (with --allow-resolve).",
)
@click.option(
    "--default-wait",
    type=Seconds(1, 600),
    default=20.0,
    show_default=True,
    help="Seconds send_sms waits for proof when the call gives no wait_seconds; a send a call"
    " starts runs at least this long in the server, even after a quicker return.",
)
@click.option(
    "--max-wait",
    type=Seconds(1, 600),
    default=60.0,
    show_default=True,
    help="The longest wait_seconds honoured (keep it under your MCP client's tool timeout).",
)
@derived_id_window_option(
    help="For send_sms calls without an action_id: seconds after its latest attempt during"
    " which a settled action answers a repeat of the same text to the same number (nothing"
    " is sent); past them the same text is a new action. An action whose outcome is not"
    " settled is resumed however old.",
)
@policy_options
@phone_options
@region_option
@key_option
@policy_file_option
@share_phone_option
@show_private_option(
    help="Show numbers and bodies in sms_status's detailed record (redacted by default).",
)
@log_level_option(
    help="Least severe log events written to stderr, redacted. [default: starebrain's --log-level]",
    default=None,
)
@click.pass_context
def mcp_command(
    ctx: click.Context,
    devices: tuple[str, ...],
    db: LedgerTarget | None,
    http_address: str | None,
    clients_file: Path | None,
    allow_remote: bool,
    allow_hosts: tuple[str, ...],
    allow_origins: tuple[str, ...],
    max_sends_per_hour: int,
    pools: tuple[str, ...],
    allow_resolve: bool,
    operator: str,
    default_wait: float,
    max_wait: float,
    derived_id_window: float,
    max_attempts: int,
    grace: float,
    unverified_after: float,
    settle_after: float,
    framework_settle_after: float,
    app_send_timeout: float,
    backoff: float,
    max_backoff: float,
    rate_limit: int,
    connect_timeout: float,
    command_timeout: float,
    send_path: str,
    region: str | None,
    key_path: Path | None,
    policy_path: Path | None,
    share_phone: bool,
    show_private: bool,
    log_level: str | None,
) -> None:
    """Run an MCP server (stdio, or streamable HTTP with --http) whose tools send SMS at most
    once per action id and tell the model what the phone proves: send_sms, sms_status,
    reconcile, list_review (and resolve with --allow-resolve).

    Only the protocol goes to stdout; logs go to stderr, with numbers and bodies redacted.
    `starebrain mcp token` prints the token HTTP clients send.
    """
    # Kept whole: its length is its 30 options and the server's config made of them, one
    # field each; the steps around them (usage, logging, the SDK, the gates, serving) are
    # functions of their own.
    if ctx.invoked_subcommand is not None:
        return

    from starebrain_actions.core.exceptions import InvalidInput

    _configure_logging(log_level)
    _check_usage(
        devices,
        region,
        http_address,
        clients_file=clients_file,
        allow_remote=allow_remote,
        allow_hosts=allow_hosts,
        allow_origins=allow_origins,
    )
    server = _server_module()
    from starebrain_actions.mcp.config import ServerConfig

    settings = _server_settings(ctx, db)
    try:
        http = _http_options(
            http_address,
            clients_file=clients_file,
            allow_hosts=allow_hosts,
            allow_origins=allow_origins,
        )
        gate, client_gates = _gates(policy_path, http)
        config = ServerConfig(
            gate=gate,
            client_gates=client_gates,
            db=ledger_path(settings, create=True),
            devices=tuple(dict.fromkeys(devices)),
            key_path=key_path,
            read_as_system=settings.read_as_system,
            policy=retry_policy(
                max_attempts=max_attempts,
                grace=grace,
                unverified_after=unverified_after,
                settle_after=settle_after,
                framework_settle_after=framework_settle_after,
                app_send_timeout=app_send_timeout,
                backoff=backoff,
                max_backoff=max_backoff,
            ),
            region=region.upper() if region else None,
            max_wait_s=max_wait,
            default_wait_s=min(default_wait, max_wait),
            max_sends_per_hour=max_sends_per_hour or None,
            rate_limit=rate_limit,
            send_path=send_path,
            share_phone=share_phone,
            connect_timeout_s=connect_timeout,
            command_timeout_s=command_timeout,
            allow_resolve=allow_resolve,
            operator=operator,
            show_private=show_private,
            derived_id_window_s=derived_id_window,
            pools=tuple(dict.fromkeys(pools)),
            owners=_owners(http),
        )
    except InvalidInput as exc:
        raise CliUsageError(str(exc)) from exc
    _serve(server, config, http)


def _configure_logging(log_level: str | None) -> None:
    """Logs on stderr at ``--log-level``, else at the level the ``starebrain`` group set."""
    from starebrain_actions._logging import LOGGER_NAME, configure_logging

    level = (
        getattr(logging, log_level.upper())
        if log_level is not None
        else logging.getLogger(LOGGER_NAME).getEffectiveLevel()
    )
    configure_logging(level=level)


def _server_module() -> Any:
    """``mcp.server``, imported with the MCP SDK.

    Raises:
        CliError: the SDK is not installed (the ``mcp`` extra), with the command that
            installs it.
    """
    try:
        from starebrain_actions.mcp import server as _mcp
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] in _SDK_MODULES:
            raise CliError(_INSTALL_HINT) from exc
        raise
    return _mcp


def _server_settings(ctx: click.Context, db: LedgerTarget | None) -> Settings:
    """The group's settings, with the ledger ``mcp --db`` names instead of its own."""
    settings = ctx.find_object(Settings)
    if settings is None:  # pragma: no cover - the starebrain group always sets it
        raise CliError("internal: run it as `starebrain mcp`")
    if db is not None:
        settings = Settings(db=db, db_is_default=False, read_as_system=settings.read_as_system)
    return settings


def _owners(http: Any) -> tuple[str, ...]:
    """The clients of ``--clients``, whose namespaces (``NAME/``) the server registers in the
    ledger when it starts; none without the file (the server's own token is no client)."""
    if http is None or not http.clients.scoped:
        return ()
    return tuple(client.name for client in http.clients.clients)


def _gates(policy_path: Path | None, http: Any) -> tuple[Policy, dict[str, Policy | None]]:
    """The server's policy gate, and each ``--clients`` client's own (by its name).

    Raises:
        InvalidInput: a policy file cannot be read or a rule refuses a value.
    """
    from starebrain_actions.cli.options import policy_for
    from starebrain_actions.core.policy import Policy

    # a model's call is no person's approval: the first SMS to a number waits for one, and
    # a short code (premium-rate services use them) that no list names is refused, unless
    # the policy file says otherwise
    gate = policy_for(policy_path, approve="new", short_codes="deny") or Policy(
        approve="new", short_codes="deny"
    )
    # a client of --clients with its own policy file passes that gate instead
    client_gates = {
        client.name: policy_for(client.policy, approve="new", short_codes="deny")
        for client in (http.clients.clients if http is not None else ())
        if client.policy is not None
    }
    return gate, client_gates


def _serve(server: Any, config: Any, http: Any) -> None:
    """Serve until the client goes or Ctrl-C (exit 130).

    Raises:
        CliError: the address cannot be served or the ledger cannot be used.
    """
    from starebrain_actions.core.exceptions import StarebrainError

    try:
        asyncio.run(server.serve(config, http=http, announce=_announce))
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except OSError as exc:
        raise CliError(f"cannot serve: {exc}") from exc
    except StarebrainError as exc:
        raise CliError(f"cannot use the ledger: {exc}") from exc


@mcp_command.command("token")
def token_command() -> None:
    """Print the token `starebrain mcp --http` requires, for an MCP client's configuration
    (`Authorization: Bearer TOKEN`): $STAREBRAIN_MCP_TOKEN, else the token file in the config
    dir, created at random (0600) if missing. Not the tokens of a --clients file."""
    from starebrain_actions.mcp.auth import McpAuthError, server_token

    try:
        token, path, created = server_token(os.environ)
    except McpAuthError as exc:
        raise CliError(str(exc)) from exc
    except OSError as exc:
        raise CliError(f"cannot create the token file: {exc}") from exc
    if created:
        _announce(f"created a token in {path}")
    click.echo(token)


def _check_usage(
    devices: tuple[str, ...],
    region: str | None,
    http_address: str | None,
    *,
    clients_file: Path | None,
    allow_remote: bool,
    allow_hosts: tuple[str, ...],
    allow_origins: tuple[str, ...],
) -> None:
    """Usage errors (exit 2), before anything is opened: no phone, the HTTP options, the
    region."""
    if not devices:
        raise click.UsageError(f"give at least one phone with --device HOST:PORT or ${DEVICE_ENV}")
    _check_http_options(
        http_address,
        clients_file=clients_file,
        allow_remote=allow_remote,
        allow_hosts=allow_hosts,
        allow_origins=allow_origins,
    )
    if region is not None and not (len(region) == 2 and region.isalpha()):
        raise click.BadParameter(
            f"expected a two-letter country code such as US, got {region!r}", param_hint="--region"
        )


def _check_http_options(
    http_address: str | None,
    *,
    clients_file: Path | None,
    allow_remote: bool,
    allow_hosts: tuple[str, ...],
    allow_origins: tuple[str, ...],
) -> None:
    """Usage errors (exit 2) of the HTTP options, before anything is opened."""
    from starebrain_actions.mcp.auth import is_loopback

    if http_address is None:
        given = [
            name
            for name, value in (
                ("--clients", clients_file),
                ("--allow-remote", allow_remote),
                ("--allow-host", allow_hosts),
                ("--allow-origin", allow_origins),
            )
            if value
        ]
        if given:
            raise click.UsageError(f"{', '.join(given)} only apply with --http HOST:PORT")
        return
    host = http_address.rpartition(":")[0].removeprefix("[").removesuffix("]")
    if host and not is_loopback(host) and not allow_remote:
        raise click.UsageError(
            f"--http {http_address} is not a loopback address: anyone who can reach it could"
            " try the token. Add --allow-remote to serve it, and put TLS in front (a reverse"
            " proxy), or use 127.0.0.1"
        )
    for value in allow_hosts:
        if not value or "/" in value or any(c.isspace() for c in value):
            raise click.BadParameter(
                f"expected a Host header value such as sms.example.com:8443, got {value!r}",
                param_hint="--allow-host",
            )
    for value in allow_origins:
        scheme, sep, rest = value.partition("://")
        if scheme not in ("http", "https") or not sep or not rest or "/" in rest:
            raise click.BadParameter(
                f"expected an origin such as https://sms.example.com, got {value!r}",
                param_hint="--allow-origin",
            )


def _http_options(
    http_address: str | None,
    *,
    clients_file: Path | None,
    allow_hosts: tuple[str, ...],
    allow_origins: tuple[str, ...],
) -> Any:
    """The HTTP server's options (None: no ``--http``, the server speaks stdio): its
    address, and the tokens it accepts (the clients file's, or the server's own token, whose
    file's path, never the token, goes to stderr).

    Raises:
        InvalidInput: a malformed address.
        CliError: the token or clients file cannot be used.
    """
    from starebrain_actions.mcp import server as _mcp
    from starebrain_actions.mcp.auth import (
        OWNER,
        Clients,
        HttpOptions,
        McpAuthError,
        McpClient,
        load_clients,
        server_token,
    )

    if http_address is None:
        return None
    host, port = _mcp.parse_http_address(http_address)
    try:
        if clients_file is not None:
            clients = load_clients(clients_file)
            names = ", ".join(client.name for client in clients.clients)
            _announce(f"clients from {clients_file}: {names} (each with its own action ids)")
        else:
            token, path, created = server_token(os.environ)
            clients = Clients(clients=(McpClient(name=OWNER, token=token),))
            if path is None:
                _announce(f"the token is ${TOKEN_ENV}'s")
            else:
                verb = "created a token in" if created else "the token is in"
                _announce(f"{verb} {path} (`starebrain mcp token` prints it)")
    except McpAuthError as exc:
        raise CliError(str(exc)) from exc
    except OSError as exc:
        raise CliError(f"cannot create the token file: {exc}") from exc
    return HttpOptions(
        host=host,
        port=port,
        clients=clients,
        allow_hosts=allow_hosts,
        allow_origins=allow_origins,
    )
