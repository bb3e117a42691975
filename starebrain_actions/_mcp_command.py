"""``starebrain mcp``: the MCP server's command line (the server itself is ``_mcp``).

This module imports neither the MCP SDK nor the CLI at import time, so ``starebrain`` starts
without the ``mcp`` extra installed and ``cli`` can register the command at its end.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import click

from starebrain_actions._cli_db import DB_HELP, DbTarget, LedgerTarget
from starebrain_actions._cli_types import (
    DEVICE_ENV,
    Seconds,
    key_option,
    phone_options,
    policy_options,
    retry_policy,
)
from starebrain_actions._core import DERIVED_ID_WINDOW

_INSTALL_HINT = "starebrain mcp needs the MCP SDK: pip install 'starebrain-actions[mcp]'"
_SDK_MODULES = frozenset({"mcp", "mcp_types", "pydantic", "pydantic_core", "uvicorn", "starlette"})


def _addresses(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    from starebrain_actions.cli import _check_address

    return _check_address(ctx, param, value)


def _announce(message: str) -> None:
    click.echo(f"starebrain mcp: {message}", err=True)


@click.command("mcp")
@click.option(
    "--device",
    "devices",
    multiple=True,
    envvar=DEVICE_ENV,
    callback=_addresses,
    help="A phone to send through and read, as HOST:PORT; repeatable (the first is the default"
    f" for new actions). Also read from ${DEVICE_ENV} (several separated by spaces).",
)
@click.option(
    "--db",
    type=DbTarget(),
    default=None,
    help=f"{DB_HELP} [default: starebrain's --db, $STAREBRAIN_DB, or the user's ledger]",
)
@click.option(
    "--http",
    "http_address",
    default=None,
    metavar="HOST:PORT",
    help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (port 0: any free"
    " port; the address is printed on stderr). No authentication: keep it on 127.0.0.1.",
)
@click.option(
    "--max-sends-per-hour",
    type=click.IntRange(min=1),
    default=None,
    help="Sends started on these phones in the last hour at most, counted in the ledger (so"
    " it holds across restarts); a call over it is a tool error that sends nothing."
    " [default: no limit]",
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
@click.option(
    "--derived-id-window",
    type=Seconds(),
    default=DERIVED_ID_WINDOW.total_seconds(),
    show_default=True,
    help="For send_sms calls without an action_id: seconds after its latest attempt during"
    " which a settled action answers a repeat of the same text to the same number (nothing"
    " is sent); past them the same text is a new action. An action whose outcome is not"
    " settled is resumed however old.",
)
@policy_options
@phone_options
@click.option(
    "--region",
    default=None,
    help="Two-letter country code for national numbers, e.g. US. [default: international only]",
)
@key_option
@click.option(
    "--show-private",
    is_flag=True,
    help="Show numbers and bodies in sms_status's detailed record (redacted by default).",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default=None,
    help="Least severe log events written to stderr, redacted. [default: starebrain's --log-level]",
)
@click.pass_context
def mcp_command(
    ctx: click.Context,
    devices: tuple[str, ...],
    db: LedgerTarget | None,
    http_address: str | None,
    max_sends_per_hour: int | None,
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
    backoff: float,
    max_backoff: float,
    rate_limit: int,
    connect_timeout: float,
    command_timeout: float,
    send_path: str,
    region: str | None,
    key_path: Path | None,
    show_private: bool,
    log_level: str | None,
) -> None:
    """Run an MCP server (stdio, or streamable HTTP with --http) whose tools send SMS at most
    once per action id and tell the model what the phone proves: send_sms, sms_status,
    reconcile, list_review (and resolve with --allow-resolve).

    Only the protocol goes to stdout; logs go to stderr, with numbers and bodies redacted.
    """

    from starebrain_actions._logging import LOGGER_NAME, configure_logging
    from starebrain_actions.cli import CliError, CliUsageError, Settings, _ledger_path
    from starebrain_actions.exceptions import InvalidInput, StarebrainError

    level = (
        getattr(logging, log_level.upper())
        if log_level is not None
        else logging.getLogger(LOGGER_NAME).getEffectiveLevel()
    )
    configure_logging(level=level)
    if not devices:
        raise click.UsageError(f"give at least one phone with --device HOST:PORT or ${DEVICE_ENV}")
    if region is not None and not (len(region) == 2 and region.isalpha()):
        raise click.BadParameter(
            f"expected a two-letter country code such as US, got {region!r}", param_hint="--region"
        )
    try:
        from starebrain_actions import _mcp
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] in _SDK_MODULES:
            raise CliError(_INSTALL_HINT) from exc
        raise
    settings = ctx.find_object(Settings)
    if settings is None:  # pragma: no cover - the starebrain group always sets it
        raise CliError("internal: run it as `starebrain mcp`")
    if db is not None:
        settings = Settings(db=db, db_is_default=False, read_as_system=settings.read_as_system)
    phones: tuple[str, ...] = tuple(dict.fromkeys(devices))
    try:
        http = _mcp.parse_http_address(http_address) if http_address is not None else None
        config = _mcp.ServerConfig(
            db=_ledger_path(settings, create=True),
            devices=phones,
            key_path=key_path,
            read_as_system=settings.read_as_system,
            policy=retry_policy(
                max_attempts=max_attempts,
                grace=grace,
                unverified_after=unverified_after,
                settle_after=settle_after,
                framework_settle_after=framework_settle_after,
                backoff=backoff,
                max_backoff=max_backoff,
            ),
            region=region.upper() if region else None,
            max_wait_s=max_wait,
            default_wait_s=min(default_wait, max_wait),
            max_sends_per_hour=max_sends_per_hour,
            rate_limit=rate_limit,
            send_path=send_path,
            connect_timeout_s=connect_timeout,
            command_timeout_s=command_timeout,
            allow_resolve=allow_resolve,
            operator=operator,
            show_private=show_private,
            derived_id_window_s=derived_id_window,
        )
    except InvalidInput as exc:
        raise CliUsageError(str(exc)) from exc
    try:
        asyncio.run(_mcp.serve(config, http=http, announce=_announce))
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except OSError as exc:
        raise CliError(f"cannot serve: {exc}") from exc
    except StarebrainError as exc:
        raise CliError(f"cannot use the ledger: {exc}") from exc
