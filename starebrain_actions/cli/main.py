"""The ``starebrain`` command line: the composition point of the ledger and the bridge.

Read commands never create a ledger; ``send`` does. Every read command takes ``--json``
(records through the package's cattrs converter) and redacts phone numbers and bodies unless
``--show-private`` is given. Errors name the problem and exit 1 (2 for usage errors).
"""

from __future__ import annotations

import contextlib
import getpass
import importlib
import logging
import os
import re
import stat
import sys
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import AbstractAsyncContextManager, contextmanager, nullcontext
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import attrs
import click

from android_bridge.exceptions import BridgeError
from starebrain_actions import _paths
from starebrain_actions._logging import configure_logging, configure_logging_on_first_event
from starebrain_actions.cli.db import DB_HELP, DbTarget, LedgerTarget, is_url, read_one
from starebrain_actions.cli.options import (
    DEVICE_ENV,
    Seconds,
    key_option,
    phone_options,
    policy_file_option,
    policy_options,
    retry_policy,
)
from starebrain_actions.core.convert import age, to_jsonable
from starebrain_actions.core.derived_ids import (
    choose_derived_generation,
    derive_action_id,
    derived_generation_id,
    earlier_message,
    settled,
)
from starebrain_actions.core.exceptions import (
    CorruptRecord,
    FingerprintConflict,
    InvalidInput,
    LedgerUnavailable,
    NotFound,
    SchemaTooNew,
    StaleTransition,
    StarebrainError,
)
from starebrain_actions.core.model import (
    ActionSummary,
    PhoneHold,
    ProviderKind,
    RedispatchReason,
    RetryPolicy,
    SmsIntent,
    Status,
    check_action_id,
)
from starebrain_actions.core.transitions import (
    DERIVED_ID_WINDOW,
    GRANTABLE,
    failed_after_sent,
    phone_hold,
    settling_until,
    should_redispatch,
    spends_budget,
)
from starebrain_actions.render import json_output as _render_json
from starebrain_actions.render import output as _render
from starebrain_actions.render import records as _render_records
from starebrain_actions.render import sanitize as _render_sanitize
from starebrain_actions.render import values as _render_values

if TYPE_CHECKING:
    from starebrain_actions.cli.progress import Progress
    from starebrain_actions.ledger.store import Ledger
    from starebrain_actions.orchestration.agent import ReconcilePass, SendOutcome, SmsAgent

T = TypeVar("T")

#: Environment variable naming the ledger, a file path or a PostgreSQL URL (same as ``--db``).
DB_ENV: Final = "STAREBRAIN_DB"
#: Read phones through `su 1000` (the same name as `_android.READ_AS_SYSTEM_ENV`, kept here so
#: that the CLI starts without importing the ADB stack).
READ_AS_SYSTEM_ENV: Final = "STAREBRAIN_READ_AS_SYSTEM"

#: Exit statuses of ``send``.
EXIT_SUCCEEDED: Final = 0
EXIT_ERROR: Final = 1
EXIT_USAGE: Final = 2
EXIT_UNRESOLVED: Final = 3
EXIT_FAILED: Final = 4
EXIT_MISMATCH: Final = 5
#: the phone shows the message sent, but it has not settled: the app may still mark it
#: failed until its settle time (rerun to follow it; never send it anew)
EXIT_SETTLING: Final = 6
#: the phone is not ready (locked, screen off, no SMS app, unreachable...): nothing was sent
#: and no attempt was spent; a person must act on the phone, then rerun the same command
EXIT_NOT_READY: Final = 7
#: the policy gate holds the action: a person's approval, or quiet hours (nothing was sent)
EXIT_HELD: Final = 8
#: the policy gate refused the action: a recipient rule or a person's denial (never sent), or
#: a limit (try later)
EXIT_REFUSED: Final = 9
#: Ctrl-C (128 + SIGINT, as shells report it)
EXIT_INTERRUPTED: Final = 130

_LOG_LEVELS: Final = ("debug", "info", "warning", "error")
#: Commands that reach no phone: their only log events are the ledger's (``main``).
_LEDGER_ONLY_COMMANDS: Final = frozenset({"history", "list", "review", "status"})
_ADDRESS = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})$")


def default_db_path() -> Path:
    """``ledger.db`` in the user's data directory (platformdirs): on Linux
    ``$XDG_DATA_HOME/starebrain/ledger.db``, i.e. ``~/.local/share/starebrain/ledger.db``."""
    return _paths.default_db_path()


async def choose_derived_id(ledger: Ledger, intent: SmsIntent, *, window: timedelta) -> str:
    """The action id a send of ``intent`` that names none uses, so that a rerun resumes the
    same action and the same text sent on another day is a new one: the newest generation
    of its derived id holding this intent that may still be resumed (never while its outcome
    is unsettled; ``window`` after its latest attempt once it is), else the next generation
    (``derived_ids.choose_derived_generation``, over ``Ledger.derived_generations``)."""
    base = derive_action_id(intent)
    now = ledger.now()
    generations = await ledger.derived_generations(base, now=now)
    chosen = choose_derived_generation(generations, intent.fingerprint, now, window)
    return derived_generation_id(base, chosen)


class CliError(click.ClickException):
    """A clear, one-line error naming the problem; exit status 1."""


class CliUsageError(CliError):
    """Bad input the user must fix (a malformed number, a changed intent...); exit status 2."""

    exit_code = EXIT_USAGE


@attrs.frozen(kw_only=True)
class Settings:
    """What the group's global options decided, passed to every subcommand."""

    #: the ledger: a file path, or a PostgreSQL URL (a ``str``)
    db: LedgerTarget
    #: True when ``db`` is the built-in default (its directory may be created)
    db_is_default: bool
    #: read phones through ``su 1000`` (``--read-as-system``)
    read_as_system: bool = False


# --------------------------------------------------------------------------- helpers


def _settings(ctx: click.Context) -> Settings:
    settings = ctx.find_object(Settings)
    if settings is None:  # pragma: no cover - the group always sets it
        raise CliError("internal: the starebrain group did not run")
    return settings


def _ledger_path(settings: Settings, *, create: bool) -> LedgerTarget:
    """The ledger path to open; read commands refuse a missing file instead of creating one.

    Only ``send`` creates a ledger (``Ledger.open`` makes the file mode 0600); in the default
    location it also creates the directory, mode 0700. An existing ledger readable by other
    users gets a warning on stderr: it holds phone numbers and message bodies. A PostgreSQL
    URL is returned as it is: the commands open it with ``create=False`` where they read, and
    the ledger's own error says when the schema holds no ledger.
    """
    if is_url(settings.db):
        return settings.db
    path = Path(settings.db)
    if path.exists():
        _warn_if_readable(path)
        return path
    if not create:
        hint = f"pass --db PATH or set {DB_ENV}" if settings.db_is_default else "check --db"
        raise CliError(f"no ledger at {path} (nothing has been sent with it yet?); {hint}")
    if settings.db_is_default and not path.parent.exists():
        from android_bridge._private_files import make_private_dirs

        make_private_dirs(path.parent)  # each missing directory 0700, whatever the umask
    return path


def _warn_if_readable(path: Path) -> None:
    """Warn on stderr when the ledger file is readable by its group or by others."""
    try:
        status = path.stat()
    except OSError:
        return
    mode = stat.S_IMODE(status.st_mode)
    if stat.S_ISREG(status.st_mode) and mode & 0o044:
        click.echo(
            f"starebrain: warning: the ledger {path} is readable by other users (mode"
            f" {mode:04o}) and holds phone numbers and message bodies; fix it with:"
            f" chmod 600 {path}",
            err=True,
        )


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine, turning the ledger's errors into clear CLI errors."""
    import asyncio  # not by ``status`` and ``history``, which read through ``open_read_only``

    with _ledger_errors():
        return asyncio.run(coroutine)


@contextmanager
def _ledger_errors() -> Iterator[None]:
    """The ledger's (and the phone's) errors raised in the block, as clear CLI errors."""
    try:
        yield
    except FingerprintConflict:
        raise  # the caller decides what a conflict means
    except NotFound as exc:
        raise CliError(str(exc)) from exc
    except (LedgerUnavailable, SchemaTooNew, CorruptRecord) as exc:
        raise CliError(f"cannot use the ledger: {exc}") from exc
    except InvalidInput as exc:
        raise CliUsageError(str(exc)) from exc
    except (StarebrainError, BridgeError) as exc:
        raise CliError(f"{type(exc).__name__}: {exc}") from exc


def _open_ledger(
    path: LedgerTarget, *, read_only: bool = False, create: bool = True
) -> AbstractAsyncContextManager[Ledger]:
    """``Ledger.open``, imported (with asyncio and aiosqlite) by the commands that use it."""
    from starebrain_actions.ledger.store import Ledger

    return Ledger.open(path, read_only=read_only, create=create)


def _check_address(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """Validate ``HOST:PORT`` device addresses and ``usb:SERIAL`` names (one or several)."""
    from android_bridge._usb import USB_PREFIX, usb_serial

    values = value if isinstance(value, tuple) else (value,)
    for item in values:
        if item is None:
            continue
        if item.startswith(USB_PREFIX):
            try:
                usb_serial(item)
            except ValueError as exc:
                raise click.BadParameter(str(exc), ctx=ctx, param=param) from exc
            continue
        match = _ADDRESS.fullmatch(item)  # not .match: "$" would let a final newline in
        if match is None or not 0 < int(match.group(1)) < 65536:
            raise click.BadParameter(
                f"expected HOST:PORT such as 127.0.0.1:5555, or usb:SERIAL, got {item!r}",
                ctx=ctx,
                param=param,
            )
    return value


#: Durations are finite seconds (``_cli_types.Seconds``).
_Seconds = Seconds


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


class _Group(_Utf8Args, _render_json.JsonErrorGroup):
    """The ``starebrain`` group: JSON errors with ``--json``, UTF-8 arguments only.

    The commands in ``LAZY_COMMANDS`` are imported when they are named (or listed by
    ``--help``), so that every other command starts without loading their modules."""

    #: command name -> ``module:attribute`` of its click command
    LAZY_COMMANDS: Final = {
        "demo": "starebrain_actions.cli.demo:demo_command",
        "devices": "starebrain_actions.cli.devices:devices_command",
        "key": "starebrain_actions.cli.keys:key_command",
        "mcp": "starebrain_actions.cli.mcp_command:mcp_command",
        "migrate": "starebrain_actions.cli.migrate:migrate_command",
        "approve": "starebrain_actions.cli.recover:approve_command",
        "deny": "starebrain_actions.cli.recover:deny_command",
        "resume": "starebrain_actions.cli.recover:resume_command",
        "retry": "starebrain_actions.cli.recover:retry_command",
        "simulator": "android_bridge.simulator.cli:simulator_command",
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        where = self.LAZY_COMMANDS.get(cmd_name)
        if where is not None and cmd_name not in self.commands:
            module, _, attribute = where.partition(":")
            self.add_command(getattr(importlib.import_module(module), attribute), cmd_name)
        return super().get_command(ctx, cmd_name)


class _Command(_Utf8Args, _render_json.JsonErrorCommand):
    """A standalone command: JSON errors with ``--json``, UTF-8 arguments only."""


def _check_report_path(ctx: click.Context, param: click.Parameter, value: Path | None) -> Any:
    """``--report``'s directory must exist: it is not created (a typo in a cron line should
    fail, not scatter directories)."""
    if value is not None and not (value.parent if str(value.parent) else Path()).is_dir():
        raise click.BadParameter(
            f"directory {value.parent} does not exist (it is not created)", ctx=ctx, param=param
        )
    return value


def _json_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--json", "as_json", is_flag=True, help="Print JSON for machines instead of text."
    )(function)


def _read_as_system_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--read-as-system",
        is_flag=True,
        envvar=READ_AS_SYSTEM_ENV,
        help="Read phones' SMS stores through `su 1000` (userdebug/eng builds such as an "
        "emulator's Google APIs image), which also shows outbox, failed and queued messages. "
        f"Also read from ${READ_AS_SYSTEM_ENV}=1.",
    )(function)


_key_option = key_option


def _private_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--show-private",
        is_flag=True,
        help="Show phone numbers and message bodies (redacted by default).",
    )(function)


@contextmanager
def _progress(enabled: bool, label: str) -> Iterator[Callable[[str, int, int], None] | None]:
    """A rich progress bar on stderr when it is a TTY; ``None`` (no callback) otherwise."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=None)

        def update(device: str, done: int, total: int) -> None:
            bar.update(task, completed=done, total=total, description=f"{label} {device}")

        yield update


# --------------------------------------------------------------------------- group


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="starebrain-actions")
@click.option(
    "--db",
    type=DbTarget(),
    envvar=DB_ENV,
    default=None,
    help=f"{DB_HELP} Also read from ${DB_ENV}."
    " [default: $XDG_DATA_HOME/starebrain/ledger.db, i.e. ~/.local/share/starebrain/ledger.db]",
)
@click.option(
    "--log-level",
    type=click.Choice(_LOG_LEVELS, case_sensitive=False),
    default="warning",
    show_default=True,
    help="Least severe log events written to stderr (numbers and bodies are redacted).",
)
@_read_as_system_option
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


# --------------------------------------------------------------------------- send


def gate_exit_code(decision: Any) -> int:
    """8 when the policy gate holds the action (approval, quiet hours), 9 when it refused it
    (a recipient rule, a denial, a limit)."""
    return EXIT_HELD if decision.verdict.value in ("HOLD", "WAIT") else EXIT_REFUSED


def gate_text(decision: Any) -> str:
    """What the policy gate decided, and what follows, in a sentence."""
    verdict = decision.verdict.value
    what = {
        "DENY": "the policy gate denied it: nothing is ever sent for this action",
        "HOLD": "the policy gate holds it for a person's approval (`starebrain approve ID`);"
        " nothing was sent",
        "WAIT": "the policy gate holds it in quiet hours; nothing was sent (rerun, or"
        " `starebrain resume`, after they end)",
        "OVER_LIMIT": "the policy gate refused it over a limit; nothing was sent (try later)",
    }[verdict]
    return f"{what} (rule {decision.rule}: {decision.detail}; policy {decision.digest})"


def send_exit_code(summary: ActionSummary) -> int:
    """0 SUCCEEDED, 6 sent by the phone but not yet settled, 5 MISMATCH, 4 FAILED with no
    attempt left (or a send the phone showed and then marked failed), 7 the latest attempt
    found the phone not ready or unreachable (nothing sent, attempts left), 3 anything
    still open."""
    status = summary.status
    latest = summary.latest
    if status is Status.SUCCEEDED:
        return EXIT_SUCCEEDED
    if status is Status.FAILED and latest is not None and not spends_budget(latest):
        decision = should_redispatch(summary.action, summary.attempts, datetime.now(UTC))
        if decision.redispatch or decision.reason is RedispatchReason.BACKOFF:
            return EXIT_NOT_READY
    if status is Status.VERIFYING and latest is not None and settling_until(latest) is not None:
        return EXIT_SETTLING
    if status is Status.MISMATCH and not (latest is not None and failed_after_sent(latest)):
        return EXIT_MISMATCH
    if status in (Status.FAILED, Status.MISMATCH):
        decision = should_redispatch(summary.action, summary.attempts, datetime.now(UTC))
        if decision.redispatch or decision.reason is RedispatchReason.BACKOFF:
            return EXIT_UNRESOLVED
        return EXIT_FAILED
    return EXIT_UNRESOLVED


@main.command()
@click.option(
    "--device",
    required=True,
    envvar=DEVICE_ENV,
    callback=_check_address,
    help="The phone to send through, as HOST:PORT (ADB over TCP) or usb:SERIAL (needs the"
    f" [usb] extra). Also read from ${DEVICE_ENV}.",
)
@click.option("--to", "to", required=True, help="Recipient phone number (E.164 preferred).")
@click.option("--body", default=None, help="The message text, exactly as it should arrive.")
@click.option(
    "--body-file",
    type=click.Path(dir_okay=False, allow_dash=True),
    default=None,
    help="Read the message text from this UTF-8 file (- for stdin) instead of --body; one"
    " final line ending is dropped.",
)
@click.option(
    "--action-id",
    default=None,
    help="Stable id of this message; a rerun with the same id never sends twice, however"
    " late. [default: derived from the intent, sms-<16 hex of its fingerprint>, then -2, -3…"
    " for the same text again past --derived-id-window]",
)
@click.option(
    "--derived-id-window",
    type=_Seconds(),
    default=DERIVED_ID_WINDOW.total_seconds(),
    show_default=True,
    help="Without --action-id: seconds after its latest attempt during which a settled"
    " action answers a rerun of the same text to the same number (nothing is sent); past"
    " them the same text is a new action (sms-…-2, -3…). An action whose outcome is not"
    " settled is resumed however old.",
)
@click.option(
    "--wait",
    type=_Seconds(),
    default=30.0,
    show_default=True,
    help="Seconds to wait for proof of the outcome before exiting 3 (unresolved), and for a"
    " phone that does not answer or is not ready before exiting 7.",
)
@policy_options
@phone_options
@click.option(
    "--region",
    default=None,
    help="Two-letter country code for national numbers, e.g. US. [default: international only]",
)
@_key_option
@policy_file_option
@_json_option
@_private_option
@click.pass_context
def send(
    ctx: click.Context,
    device: str,
    to: str,
    body: str | None,
    body_file: str | None,
    action_id: str | None,
    derived_id_window: float,
    wait: float,
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
    policy_path: Path | None,
    as_json: bool,
    show_private: bool,
) -> None:
    """Send one SMS through a phone, at most once per action id, and print its record.

    Without --action-id the id is derived from the recipient and text: a rerun resumes the
    same action while its outcome is unsettled, and for --derived-id-window (24 hours) after
    its latest attempt; past that the same text is a new message. A rerun that sends nothing
    says it is the earlier message, and when that was sent.

    Exit status: 0 SUCCEEDED, 6 sent by the phone but not yet settled when --wait ends (the
    app may still mark it failed until --settle-after: rerun the same command to follow it),
    3 still unresolved when --wait ends (rerun the same command to resume), 4 FAILED with no
    attempt left (`starebrain retry` gives it another), 5 MISMATCH (something else went out),
    7 the phone did not answer or was not ready (locked, screen off...) within --wait: nothing
    was sent and no attempt spent, a person must act (the message says what), then rerun; 8
    the policy gate holds it (a person's approval: `starebrain approve ID`, or quiet hours
    until the time it says), 9 the policy gate refused it (a recipient rule or a denial:
    never sent; or a limit: try later); 2 bad input or a changed intent under an existing
    action id, 1 anything else.
    """
    if region is not None and not re.fullmatch(r"[A-Za-z]{2}", region):
        raise click.BadParameter(
            f"expected a two-letter country code such as US, got {region!r}", param_hint="--region"
        )
    from starebrain_actions.cli.body import check_body, read_body

    try:
        if action_id is not None:
            check_action_id(action_id)
        intent = SmsIntent(recipient=to, body=read_body(body, body_file), region=region)
        policy = retry_policy(
            max_attempts=max_attempts,
            grace=grace,
            unverified_after=unverified_after,
            settle_after=settle_after,
            framework_settle_after=framework_settle_after,
            backoff=backoff,
            max_backoff=max_backoff,
        )
    except InvalidInput as exc:
        raise CliUsageError(f"bad input: {exc}") from exc
    check_body(intent.recipient, intent.body, send_path)
    from starebrain_actions.cli.options import policy_for

    try:
        # the person typing the command is the approval, unless the file says otherwise
        gate = policy_for(policy_path, approve="never")
    except InvalidInput as exc:
        raise CliUsageError(str(exc)) from exc
    derived = action_id is None
    window = timedelta(seconds=derived_id_window)
    from starebrain_actions.cli.progress import Progress

    path = _ledger_path(_settings(ctx), create=True)
    sent = _run_send(
        path,
        device,
        action_id,
        intent,
        policy,
        wait,
        key_path,
        region,
        read_as_system=_settings(ctx).read_as_system,
        rate_limit=rate_limit,
        send_path=send_path,
        connect_timeout=connect_timeout,
        command_timeout=command_timeout,
        progress=Progress(enabled=not as_json),
        derived_id_window=window,
        gate=gate,
    )
    summary = sent.summary
    code = send_exit_code(summary)
    stopped = sent.outcome.gate if sent.outcome is not None else None
    if stopped is not None:
        code = gate_exit_code(stopped)
    earlier = earlier_message(sent.before, summary)
    out = _render.Output()
    if as_json:
        data = _render_values.summary_data(summary, show_private=show_private)
        data["exit_code"] = code
        data["action_id_derived"] = derived
        data["earlier_message"] = earlier
        data["first_sent_at"] = (
            _render_values.when(summary.attempts[0].dispatched_at) if summary.attempts else None
        )
        outcome = sent.outcome
        data["gate"] = _render_values.gate_data(stopped) if stopped is not None else None
        data["not_ready"] = outcome.not_ready if outcome is not None else None
        data["held_by"] = (
            _render_values.hold_data(outcome.held_by)
            if outcome is not None and outcome.held_by is not None
            else None
        )
        _render_json.emit_json(data)
    else:
        _tell_what_stopped(sent.outcome)
        if derived:
            out.line(
                f"action id {summary.action.action_id} (derived from the intent: a rerun"
                f" resumes it until it is settled, and for {_render_values.duration_text(window)}"
                " after its latest attempt)"
            )
        if earlier:
            out.line(earlier_message_line(summary, now=datetime.now(UTC)))
        _render_records.render_summary(out, summary, show_private=show_private)
    ctx.exit(code)


def earlier_message_line(summary: ActionSummary, *, now: datetime) -> str:
    """What ``send`` says when it sent nothing and answers with an action's earlier
    message: which action, when it was first sent, and how to send the same text again
    (a new id, only once the action is settled: while its outcome is open, a new id could
    be a second SMS)."""
    first = summary.attempts[0].dispatched_at
    verb = "tried" if summary.status is Status.FAILED else "sent"
    said = (
        f"this is the earlier message of action {summary.action.action_id}, first {verb} at"
        f" {_render_values.when(first)} ({age(now - first)} ago); nothing was sent now."
    )
    if settled(summary, datetime.now(UTC)):
        return f"{said} To send the same text again as a new message, pass a new --action-id."
    return (
        f"{said} Its outcome is not settled yet: rerun this command to follow it (it never"
        " sends twice), never with a new --action-id."
    )


def _tell_what_stopped(outcome: SendOutcome | None) -> None:
    """Say on stderr what the policy gate decided, what a person must do when the phone was
    not ready, or which action's attempt held the phone when the wait ended."""
    if outcome is None:
        return
    if outcome.gate is not None:
        click.echo(f"starebrain send: {gate_text(outcome.gate)}", err=True)
    elif outcome.not_ready is not None:
        record = outcome.record
        error = record.evidence.get("error") if record is not None else None
        why = f": {error}" if isinstance(error, str) and error else ""
        click.echo(
            f"starebrain send: the phone is not ready{why}. To do: {outcome.not_ready}."
            " Nothing was sent and no attempt was spent; rerun this command once it is done.",
            err=True,
        )
    elif outcome.held_by is not None:
        hold = outcome.held_by
        click.echo(
            f"starebrain send: nothing was sent: attempt {hold.dispatch_id} of action"
            f" {hold.action_id} still holds the phone (since {_render_values.when(hold.since)}); a"
            f" pass can free it from {_render_values.when(hold.releasable_at())}. Rerun this"
            " command then (it reads the phone for that attempt itself), or see"
            " `starebrain review`.",
            err=True,
        )


def _tell_waiting(message: str) -> None:
    """Say on stderr, at once, what a send waits for."""
    click.echo(f"starebrain send: {message}", err=True)


@attrs.frozen(kw_only=True)
class SendResult:
    """What ``_run_send`` found and left."""

    #: the action when the send returned
    summary: ActionSummary
    #: the action as it stood before the send (None: it did not exist)
    before: ActionSummary | None
    #: what the agent's send returned (None: the ledger alone answered)
    outcome: SendOutcome | None = None


def _run_send(
    path: LedgerTarget,
    device: str,
    action_id: str | None,
    intent: SmsIntent,
    policy: RetryPolicy,
    wait: float,
    key_path: Path | None,
    region: str | None,
    *,
    read_as_system: bool = False,
    rate_limit: int = 30,
    send_path: str = "auto",
    connect_timeout: float = 5.0,
    command_timeout: float = 20.0,
    progress: Progress | None = None,
    derived_id_window: timedelta = DERIVED_ID_WINDOW,
    gate: Any = None,
) -> SendResult:
    """Send within ``wait`` seconds in all: connecting, every command on the phone and every
    wait fit inside it (``hard_deadline``). ``action_id`` None: the intent's derived id
    (``choose_derived_id`` with ``derived_id_window``)."""
    from starebrain_actions.cli.progress import Progress

    progress = progress or Progress(enabled=False)
    started = time.monotonic()

    def left() -> float:
        return max(0.1, wait - (time.monotonic() - started))

    #: the action id, once chosen (for the message of an interrupted send)
    chosen: list[str] = [action_id] if action_id is not None else []
    #: the agent, once connected (for the message of an interrupted send)
    agents: list[SmsAgent] = []

    async def work() -> SendResult:
        async with progress.shown():
            return await steps()

    async def steps() -> SendResult:
        # Settle what the ledger alone can settle, so a changed intent is exit 2 and a rerun
        # of a finished action exits as before even while the phone is down.
        async with _open_ledger(path) as ledger:
            if not chosen:
                chosen.append(await choose_derived_id(ledger, intent, window=derived_id_window))
            try:
                known: ActionSummary | None = await ledger.summary(chosen[0])
            except NotFound:
                known = None
        if known is not None:
            if known.action.fingerprint != intent.fingerprint:
                raise FingerprintConflict(chosen[0], known.action.fingerprint, intent.fingerprint)
            if settled(known, datetime.now(UTC)):
                return SendResult(summary=known, before=known)
        async with _agent_within(
            device,
            left,
            progress,
            db=path,
            policy=policy,
            key_path=key_path,
            region=region,
            read_as_system=read_as_system,
            rate_limit=rate_limit,
            send_path=send_path,
            connect_timeout=connect_timeout,
            command_timeout=command_timeout,
            gate=gate,
        ) as agent:
            agents.append(agent)
            outcome = await agent.send(
                chosen[0],
                intent.recipient,
                intent.body,
                wait=max(0.0, wait - (time.monotonic() - started)),
                on_wait=_tell_waiting,
                on_step=progress.step,
                hard_deadline=True,
            )
            return SendResult(summary=outcome.summary, before=known, outcome=outcome)

    try:
        return _run(work())
    except FingerprintConflict as exc:
        raise CliUsageError(f"changed intent, nothing sent: {exc}") from exc
    except KeyboardInterrupt:
        dispatched = bool(agents) and agents[0].dispatches > 0
        click.echo(
            f"starebrain send: interrupted while {progress.current}. "
            + interrupted_text(dispatched=dispatched, action_id=chosen[0] if chosen else None),
            err=True,
        )
        raise SystemExit(EXIT_INTERRUPTED) from None


def interrupted_text(*, dispatched: bool, action_id: str | None) -> str:
    """What is true after Ctrl-C: whether this run handed a send to the phone (its outcome
    is then unknown until a read settles it), and that rerunning resumes the action."""
    if dispatched:
        said = (
            "This run handed a send to the phone: the SMS may already be out; its attempt is"
            " recorded and a read settles it."
        )
    else:
        said = "This run sent nothing to the phone."
    if action_id is None:
        return f"{said} Nothing was recorded either."
    return (
        f"{said} Rerunning the same command is safe: it resumes action {action_id} and never"
        " sends it twice."
    )


#: Seconds between two tries to connect to a phone that does not answer (doubling up to
#: ``_CONNECT_RETRY_MAX_S``), while ``send``'s ``--wait`` lasts.
_CONNECT_RETRY_S: Final = 0.5
_CONNECT_RETRY_MAX_S: Final = 5.0


class PhoneNotReadyError(CliError):
    """The phone did not answer or was not ready within ``--wait``; exit status 7."""

    exit_code = EXIT_NOT_READY


@contextlib.asynccontextmanager
async def _agent_within(
    device: str,
    left: Callable[[], float],
    progress: Progress,
    *,
    connect_timeout: float,
    command_timeout: float,
    **options: Any,
) -> AsyncIterator[SmsAgent]:
    """``SmsAgent.open``, tried again while ``left()`` seconds remain when the phone does not
    answer (its link is down, it has not authorised the key yet, it is restarting).

    Raises:
        PhoneNotReadyError: it did not answer within the time left (nothing was recorded).
    """
    import asyncio

    from starebrain_actions.orchestration.agent import SmsAgent
    from starebrain_actions.phone.android import PhoneUnavailable

    pause = _CONNECT_RETRY_S
    while True:
        progress.step(f"connecting to {device}")
        async with contextlib.AsyncExitStack() as stack:
            try:
                agent = await stack.enter_async_context(
                    SmsAgent.open(
                        device=device,
                        connect_timeout_s=min(connect_timeout, left()),
                        command_timeout_s=command_timeout,
                        deadline_s=left(),
                        **options,
                    )
                )
            except PhoneUnavailable as exc:
                if not exc.retryable:
                    raise
                if left() <= pause:
                    raise PhoneNotReadyError(
                        f"the phone did not answer within --wait: {exc}. Nothing was sent or"
                        " recorded; check its connection (adb devices), then rerun the command"
                    ) from exc
                progress.step(f"waiting for {device} to answer ({exc})")
                await asyncio.sleep(pause)
                pause = min(_CONNECT_RETRY_MAX_S, pause * 2)
                continue
            yield agent
            return


# --------------------------------------------------------------------------- reads


@main.command()
@click.argument("action_id")
@_json_option
@_private_option
@click.pass_context
def status(ctx: click.Context, action_id: str, as_json: bool, show_private: bool) -> None:
    """Show one action: its status, review reasons and every attempt on both axes."""
    path = _ledger_path(_settings(ctx), create=False)
    with _ledger_errors():
        summary, duplicates = read_one(
            path, lambda ledger: (ledger.summary(action_id), ledger.duplicates(action_id))
        )
    if as_json:
        data = _render_values.summary_data(summary, show_private=show_private)
        data["duplicate_rows"] = _render_sanitize.redact_data(duplicates, show_private=show_private)
        _render_json.emit_json(data)
        return
    out = _render.Output()
    _render_records.render_summary(out, summary, show_private=show_private)
    if duplicates:
        out.table(
            ["device", "provider row", "repeats dispatch", "seen"],
            (
                [
                    str(row["device"]),
                    _render_values.provider_row_text(
                        row["provider_object_id"], row["provider_kind"]
                    ),
                    str(row["dispatch_id"]),
                    str(row["seen_at"]),
                ]
                for row in duplicates
            ),
            title="duplicates seen on the phone",
        )


@main.command("list")
@click.option(
    "--status",
    "status_name",
    type=click.Choice([status.value for status in Status], case_sensitive=False),
    default=None,
    help="Only actions whose derived status is this one.",
)
@click.option(
    "--device",
    default=None,
    help="Only actions with an attempt on this phone: its name in the ledger, or any address"
    " it was reached at (HOST:PORT, usb:SERIAL).",
)
@click.option(
    "--limit",
    type=click.IntRange(min=0, max=1_000_000_000),
    default=50,
    show_default=True,
    help="At most this many actions, newest first (0: all).",
)
@_json_option
@_private_option
@click.pass_context
def list_command(
    ctx: click.Context,
    status_name: str | None,
    device: str | None,
    limit: int,
    as_json: bool,
    show_private: bool,
) -> None:
    """List actions, newest first, with their derived status."""
    path = _ledger_path(_settings(ctx), create=False)
    wanted = Status(status_name.upper()) if status_name else None

    async def listed(ledger: Ledger, now: datetime) -> AsyncIterator[ActionSummary]:
        # one phone whatever address reached it: the ledger's key of the phone named
        key = await ledger.phone_key_for(device) if device is not None else None
        async for summary in ledger.iter_summaries(
            status=wanted, device=key, limit=limit or None, now=now
        ):
            yield summary

    _run(
        _stream_summaries(
            path,
            listed,
            _render_records.stream_list,
            as_json=as_json,
            show_private=show_private,
        )
    )


async def _stream_summaries(
    path: LedgerTarget,
    read: Callable[[Ledger, datetime], AsyncIterator[ActionSummary]],
    render: Callable[..., Awaitable[None]],
    *,
    as_json: bool,
    show_private: bool,
) -> None:
    """``list``/``review``: the summaries ``read`` yields, as a JSON array written item by
    item, or laid out by ``render`` (``stream_list``/``stream_review``), memory flat."""
    async with _open_ledger(path, read_only=True) as ledger:
        now = ledger.now()

        def summaries() -> AsyncIterator[ActionSummary]:
            return read(ledger, now)

        # one snapshot: the text table reads the actions twice (widths, then rows)
        async with ledger.read_snapshot():
            if as_json:
                await _render_json.emit_json_stream(
                    _render_values.summary_data(summary, show_private=show_private)
                    async for summary in summaries()
                )
                return
            await render(_render.Output(), summaries, now=now, show_private=show_private)


@main.command()
@click.argument("action_id")
@_json_option
@_private_option
@click.pass_context
def history(ctx: click.Context, action_id: str, as_json: bool, show_private: bool) -> None:
    """Show every recorded transition of an action: time, event, both axes, actor, evidence."""
    path = _ledger_path(_settings(ctx), create=False)
    with _ledger_errors():
        entries = read_one(path, lambda ledger: ledger.history(action_id))
    if as_json:
        _render_json.emit_json(_render_values.history_data(entries, show_private=show_private))
        return
    _render_records.render_history(_render.Output(), entries, show_private=show_private)


@main.command()
@_json_option
@_private_option
@click.pass_context
def review(ctx: click.Context, as_json: bool, show_private: bool) -> None:
    """List the actions waiting for a person (ambiguous, duplicated, mismatched, out of
    budget, stuck), with their reasons; then the unresolved attempts that hold a phone (no
    other action can start there until a read proves their outcome or a pass frees it),
    with how long and until when."""
    path = _ledger_path(_settings(ctx), create=False)

    async def work() -> None:
        async with _open_ledger(path, read_only=True) as ledger:
            now = ledger.now()
            async with ledger.read_snapshot():
                holds = await _holds(ledger)
                approvals = await ledger.awaiting_approval(now=now)
                held = {
                    hold.action_id: await ledger.summary(hold.action_id, now=now) for hold in holds
                }

                def summaries() -> AsyncIterator[ActionSummary]:
                    return ledger.iter_summaries(needs_review=True, now=now)

                if as_json:
                    await _render_json.emit_json_stream(
                        _review_items(
                            summaries(), holds, held, approvals, show_private=show_private
                        )
                    )
                    return
                out = _render.Output()
                await _render_records.stream_review(
                    out, summaries, now=now, show_private=show_private
                )
                _render_records.render_holds(out, holds, now=now)
                _render_records.render_approvals(out, approvals, now=now, show_private=show_private)

    _run(work())


async def _holds(ledger: Ledger) -> list[PhoneHold]:
    """Every phone's hold: its unresolved attempt, and when a pass can free it (voids at the
    shortest age a sender uses, ``VOID_AFTER``)."""
    from starebrain_actions.orchestration.reconciler import VOID_AFTER

    holds = []
    for record in await ledger.holders():
        action = await ledger.get_action(record.action_id)
        holds.append(phone_hold(record, action, VOID_AFTER))
    return holds


async def _review_items(
    summaries: AsyncIterator[ActionSummary],
    holds: Sequence[PhoneHold],
    held: Mapping[str, ActionSummary],
    approvals: Sequence[ActionSummary] = (),
    *,
    show_private: bool,
) -> AsyncIterator[dict[str, Any]]:
    """``review --json``: the actions needing a person, then those whose attempt holds a
    phone, each with ``holds_phone`` (null, or the hold), then those the policy gate holds
    for a person's approval (``awaits_approval`` true)."""
    by_action = {hold.action_id: hold for hold in holds}
    listed = set()
    async for summary in summaries:
        data = _render_values.summary_data(summary, show_private=show_private)
        hold = by_action.get(summary.action.action_id)
        data["holds_phone"] = _render_values.hold_data(hold) if hold is not None else None
        data["awaits_approval"] = False
        listed.add(summary.action.action_id)
        yield data
    for hold in holds:
        if hold.action_id in listed:
            continue
        listed.add(hold.action_id)
        data = _render_values.summary_data(held[hold.action_id], show_private=show_private)
        data["holds_phone"] = _render_values.hold_data(hold)
        data["awaits_approval"] = False
        yield data
    for summary in approvals:
        if summary.action.action_id in listed:
            continue
        data = _render_values.summary_data(summary, show_private=show_private)
        data["holds_phone"] = None
        data["awaits_approval"] = True
        yield data


# --------------------------------------------------------------------------- writes


@main.command()
@click.argument("action_id")
@click.option(
    "--as",
    "ruling",
    type=click.Choice(["sent", "not-sent"]),
    required=True,
    help="sent: the message went out and is this action's effect; not-sent: nothing went out.",
)
@click.option("--reason", required=True, help="Why: kept in the action's history.")
@click.option(
    "--operator",
    default=None,
    help="Who decides, kept in the history. [default: $USER]",
)
@click.option(
    "--dispatch-id",
    default=None,
    help="The attempt to rule on. [default: the latest attempt]",
)
@click.option(
    "--expect",
    "expect_version",
    type=click.IntRange(min=0, max=2**63 - 1),
    default=None,
    metavar="VERSION",
    help="The attempt's version you looked at (the v column of status and review): the "
    "ruling is refused if anything changed since.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Allow ruling not-sent an attempt a read of the phone CONFIRMED.",
)
@click.option(
    "--row",
    default=None,
    metavar="[sms:|mms:]ID",
    help="With --as sent: the provider row you found on the phone (content://sms _id, or "
    "mms:ID for content://mms); it is then claimed by this attempt.",
)
@_json_option
@click.pass_context
def resolve(
    ctx: click.Context,
    action_id: str,
    ruling: str,
    reason: str,
    operator: str | None,
    dispatch_id: str | None,
    expect_version: int | None,
    force: bool,
    row: str | None,
    as_json: bool,
) -> None:
    """Record an operator's ruling on an attempt; it clears review and lands in history.

    Give --expect with the version you saw: a ruling on a state that changed meanwhile (a
    read confirmed the message a moment later, say) is refused.
    """
    path = _ledger_path(_settings(ctx), create=False)
    name = operator_name(operator)

    provider_row = _parse_row(row) if row is not None else None

    async def work() -> tuple[ActionSummary, Any, bool]:
        async with _open_ledger(path, create=False) as ledger:
            seen = {item.dispatch_id: item.version for item in await ledger.attempts(action_id)}
            try:
                record = await ledger.resolve(
                    action_id,
                    as_sent=ruling == "sent",
                    reason=reason,
                    operator=name,
                    dispatch_id=dispatch_id,
                    expect_version=expect_version,
                    force=force,
                    row=provider_row,
                )
            except StaleTransition as exc:
                raise CliError(f"{exc}; look again with `starebrain status {action_id}`") from exc
            # a ruling already in force writes nothing: the version stays what it was
            changed = seen.get(record.dispatch_id) != record.version
            return await ledger.summary(action_id), record, changed

    summary, record, changed = _run(work())
    decision = should_redispatch(summary.action, summary.attempts, datetime.now(UTC))
    resend = ruling == "not-sent" and (
        decision.redispatch or decision.reason is RedispatchReason.BACKOFF
    )
    if as_json:
        data = _render_values.summary_data(summary, show_private=False)
        data["changed"] = changed
        data["resend_will_follow"] = resend
        _render_json.emit_json(data)
        return
    out = _render.Output()
    if changed:
        out.line(f"resolved {action_id} as {ruling} by {name}: now {summary.status.value}")
    else:
        out.line(
            f"attempt {record.dispatch_id} of {action_id} is already ruled {ruling} by"
            f" {record.resolved_by}: nothing written (now {summary.status.value})"
        )
    if resend and changed:
        out.line(
            f"a resend will follow: the next `starebrain send` of {action_id} (or the agent's"
            " retry) sends the SMS again"
        )
    elif ruling == "not-sent" and changed:
        out.line(
            f"no resend will follow ({decision.reason.value}): `starebrain retry {action_id}"
            " --reason TEXT` gives it another attempt, or send the text as a new message with"
            " a new --action-id"
            if decision.reason in GRANTABLE
            else f"no resend will follow ({decision.reason.value}): see `starebrain review`"
        )
    _render_records.render_summary(out, summary, show_private=False)


def _parse_row(text: str) -> tuple[ProviderKind, int]:
    """``12``, ``sms:12`` or ``mms:12`` as a provider row."""
    match = re.fullmatch(r"(?:(sms|mms):)?(\d{1,18})", text.strip())
    if match is None:
        raise click.BadParameter(f"expected ID, sms:ID or mms:ID, got {text!r}", param_hint="--row")
    return ProviderKind(match.group(1) or "sms"), int(match.group(2))


def operator_name(given: str | None) -> str:
    """Who rules, grants or approves: ``--operator``, else ``$USER``, else the login name.

    Raises:
        CliUsageError: none of them is known.
    """
    name = given or os.environ.get("USER") or _login_name()
    if not name:
        raise CliUsageError("cannot tell who you are: pass --operator NAME")
    return name


def _login_name() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None


# --------------------------------------------------------------------------- reconcile


@main.command()
@click.option(
    "--device",
    "devices",
    multiple=True,
    envvar=DEVICE_ENV,
    callback=_check_address,
    help="A device to read (HOST:PORT or usb:SERIAL); repeatable. Also read from"
    f" ${DEVICE_ENV} (several separated by spaces). [default: every device with attempts"
    " in flight]",
)
@_key_option
@_json_option
@click.pass_context
def reconcile(
    ctx: click.Context, devices: tuple[str, ...], key_path: Path | None, as_json: bool
) -> None:
    """Read the phones once and settle what they prove; never sends. Prints what changed.

    Exit status: 0 when every device was read, 1 when one could not be (it is reported and
    nothing of it changes but the error noted).
    """
    from starebrain_actions.orchestration.agent import reconcile_pending

    path = _ledger_path(_settings(ctx), create=False)
    show_bar = sys.stderr.isatty() and not as_json

    async def work() -> ReconcilePass | None:
        async with _open_ledger(path, create=False) as ledger:
            targets = list(devices) or await ledger.devices_in_flight()
            if not targets:
                return None
            with _progress(show_bar, "reconciling") as progress:
                return await reconcile_pending(
                    ledger,
                    targets,
                    key_path=str(key_path) if key_path is not None else None,
                    progress=progress,
                    read_as_system=_settings(ctx).read_as_system,
                )

    result = _run(work())
    if result is None:
        if as_json:
            _render_json.emit_json(
                {"started_at": None, "finished_at": None, "devices": [], "changes": []}
            )
        else:
            click.echo("nothing in flight: no device to read")
        return
    if as_json:
        data = to_jsonable(result)
        data["changes"] = to_jsonable(list(result.changes))
        _render_json.emit_json(data)
    else:
        render_pass(_render.Output(), result)
    if result.unreachable:
        ctx.exit(EXIT_ERROR)


def render_pass(out: _render.Output, result: ReconcilePass) -> None:
    """Print a reconcile pass: one line per device, then every change."""
    out.table(
        ["device", "read", "mode", "round trips", "changes", "duplicates", "in flight", "error"],
        (
            [
                report.device,
                "yes" if report.reachable else "NO",
                report.mode or "-",
                str(report.round_trips),
                str(len(report.changes)),
                str(report.duplicates_recorded),
                str(report.in_flight),
                report.error or "-",
            ]
            for report in result.devices
        ),
        title="devices",
    )
    changes = result.changes
    if not changes:
        out.line("no changes")
        return
    out.table(
        ["action", "dispatch id", "event", "from", "to"],
        (
            [
                change.action_id,
                change.dispatch_id,
                change.event.value,
                change.from_status.value,
                change.to_status.value,
            ]
            for change in changes
        ),
        title="changes",
    )


# --------------------------------------------------------------------------- nightly


def _nightly_options(function: Callable[..., Any]) -> Callable[..., Any]:
    options: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
        click.option(
            "--device",
            "devices",
            multiple=True,
            envvar=DEVICE_ENV,
            callback=_check_address,
            help="Also read this device (HOST:PORT or usb:SERIAL) even with nothing in flight;"
            f" repeatable. Also read from ${DEVICE_ENV} (several separated by spaces).",
        ),
        click.option(
            "--report",
            "report_path",
            type=click.Path(dir_okay=False, path_type=Path),
            default=None,
            callback=_check_report_path,
            help="Write the JSON report here (atomically: a temporary file, then a rename);"
            " its directory must exist.",
        ),
        click.option(
            "--archive",
            "archive_dir",
            type=click.Path(file_okay=False, path_type=Path),
            default=None,
            help="Keep a Markdown copy as DIR/YYYY-MM-DD.md (-2, -3... for later runs that"
            " day); committed when DIR is in a git repository.",
        ),
        click.option(
            "--resume",
            is_flag=True,
            help="After the read, finish what was started (as `starebrain resume`): send the"
            " actions that FAILED with attempts left on their own phones, the PLANNED ones on"
            " the phone their sender named, and PLANNED ones that name none on the phones"
            " given with --device. Without it they are attention items once idle past"
            " --unsent-after.",
        ),
        click.option(
            "--unsent-after",
            type=_Seconds(maximum=30 * 86_400),
            default=3600.0,
            show_default=True,
            help="An action PLANNED this long, or FAILED with attempts left and idle this long,"
            " is one nothing is sending: it needs a person (exit 1).",
        ),
        policy_file_option,
        click.option(
            "--resume-wait",
            type=_Seconds(maximum=3600),
            default=30.0,
            show_default=True,
            help="With --resume: seconds each action may wait for proof of its outcome.",
        ),
        click.option(
            "--dry-run",
            is_flag=True,
            help="Report the ledger as it stands: read no phone, write nothing to the ledger"
            " and take no lock (the ledger is opened read-only: works on a read-only copy).",
        ),
        _key_option,
        _json_option,
    ]
    for option in reversed(options):
        function = option(function)
    return function


def run_nightly_command(
    *,
    settings: Settings,
    devices: Sequence[str],
    report_path: Path | None,
    archive_dir: Path | None,
    key_path: Path | None,
    as_json: bool,
    dry_run: bool = False,
    resume: bool = False,
    unsent_after: float = 3600.0,
    resume_wait: float = 30.0,
    policy_path: Path | None = None,
) -> int:
    """The nightly job behind both ``starebrain nightly`` and ``scripts/nightly_reconcile.py``.

    Returns the exit status: 0 nothing needs a person (or another run holds the lock), 1
    something does, 2 usage error (including a missing or unusable ledger). ``dry_run``: no
    phone read, no lock, the ledger opened read-only.
    """
    import asyncio

    from starebrain_actions.cli.options import policy_for
    from starebrain_actions.orchestration.nightly import archive as _nightly_archive
    from starebrain_actions.orchestration.nightly import lock as _nightly_lock
    from starebrain_actions.orchestration.nightly import report as _nightly_report
    from starebrain_actions.orchestration.nightly import run as _nightly_run
    from starebrain_actions.orchestration.nightly import text as _nightly_text

    try:
        # --resume sends as `starebrain resume` does: through the policy gate
        gate = policy_for(policy_path, approve="never") if resume else None
    except InvalidInput as exc:
        raise CliUsageError(str(exc)) from exc
    path = settings.db
    url = is_url(path)
    if not url:
        path = Path(path)
        if not path.exists():
            raise CliUsageError(f"no ledger at {path}; check --db or ${DB_ENV}")
        _warn_if_readable(path)
    try:
        # on PostgreSQL ``run_nightly`` takes the lock, an advisory lock in the database
        with nullcontext() if dry_run or url else _nightly_lock.nightly_lock(Path(path)):
            report = asyncio.run(
                _nightly_run.run_nightly(
                    path,
                    devices=devices,
                    key_path=key_path,
                    read_as_system=settings.read_as_system,
                    dry_run=dry_run,
                    resume=resume,
                    resume_wait_s=resume_wait,
                    unsent_after=timedelta(seconds=unsent_after),
                    gate=gate,
                )
            )
    except _nightly_lock.NightlyBusy as exc:
        if as_json:
            _render_json.emit_json({"skipped": str(exc), "exit_code": _nightly_report.EXIT_OK})
        else:
            click.echo(f"starebrain nightly: {exc}")
        return _nightly_report.EXIT_OK
    except (LedgerUnavailable, SchemaTooNew, CorruptRecord) as exc:
        raise CliUsageError(f"cannot use the ledger: {exc}") from exc
    code = report.exit_code
    data = _nightly_report.report_data(report)
    if dry_run:
        data["dry_run"] = True
    if report_path is not None:
        try:
            _nightly_archive.write_json_atomic(report_path, data)
        except OSError as exc:
            raise CliError(f"cannot write the report to {report_path}: {exc}") from exc
    notes: list[str] = []
    if archive_dir is not None:
        try:
            archived = _nightly_archive.archive_report(archive_dir, report)
        except OSError as exc:
            raise CliError(f"cannot archive the report in {archive_dir}: {exc}") from exc
        if archived.error is not None:
            notes.append(f"archive: {archived.path} written but not committed: {archived.error}")
            code = _nightly_report.EXIT_NEEDS_PERSON
        elif archived.commit is not None:
            notes.append(f"archive: {archived.path} committed as {archived.commit[:12]}")
        else:
            notes.append(f"archive: {archived.path}")
    if as_json:
        _render_json.emit_json(data)
        for note in notes:
            click.echo(note, err=True)
    else:
        if dry_run:
            click.echo("dry run: the ledger as it stands; no phone was read, nothing was written")
        for line in _nightly_text.summary_lines(report) + notes:
            click.echo(line)
    return code


@main.command()
@_nightly_options
@click.pass_context
def nightly(
    ctx: click.Context,
    devices: tuple[str, ...],
    report_path: Path | None,
    archive_dir: Path | None,
    key_path: Path | None,
    as_json: bool,
    dry_run: bool,
    resume: bool,
    unsent_after: float,
    resume_wait: float,
    policy_path: Path | None,
) -> None:
    """Reconcile every device with attempts in flight, then report what needs a person;
    with --resume, finish what was started first (as `starebrain resume`).

    For cron. Exit status: 0 nothing needs a person, 1 something does (review items, an
    unreachable device still holding attempts, actions nothing is sending), 2 usage error.
    A second run while one is going prints one line and exits 0 without touching anything.

    The lock is <ledger>.nightly.lock next to a SQLite file; with a postgresql:// URL it is an
    advisory lock in the database (no file), which also keeps runs on other hosts apart.
    --report and --archive name their own places, whatever the ledger; a report names a URL
    ledger without its password.
    """
    ctx.exit(
        run_nightly_command(
            settings=_settings(ctx),
            dry_run=dry_run,
            devices=devices,
            report_path=report_path,
            archive_dir=archive_dir,
            key_path=key_path,
            as_json=as_json,
            resume=resume,
            unsent_after=unsent_after,
            resume_wait=resume_wait,
            policy_path=policy_path,
        )
    )


@click.command(
    "nightly_reconcile",
    cls=_Command,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option(
    "--db",
    type=DbTarget(),
    envvar=DB_ENV,
    default=None,
    help=f"{DB_HELP} Also read from ${DB_ENV}. [default: $XDG_DATA_HOME/starebrain/ledger.db]",
)
@click.option(
    "--log-level",
    type=click.Choice(_LOG_LEVELS, case_sensitive=False),
    default="warning",
    show_default=True,
    help="Least severe log events written to stderr.",
)
@_nightly_options
@_read_as_system_option
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
            policy_path=policy_path,
        )
    )


# `simulator` (contributed by android_bridge, registered here so that the bridge never imports
# us), `demo`, `devices`, `key` and `mcp` are imported when they are named (_Group).
