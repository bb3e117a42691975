"""The ``starebrain`` command line: the composition point of the ledger and the bridge.

This module holds the two entry points, ``main`` (the ``starebrain`` group, with its global
options) and ``nightly_main`` (the nightly job as a command of its own), and the click
classes they share; each command lives in a module of its own. Light commands are
registered here at import; the others are imported when they are named
(``_Group.LAZY_COMMANDS``).

Read commands never create a ledger; ``send`` does. Every read command takes ``--json``
(records through the package's cattrs converter) and redacts phone numbers and bodies unless
``--show-private`` is given. Errors name the problem and exit 1 (2 for usage errors).
"""

from __future__ import annotations

import importlib
import logging
import os
from pathlib import Path
from typing import Any, Final

import click

from starebrain_actions._logging import configure_logging, configure_logging_on_first_event
from starebrain_actions.cli.context import DB_ENV, LEDGER_HELP, Settings, default_db_path
from starebrain_actions.cli.db import DB_HELP, LedgerTarget
from starebrain_actions.cli.options import db_option, log_level_option, read_as_system_option
from starebrain_actions.cli.reads import history, list_command, review, status
from starebrain_actions.cli.reconcile import (
    nightly,
    nightly_options,
    reconcile,
    run_nightly_command,
)
from starebrain_actions.cli.resolve import resolve
from starebrain_actions.cli.send import send
from starebrain_actions.render import json_output as _render_json
from starebrain_actions.render.output import survive_closed_pipes

#: Commands that reach no phone: their only log events are the ledger's (``main``).
_LEDGER_ONLY_COMMANDS: Final = frozenset(
    {"events", "history", "list", "optouts", "policy", "replies", "review", "status"}
)


#: Commands that open no ledger, or none that ``--db`` names (``migrate`` is given two);
#: every other command's help says which ledger it opens (``LEDGER_HELP``).
_NO_LEDGER_COMMANDS: Final = frozenset({"demo", "key", "migrate", "mcp token", "simulator"})


def _say_ledger(command: click.Command, path: str) -> None:
    """Append ``LEDGER_HELP`` to the help of ``command`` (and of its subcommands) unless it
    opens no ledger; once."""
    if path in _NO_LEDGER_COMMANDS:
        return
    if command.epilog is None:
        command.epilog = LEDGER_HELP
    if isinstance(command, click.Group):
        for name, subcommand in command.commands.items():
            _say_ledger(subcommand, f"{path} {name}")


class _Utf8Args:
    """Refuses an argument that is not valid UTF-8 with a usage error (exit 2). Python turns
    such bytes of ``argv`` into lone surrogates, which SQLite cannot store, JSON cannot carry
    and a terminal cannot print: they are stopped before any command sees them."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        for arg in args:
            try:
                arg.encode("utf-8")
            except UnicodeEncodeError:
                raw = os.fsencode(arg)
                raise click.UsageError(
                    f"argument {raw!r} is not valid UTF-8; give numbers, bodies, ids and paths"
                    " as UTF-8 text",
                    ctx=ctx,
                ) from None
        return super().parse_args(ctx, args)  # type: ignore[misc, no-any-return]


class _ClosedPipes:
    """A reader that goes (``| head``) ends no command: its output is dropped from then on
    and it exits with its own status (``render.output.survive_closed_pipes``), where click
    would exit 1."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        survive_closed_pipes()
        return super().main(*args, **kwargs)  # type: ignore[misc]


class _Group(_ClosedPipes, _Utf8Args, _render_json.JsonErrorGroup):
    """The ``starebrain`` group: JSON errors with ``--json``, UTF-8 arguments only.

    The commands in ``LAZY_COMMANDS`` are imported when they are named (or listed by
    ``--help``), so that every other command starts without loading their modules."""

    #: command name -> ``module:attribute`` of its click command
    LAZY_COMMANDS: Final = {
        "demo": "starebrain_actions.cli.demo:demo_command",
        "devices": "starebrain_actions.cli.devices:devices_command",
        "doctor": "starebrain_actions.cli.doctor:doctor_command",
        "events": "starebrain_actions.cli.events:events_command",
        "key": "starebrain_actions.cli.keys:key_command",
        "mcp": "starebrain_actions.cli.mcp_command:mcp_command",
        "migrate": "starebrain_actions.cli.migrate:migrate_command",
        "approve": "starebrain_actions.cli.recover:approve_command",
        "deny": "starebrain_actions.cli.recover:deny_command",
        "optouts": "starebrain_actions.cli.replies:optouts_command",
        "policy": "starebrain_actions.cli.policy_command:policy_command",
        "replies": "starebrain_actions.cli.replies:replies_command",
        "resume": "starebrain_actions.cli.recover:resume_command",
        "retry": "starebrain_actions.cli.recover:retry_command",
        "simulator": "android_bridge.simulator.cli:simulator_command",
        "worker": "starebrain_actions.cli.worker:worker_command",
        "webhook": "starebrain_actions.cli.webhook:webhook_command",
        "deliver": "starebrain_actions.cli.webhook:deliver_command",
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        where = self.LAZY_COMMANDS.get(cmd_name)
        if where is not None and cmd_name not in self.commands:
            module, _, attribute = where.partition(":")
            self.add_command(getattr(importlib.import_module(module), attribute), cmd_name)
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            _say_ledger(command, cmd_name)
        return command


class _Command(_ClosedPipes, _Utf8Args, _render_json.JsonErrorCommand):
    """A standalone command: JSON errors with ``--json``, UTF-8 arguments only."""


# --------------------------------------------------------------------------- group


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="starebrain-actions")
@db_option(
    help=f"{DB_HELP} Also read from ${DB_ENV}."
    " [default: $XDG_DATA_HOME/starebrain/ledger.db, i.e. ~/.local/share/starebrain/ledger.db]",
)
@log_level_option(
    help="Least severe log events written to stderr (numbers and bodies are redacted).",
)
@read_as_system_option
@click.pass_context
def main(ctx: click.Context, db: LedgerTarget | None, log_level: str, read_as_system: bool) -> None:
    """Send SMS through an Android phone without ever sending the same message twice."""
    level = getattr(logging, log_level.upper())
    if ctx.invoked_subcommand in _LEDGER_ONLY_COMMANDS:
        configure_logging_on_first_event(level=level)  # start without structlog
    else:
        configure_logging(level=level)
    ctx.obj = Settings(
        db=db if db is not None else default_db_path(),
        db_is_default=db is None,
        read_as_system=read_as_system,
    )


for _command in (send, status, list_command, history, review, resolve, reconcile, nightly):
    main.add_command(_command)


# --------------------------------------------------------------------------- nightly job


@click.command(
    "nightly_reconcile",
    cls=_Command,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@db_option(
    help=f"{DB_HELP} Also read from ${DB_ENV}. [default: $XDG_DATA_HOME/starebrain/ledger.db]",
)
@log_level_option(help="Least severe log events written to stderr.")
@nightly_options
@read_as_system_option
@click.pass_context
def nightly_main(
    ctx: click.Context,
    db: LedgerTarget | None,
    log_level: str,
    read_as_system: bool,
    devices: tuple[str, ...],
    report_path: Path | None,
    archive_dir: Path | None,
    key_path: Path | None,
    as_json: bool,
    dry_run: bool,
    resume: bool,
    unsent_after: float,
    resume_wait: float,
    share_phone: bool,
    policy_path: Path | None,
) -> None:
    """The nightly job as a standalone command (``scripts/nightly_reconcile.py``); the same
    code and exit statuses as ``starebrain nightly``."""
    configure_logging(level=getattr(logging, log_level.upper()))
    settings = Settings(
        db=db if db is not None else default_db_path(),
        db_is_default=db is None,
        read_as_system=read_as_system,
    )
    ctx.exit(
        run_nightly_command(
            settings=settings,
            dry_run=dry_run,
            devices=devices,
            report_path=report_path,
            archive_dir=archive_dir,
            key_path=key_path,
            as_json=as_json,
            resume=resume,
            unsent_after=unsent_after,
            resume_wait=resume_wait,
            share_phone=share_phone,
            policy_path=policy_path,
        )
    )


# `simulator` (contributed by android_bridge, registered here so that the bridge never imports
# us), `demo`, `devices`, `key`, `mcp`, `migrate`, `webhook`, `deliver` and the recovery
# commands are imported when they are named (_Group).
