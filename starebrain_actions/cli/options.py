"""Option types shared by the command-line modules (``cli``, ``_mcp_command``, ``_cli_*``)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import click

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
        default=1560.0,
        show_default=True,
        envvar=SETTLE_AFTER_ENV,
        help="Seconds after a dispatch before a sent row the messaging app wrote counts as "
        "settled (SUCCEEDED): apps write the row SENT before sending and may still mark it "
        "failed; AOSP Messaging retries for 20 minutes and gives one try 5 more (26 minutes "
        "with a margin). Until then the send is VERIFYING: sent by the phone, not yet "
        f"settled. Also read from ${SETTLE_AFTER_ENV}.",
    ),
    click.option(
        "--framework-settle-after",
        type=Seconds(maximum=3600),
        default=5.0,
        show_default=True,
        envvar=FRAMEWORK_SETTLE_AFTER_ENV,
        help="Seconds after it is first seen before a sent row the framework wrote (the "
        "framework send path) counts as settled: a failed send's row is written SENT and "
        f"marked FAILED a moment later. Also read from ${FRAMEWORK_SETTLE_AFTER_ENV}.",
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
    ``settle_after``, ``framework_settle_after``, ``backoff`` and ``max_backoff`` (turn them
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
    settle_after: float = 1560.0,
    framework_settle_after: float = 5.0,
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
        initial_interval=timedelta(seconds=backoff),
        maximum_interval=timedelta(seconds=max_backoff),
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
    click.option(
        "--send-path",
        type=click.Choice(["ui", "framework", "auto"]),
        default="auto",
        show_default=True,
        help="How a phone sends: ui (the messaging app, am start and key events), framework"
        " (service call isms as the shell user: no UI, no RCS, rows marked"
        " com.android.shell), auto (framework once a framework send on the phone's build has"
        " come back as the shell's own row, else ui; run one send with framework to prove"
        " it).",
    ),
)


def phone_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """How commands that send reach and use a phone: ``rate_limit``, ``connect_timeout``,
    ``command_timeout`` and ``send_path`` (one definition for ``send``, ``resume`` and
    ``mcp``)."""
    for option in reversed(_PHONE_OPTIONS):
        function = option(function)
    return function


#: Environment variable naming the phone (or phones, separated by spaces) used when
#: ``--device`` is not given, by every command that takes one.
DEVICE_ENV: Final = "STAREBRAIN_DEVICE"


def check_devices(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """``--device`` values checked as ``cli._check_address`` does (imported when used)."""
    from starebrain_actions.cli.main import _check_address

    return _check_address(ctx, param, value)


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


def policy_for(path: str | Path | None, *, approve: str) -> Policy | None:
    """The gate a command uses: the file named (``--policy``), else the default file if it
    exists, else none; with ``approve`` as the approval mode when the file sets none.

    Raises:
        InvalidInput: the file cannot be read or a rule refuses a value.
    """
    if path is None:
        found = default_policy_path()
        if not found.is_file():
            return None
        path = found
    from starebrain_actions.core.policy import load_policy

    return load_policy(path).with_default_approval(approve)
