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


#: Commands that set logging up when something is first written: the ledger-only ones, and
#: ``send``, whose events at the default level (warning) are rare.
_FIRST_EVENT_LOGGING: Final = _LEDGER_ONLY_COMMANDS | {"send"}


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

    The commands in ``LAZY_COMMANDS`` are imported when they are named, so that every
    other command starts without loading their modules; ``--help`` lists them from the
    first sentence of their help kept here, importing none of them (``demo`` and
    ``simulator`` load the simulated phone, ``mcp`` and ``worker`` the agent)."""

    #: command name -> (``module:attribute`` of its click command, the first sentence of its
    #: help: what the group's ``--help`` lists; tests/e2e/test_cli_startup.py keeps it equal)
    LAZY_COMMANDS: Final = {
        "demo": (
            "starebrain_actions.cli.demo:demo_command",
            (
                "Show, on two simulated phones with the same faults, how many duplicate SMS the "
                "ledger agent and a naive retry-on-timeout agent send (no phone needed; about 10 "
                "seconds)."
            ),
        ),
        "devices": (
            "starebrain_actions.cli.devices:devices_command",
            (
                "List the phones: those --device gives, or without it each one the ledger's "
                "attempts name or a worker holds; whether it answers, its Android release, its "
                "default SMS app, the path a send with --send-path auto would take and how the "
                "framework path stands there (`framework: proven by ID`, `ui: doubted since T by "
                "ID`, `framework: restored at T by ID`), the attempt holding it, the worker "
                "holding it (its heartbeat's age, `STALE` once it stopped, and what it is doing) "
                "and `doctor`'s checks of it in a line (`ok`, `N warn`, `FAIL: name`)."
            ),
        ),
        "doctor": (
            "starebrain_actions.cli.doctor:doctor_command",
            (
                "Check on one phone every assumption the guarantees rest on: the key and its "
                "expiry, the shell's uid, the release, the phone's identity, the clock, the "
                "default SMS app and chat, the screen, Android's SMS limit, the SMS and MMS "
                "providers as the shell sees them (types, SqlQueryChecker, subscriptions, "
                "delivery status), the fence, the framework's transaction codes read from the "
                "phone's own code, which ledgers the fence names (another ledger's open attempts "
                "fail: a send is refused; another that sent last warns); then which path the next"
                " send takes (check send-path: chosen as `send` chooses it, from the ledger's "
                "record, read only)."
            ),
        ),
        "events": (
            "starebrain_actions.cli.events:events_command",
            (
                "Show what happened, in the order the ledger recorded it: every action created, "
                "sent, succeeded, failed, waiting for a person (with the command that answers "
                "it), denied; replies and opt-outs."
            ),
        ),
        "key": (
            "starebrain_actions.cli.keys:key_command",
            ("The ADB key this computer signs in to phones with."),
        ),
        "mcp": (
            "starebrain_actions.cli.mcp_command:mcp_command",
            (
                "Run an MCP server (stdio, or streamable HTTP with --http) whose tools send SMS "
                "at most once per action id and tell the model what the phone proves: send_sms, "
                "sms_status, reconcile, list_review (and resolve with --allow-resolve)."
            ),
        ),
        "migrate": (
            "starebrain_actions.cli.migrate:migrate_command",
            ("Copy a SQLite ledger, history included, into an empty PostgreSQL ledger."),
        ),
        "approve": (
            "starebrain_actions.cli.recover:approve_command",
            (
                "A person's approval of an action the policy gate holds for one (approve = new or"
                " always): the next send, resume or send_sms of it sends it (the policy's other "
                "rules still apply)."
            ),
        ),
        "deny": (
            "starebrain_actions.cli.recover:deny_command",
            (
                "A person's denial of an action: nothing is ever sent for it afterwards (an "
                "attempt already under way is not called back)."
            ),
        ),
        "optouts": (
            "starebrain_actions.cli.replies:optouts_command",
            (
                "List the numbers opted out now (a STOP reply, or a person's `optouts add`): the "
                "gate refuses every new attempt to them, on every path, until they opt back in "
                "(START) or a person removes the opt-out."
            ),
        ),
        "policy": (
            "starebrain_actions.cli.policy_command:policy_command",
            (
                "The policy an action is judged by on every path that can send it: the rules of "
                "the gate that first judged it, kept in the ledger with the action "
                "(docs/policy.md)."
            ),
        ),
        "replies": (
            "starebrain_actions.cli.replies:replies_command",
            (
                "List the replies recorded (to ACTION_ID, or all), oldest first: incoming texts "
                "from numbers this ledger has texted, seen by the reads of sends and reconcile "
                "passes, each linked to the latest action sent to that number through that phone "
                "before it."
            ),
        ),
        "resume": (
            "starebrain_actions.cli.recover:resume_command",
            (
                "Finish what was started: on each phone, read it once (settling what a read can),"
                " then send every action that can move, oldest first, through send's own path: "
                "PLANNED ones (dealt among the phones given), and those whose latest attempt on "
                "the phone FAILED with attempts left, once their backoff has passed."
            ),
        ),
        "retry": (
            "starebrain_actions.cli.recover:retry_command",
            (
                "Give an action whose attempts are used up, or whose retries were refused (the "
                "same wrong text twice, a passed deadline), another chance."
            ),
        ),
        "simulator": (
            "android_bridge.simulator.cli:simulator_command",
            ("Run a simulated Android phone that speaks the real ADB protocol."),
        ),
        "worker": (
            "starebrain_actions.cli.worker:worker_command",
            ("Send the messages queued for a pool through these phones, until stopped."),
        ),
        "webhook": (
            "starebrain_actions.cli.webhook:webhook_command",
            (
                "Webhook endpoints: the ledger's events POSTed to an HTTP(S) URL as they are "
                "written, signed per Standard Webhooks (headers webhook-id, webhook-timestamp, "
                "webhook-signature), at least once and in order per endpoint."
            ),
        ),
        "deliver": (
            "starebrain_actions.cli.webhook:deliver_command",
            (
                "Send the ledger's events to the webhook endpoints: what is due now (new events, "
                "and retries whose time has come), in order per endpoint, then exit; --once: one "
                "pass only; --follow: keep going."
            ),
        ),
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        lazy = self.LAZY_COMMANDS.get(cmd_name)
        if lazy is not None and cmd_name not in self.commands:
            module, _, attribute = lazy[0].partition(":")
            self.add_command(getattr(importlib.import_module(module), attribute), cmd_name)
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            _say_ledger(command, cmd_name)
        return command

    def listed_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """What ``--help`` lists for ``cmd_name``: a command not imported yet stands in as
        one holding the first sentence of its help, which lists it in the same words."""
        lazy = self.LAZY_COMMANDS.get(cmd_name)
        if lazy is not None and cmd_name not in self.commands:
            return click.Command(cmd_name, help=lazy[1])
        return self.get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's own listing (``click.Group.format_commands``), through ``listed_command``."""
        commands = []
        for name in self.list_commands(ctx):
            command = self.listed_command(ctx, name)
            if command is not None and not command.hidden:
                commands.append((name, command))
        if commands:
            limit = formatter.width - 6 - max(len(name) for name, _ in commands)
            rows = [(name, command.get_short_help_str(limit)) for name, command in commands]
            with formatter.section("Commands"):
                formatter.write_dl(rows)


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
    if ctx.invoked_subcommand in _FIRST_EVENT_LOGGING:
        configure_logging_on_first_event(level=level)  # structlog only if something is written
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
