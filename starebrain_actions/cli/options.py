"""The options the commands share, each defined once, and their types (``Seconds``), checks
(``check_address``) and environment variables."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import click

from starebrain_actions.cli.context import DB_ENV
from starebrain_actions.cli.db import DbTarget
from starebrain_actions.core.derived_ids import DERIVED_ID_WINDOW
from starebrain_actions.core.model import RetryPolicy

if TYPE_CHECKING:
    from starebrain_actions.core.policy import Policy

#: Longest duration any option takes, in seconds (ten years): far beyond any real wait, and
#: far from where a timedelta or a datetime overflows.
MAX_SECONDS: Final = 315_576_000


class Seconds(click.FloatRange):
    """A duration in seconds: a finite number in a range. ``nan``, ``inf`` and values past
    ``max`` are usage errors (exit 2) instead of overflows deep inside."""

    name = "seconds"

    def __init__(self, minimum: float = 0, maximum: float = MAX_SECONDS) -> None:
        super().__init__(min=minimum, max=maximum)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return number


#: The variable naming the ADB key (``android_bridge.KEY_PATH_ENV``, repeated so that the CLI
#: starts without importing the ADB stack).
KEY_PATH_ENV: Final = "STAREBRAIN_ADB_KEY"

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def _check_key_path(ctx: click.Context, param: click.Parameter, value: Path | None) -> Any:
    """``--key`` (or ``$STAREBRAIN_ADB_KEY``) must name an existing key: a typo must not
    silently make a new identity the phone has never authorised. Only the default key path
    is created on first use."""
    if value is not None and not value.exists():
        raise click.BadParameter(
            f"no key at {value}: create one with `starebrain key new --key {value}`, or omit"
            " --key to use the default key (created on first use)",
            ctx=ctx,
            param=param,
        )
    chosen = os.environ.get(KEY_PATH_ENV) if value is None else None
    if chosen and not Path(chosen).expanduser().exists():
        raise click.BadParameter(
            f"no key at {chosen} (from ${KEY_PATH_ENV}): create one with `starebrain key new"
            f" --key {chosen}`, or unset {KEY_PATH_ENV} to use the default key",
            ctx=ctx,
            param=param,
        )
    return value


def key_option(function: Callable[..., Any]) -> Callable[..., Any]:
    """``--key PATH`` (``key_path``) of every command that connects to a phone."""
    return click.option(
        "--key",
        "key_path",
        # readable=False: an unreadable key is the bridge's "bad key file PATH", as for the
        # default key
        type=click.Path(dir_okay=False, readable=False, path_type=Path),
        default=None,
        callback=_check_key_path,
        help="ADB private key. [default: $STAREBRAIN_ADB_KEY or ~/.config/starebrain/adbkey]",
    )(function)


#: Environment variables giving the settle windows of new actions (``--settle-after``,
#: ``--framework-settle-after``), for a deployment whose phones answer faster or slower.
SETTLE_AFTER_ENV: Final = "STAREBRAIN_SETTLE_AFTER"
FRAMEWORK_SETTLE_AFTER_ENV: Final = "STAREBRAIN_FRAMEWORK_SETTLE_AFTER"

_POLICY_OPTIONS: Final[tuple[Decorator, ...]] = (
    click.option(
        "--max-attempts",
        type=click.IntRange(min=1, max=1000),
        default=3,
        show_default=True,
        help="Attempts allowed for a new action, the first included.",
    ),
    click.option(
        "--grace",
        type=Seconds(),
        default=60.0,
        show_default=True,
        help="Seconds after a dispatch before an unresolved attempt counts as UNKNOWN and a "
        "message still queued goes to review.",
    ),
    click.option(
        "--unverified-after",
        type=Seconds(),
        default=600.0,
        show_default=True,
        help="Seconds after a dispatch before a sent message that never shows up goes to "
        "review (UNVERIFIED) and frees the phone for other actions.",
    ),
    click.option(
        "--settle-after",
        type=Seconds(),
        default=1800.0,
        show_default=True,
        envvar=SETTLE_AFTER_ENV,
        help="Seconds after a dispatch (or after the row's own date, when later) before a "
        "sent row the messaging app wrote counts as settled (SUCCEEDED): apps write the row "
        "SENT before sending and may still mark it failed; AOSP Messaging starts new tries "
        "for 20 minutes from the row's creation and gives one try 5 more (30 minutes with a "
        "margin). Until then the send is VERIFYING: sent by the phone, not yet settled. "
        f"Also read from ${SETTLE_AFTER_ENV}.",
    ),
    click.option(
        "--framework-settle-after",
        type=Seconds(maximum=3600),
        default=0.5,
        show_default=True,
        envvar=FRAMEWORK_SETTLE_AFTER_ENV,
        help="Seconds after it is first seen before a sent row the framework wrote (the "
        "framework send path) counts as settled: a failed send's row is written SENT and "
        "marked FAILED by the next statement (one provider write later). "
        f"Also read from ${FRAMEWORK_SETTLE_AFTER_ENV}.",
    ),
    click.option(
        "--app-send-timeout",
        type=Seconds(maximum=3600),
        default=300.0,
        show_default=True,
        help="Seconds one send try of the messaging app may last before the app marks its row "
        "failed (AOSP Messaging: 5 minutes). A one-segment SMS whose row turns FAILED within "
        "this of the dispatch is resent (the radio said no); one that turns FAILED later, or "
        "a text of several segments, or an MMS, goes to a person (UNSETTLED): parts, or the "
        "whole text, may have gone out.",
    ),
    click.option(
        "--backoff",
        type=Seconds(maximum=86_400),
        default=1.0,
        show_default=True,
        help="Seconds to wait before the second attempt; each further wait doubles, up to "
        "--max-backoff, give or take 20% jitter. An attempt that failed only because the "
        "phone was unreachable or not ready (locked, screen off...) spends no attempt, and "
        "waits the same way.",
    ),
    click.option(
        "--max-backoff",
        type=Seconds(maximum=86_400),
        default=60.0,
        show_default=True,
        help="Longest wait between two attempts, in seconds (before jitter).",
    ),
)


def policy_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """The retry policy of a new action: ``max_attempts``, ``grace``, ``unverified_after``,
    ``settle_after``, ``framework_settle_after``, ``app_send_timeout``, ``backoff`` and
    ``max_backoff`` (turn them
    into one with :func:`retry_policy`)."""
    for option in reversed(_POLICY_OPTIONS):
        function = option(function)
    return function


def retry_policy(
    *,
    max_attempts: int,
    grace: float,
    unverified_after: float,
    backoff: float,
    max_backoff: float,
    settle_after: float = 1800.0,
    framework_settle_after: float = 0.5,
    app_send_timeout: float = 300.0,
) -> RetryPolicy:
    """The ``RetryPolicy`` the :func:`policy_options` describe.

    Raises:
        InvalidInput: a value the policy refuses.
    """
    return RetryPolicy(
        maximum_attempts=max_attempts,
        grace_window=timedelta(seconds=grace),
        unverified_after=timedelta(seconds=unverified_after),
        settle_after=timedelta(seconds=settle_after),
        framework_settle_after=timedelta(seconds=framework_settle_after),
        app_send_timeout=timedelta(seconds=app_send_timeout),
        initial_interval=timedelta(seconds=backoff),
        maximum_interval=timedelta(seconds=max_backoff),
    )


#: ``--send-path`` (``send_path``): of every command that sends (:func:`phone_options`) and of
#: ``doctor --send-test``.
SEND_PATH_OPTION: Final = click.option(
    "--send-path",
    type=click.Choice(["ui", "framework", "auto"]),
    default="auto",
    show_default=True,
    help="How a phone sends: ui (the messaging app, am start and key events), framework"
    " (service call isms as the shell user: no UI, no RCS, rows marked"
    " com.android.shell), auto (framework where the phone's own framework.jar proves the"
    " transaction code, read once per build and kept in the ledger, or where a framework"
    " send on the phone's build came back as the shell's own row; else ui).",
)

_PHONE_OPTIONS: Final = (
    click.option(
        "--rate-limit",
        type=click.IntRange(min=1, max=1_000_000),
        default=30,
        show_default=True,
        help="Sends started on one phone per minute at most (Android holds more behind a"
        " confirmation dialog); a send over it waits, and says so.",
    ),
    click.option(
        "--connect-timeout",
        type=Seconds(minimum=0.1, maximum=3600),
        default=5.0,
        show_default=True,
        help="Seconds to connect to a phone (never more than what is left of a wait).",
    ),
    click.option(
        "--command-timeout",
        type=Seconds(minimum=0.1, maximum=3600),
        default=20.0,
        show_default=True,
        help="Seconds one command on a phone may take (never more than what is left of a"
        " wait); a send command cut off is an unknown outcome, settled by a later read.",
    ),
    SEND_PATH_OPTION,
)


def phone_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """How commands that send reach and use a phone: ``rate_limit``, ``connect_timeout``,
    ``command_timeout`` and ``send_path`` (one definition for ``send``, ``resume`` and
    ``mcp``)."""
    for option in reversed(_PHONE_OPTIONS):
        function = option(function)
    return function


def share_phone_option(function: Callable[..., Any]) -> Callable[..., Any]:
    """``--share-phone`` of the commands that send (``send``, ``resume``, ``worker``,
    ``nightly``): ``SmsAgent.open(share_phone=True)``."""
    return click.option(
        "--share-phone",
        is_flag=True,
        help="Send even when the fence on the phone names another ledger with attempts"
        " still open there (without it: refused before anything is recorded, exit 7, both"
        " ledgers named). Two ledgers on one phone each see only their own sends, so both"
        " may send the same message. A ledger that only sent from the phone before is"
        " warned of once either way.",
    )(function)


#: Environment variable naming the phone (or phones, separated by spaces) used when
#: ``--device`` is not given, by every command that takes one.
DEVICE_ENV: Final = "STAREBRAIN_DEVICE"


_ADDRESS = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})$")


def check_address(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
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


def device_option(
    name: str, *, help: str, multiple: bool = False, required: bool = False
) -> Decorator:
    """``--device`` (into ``name``) of a command that reaches phones: ``HOST:PORT`` or
    ``usb:SERIAL`` (:func:`check_address`), else ``$STAREBRAIN_DEVICE``; ``help`` says what
    the command does with it. ``required``: missing, it is a usage error that names both
    ways to give it (:func:`missing_device`)."""

    def checked(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if required and not value:
            raise missing_device(ctx, param)
        return check_address(ctx, param, value)

    return click.option(
        "--device",
        name,
        multiple=multiple,
        envvar=DEVICE_ENV,
        callback=checked,
        help=help + (" [required]" if required else ""),
    )


def missing_device(
    ctx: click.Context, param: click.Parameter | None = None
) -> click.MissingParameter:
    """The usage error (exit 2) of a command run without a phone: "Missing option
    '--device'", and that ``$STAREBRAIN_DEVICE`` gives it too."""
    return click.MissingParameter(
        message=f"Name the phone with --device HOST:PORT (or usb:SERIAL), or set ${DEVICE_ENV}.",
        ctx=ctx,
        param=param,
        param_type="option",
        param_hint="'--device'",
    )


def policy_file_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--policy",
        "policy_path",
        type=click.Path(dir_okay=False, exists=True, path_type=Path),
        default=None,
        help="The policy gate's rules (TOML: allowed and denied recipients, approval, limits,"
        " quiet hours; see docs/policy.md). [default: policy.toml in starebrain's config"
        " directory if it exists, else no gate]",
    )(function)


#: The policy file a command reads when none is named: ``policy.toml`` in starebrain's config
#: directory (beside the ADB key), if it exists.
POLICY_FILE_NAME: Final = "policy.toml"


def default_policy_path() -> Path:
    """``<config dir>/policy.toml`` (``$XDG_CONFIG_HOME/starebrain``, else ``~/.config``)."""
    from android_bridge import default_key_path

    return default_key_path().parent / POLICY_FILE_NAME


def policy_for(path: str | Path | None, *, approve: str, short_codes: str) -> Policy | None:
    """The gate a command uses: the file named (``--policy``), else the default file if it
    exists, else none; with ``approve`` as the approval mode and ``short_codes`` as the rule
    for a short code no list names, when the file sets none (``Policy.with_defaults``).

    Raises:
        InvalidInput: the file cannot be read or a rule refuses a value.
    """
    if path is None:
        found = default_policy_path()
        if not found.is_file():
            return None
        path = found
    from starebrain_actions.core.policy import load_policy

    return load_policy(path).with_defaults(approve=approve, short_codes=short_codes)


def json_option(function: Callable[..., Any]) -> Callable[..., Any]:
    """``--json`` (``as_json``): JSON for machines instead of text."""
    return click.option(
        "--json", "as_json", is_flag=True, help="Print JSON for machines instead of text."
    )(function)


def show_private_option(
    help: str = "Show phone numbers and message bodies (redacted by default).",
) -> Decorator:
    """``--show-private``: phone numbers and bodies shown, not redacted."""
    return click.option("--show-private", is_flag=True, help=help)


#: Read phones through `su 1000` (the same name as `_android.READ_AS_SYSTEM_ENV`, kept here so
#: that the CLI starts without importing the ADB stack).
READ_AS_SYSTEM_ENV: Final = "STAREBRAIN_READ_AS_SYSTEM"


def read_as_system_option(function: Callable[..., Any]) -> Callable[..., Any]:
    """``--read-as-system`` of ``starebrain`` and of the nightly job's own command."""
    return click.option(
        "--read-as-system",
        is_flag=True,
        envvar=READ_AS_SYSTEM_ENV,
        help="Read phones' SMS stores through `su 1000` (userdebug/eng builds such as an "
        "emulator's Google APIs image), which also shows outbox, failed and queued messages. "
        f"Also read from ${READ_AS_SYSTEM_ENV}=1.",
    )(function)


def db_option(*, help: str, envvar: str | None = DB_ENV) -> Decorator:
    """``--db``: the ledger, a file path or a PostgreSQL URL (:class:`DbTarget`)."""
    return click.option("--db", type=DbTarget(), envvar=envvar, default=None, help=help)


#: The levels ``--log-level`` takes.
LOG_LEVELS: Final = ("debug", "info", "warning", "error")


def log_level_option(*, help: str, default: str | None = "warning") -> Decorator:
    """``--log-level``: the least severe log events written to stderr."""
    shown: dict[str, Any] = {"show_default": True} if default is not None else {}
    return click.option(
        "--log-level",
        type=click.Choice(LOG_LEVELS, case_sensitive=False),
        default=default,
        help=help,
        **shown,
    )


def reason_option(
    *, required: bool = True, default: str | None = None, more_help: str = ""
) -> Decorator:
    """``--reason``: why a person rules, grants, approves or denies (kept in the history);
    ``more_help`` follows the common help text."""
    given: dict[str, Any] = {"default": default} if default is not None else {}
    return click.option(
        "--reason",
        required=required,
        help="Why: kept in the action's history." + more_help,
        **given,
    )


def operator_option(who: str = "Who decides") -> Decorator:
    """``--operator``: the person who rules (``operator_name`` falls back to ``$USER``)."""
    return click.option(
        "--operator", default=None, help=f"{who}, kept in the history. [default: $USER]"
    )


def wait_option(*, help: str) -> Decorator:
    """``--wait``: seconds for proof of the outcome (``send``, ``resume``)."""
    return click.option("--wait", type=Seconds(), default=30.0, show_default=True, help=help)


def derived_id_window_option(*, help: str) -> Decorator:
    """``--derived-id-window``: how long a settled action answers a repeat of its text."""
    return click.option(
        "--derived-id-window",
        type=Seconds(),
        default=DERIVED_ID_WINDOW.total_seconds(),
        show_default=True,
        help=help,
    )


def region_option(function: Callable[..., Any]) -> Callable[..., Any]:
    """``--region``: the country national numbers are read in."""
    return click.option(
        "--region",
        default=None,
        help="Two-letter country code for national numbers, e.g. US. [default: international only]",
    )(function)


def typed_command_gate(path: Path | None) -> Policy | None:
    """The policy gate of a command a person types (``send``, ``resume``, ``nightly
    --resume``): the person typing it is the approval, and names the recipient, so a short
    code is sent too (``approve = "never"``, ``short_codes = "allow"``), unless the file says
    otherwise.

    Raises:
        CliUsageError: the policy file cannot be read or a rule refuses a value.
    """
    from starebrain_actions.cli.context import CliUsageError
    from starebrain_actions.core.exceptions import InvalidInput

    try:
        return policy_for(path, approve="never", short_codes="allow")
    except InvalidInput as exc:
        raise CliUsageError(str(exc)) from exc
