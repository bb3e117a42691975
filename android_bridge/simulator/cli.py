"""``starebrain simulator``: run the simulated phone standalone until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path

import click
import structlog

from android_bridge.simulator._faults import Fault, parse_fault
from android_bridge.simulator._phone import SimulatedPhone
from android_bridge.simulator._platform import DEFAULT_RELEASE


def default_directory() -> Path:
    """Where the store and ``adb_keys`` live when not given: the user's starebrain app dir."""
    return Path(click.get_app_dir("starebrain")) / "simulator"


def _parse_faults(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> list[tuple[Fault, int]]:
    faults = []
    for value in values:
        try:
            faults.append(parse_fault(value))
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param=param) from None
    return faults


def _check_region(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if len(value) != 2 or not value.isalpha():
        raise click.BadParameter(
            f"expected a two-letter ISO country code such as US or GB, got {value!r}",
            ctx=ctx,
            param=param,
        )
    return value.upper()


_FAULT_HELP = (
    "Inject a fault, COUNT times (default 1); repeatable. One of: "
    + ", ".join(fault.value for fault in Fault)
    + ". Send faults apply to the next sends; provider-error to the next content queries;"
    " hang to the next shell commands."
)


@click.command("simulator")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=5555,
    show_default=True,
    help="TCP port to listen on (0 picks a free one).",
)
@click.option(
    "--store",
    "store_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="SQLite file holding the phone's sms table (created if missing). "
    "[default: <app dir>/simulator/sms.db]",
)
@click.option(
    "--authorized-keys",
    "authorized_keys_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The phone's adb_keys file: one base64 public key per line, as in "
    "~/.android/adbkey.pub. [default: <app dir>/simulator/adb_keys]",
)
@click.option(
    "--allow-new-keys",
    is_flag=True,
    help="Accept a key the phone has not seen (as if the user tapped Allow) and remember it.",
)
@click.option(
    "--root",
    is_flag=True,
    help="adbd runs as root (adb root on a userdebug build). The SMS provider still gives "
    "root the restricted view (inbox and sent rows only), as on a real phone.",
)
@click.option(
    "--android",
    "android",
    type=click.IntRange(min=10, max=15),
    default=DEFAULT_RELEASE,
    show_default=True,
    metavar="N",
    help="Android release to behave as (10 to 15); what differs between them is modelled.",
)
@click.option(
    "--build-type",
    type=click.Choice(["user", "userdebug", "eng"]),
    default=None,
    help="ro.build.type: userdebug and eng builds have su (su 1000 reads the SMS provider "
    "as the system uid) and allow adb root. [default: user, userdebug with --root]",
)
@click.option(
    "--latency-ms",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Delay before each shell command runs.",
)
@click.option(
    "--send-delay-ms",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Time a message spends in the OUTBOX (type 4) before it is SENT (type 2).",
)
@click.option(
    "--clock-skew-ms",
    type=int,
    default=0,
    show_default=True,
    help="Offset of the phone's clock from this machine's (may be negative).",
)
@click.option(
    "--fault",
    "faults",
    multiple=True,
    metavar="NAME[:COUNT]",
    callback=_parse_faults,
    help=_FAULT_HELP,
)
@click.option(
    "--background-sends",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    metavar="RATE",
    help="A simulated human sends (and receives) messages at random, RATE per second.",
)
@click.option(
    "--region",
    default="US",
    show_default=True,
    callback=_check_region,
    help="Country of the SIM (gsm.sim.operator.iso-country, timezone).",
)
@click.option(
    "--reboot-loses-sends",
    is_flag=True,
    help="On a reboot fault, messages still in the OUTBOX end FAILED instead of being sent.",
)
@click.option("--seed", type=int, default=None, help="Seed for --background-sends.")
@click.option("-v", "--verbose", is_flag=True, help="Log every packet-level event.")
def simulator_command(
    host: str,
    port: int,
    store_path: Path | None,
    authorized_keys_path: Path | None,
    allow_new_keys: bool,
    root: bool,
    android: int,
    build_type: str | None,
    latency_ms: int,
    send_delay_ms: int,
    clock_skew_ms: int,
    faults: list[tuple[Fault, int]],
    background_sends: float,
    region: str,
    reboot_loses_sends: bool,
    seed: int | None,
    verbose: bool,
) -> None:
    """Run a simulated Android phone that speaks the real ADB protocol.

    Point adb-shell (or `adb connect HOST:PORT`) at it; it authenticates with RSA keys,
    answers `content query`, `am start`, `input`, `getprop`, `date`, `id` like a phone, and
    stores messages in an SQLite sms table you can inspect. Stops on Ctrl-C or SIGTERM.
    """
    directory = default_directory()
    store = store_path or directory / "sms.db"
    keys = authorized_keys_path or directory / "adb_keys"
    if not keys.exists() and not allow_new_keys:
        raise click.UsageError(
            f"authorized keys file {keys} does not exist. Create it from your ADB public key "
            f"(for example: cp ~/.android/adbkey.pub {keys}), or start with --allow-new-keys "
            "to accept and remember the first key a client offers."
        )
    level = logging.DEBUG if verbose else logging.INFO
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    phone = SimulatedPhone(
        store_path=store,
        authorized_keys_path=keys,
        host=host,
        port=port,
        root=root,
        android=android,
        build_type=build_type,
        allow_new_keys=allow_new_keys,
        latency_ms=latency_ms,
        send_delay_ms=send_delay_ms,
        clock_skew_ms=clock_skew_ms,
        faults=faults,
        background_sends=background_sends,
        region=region,
        reboot_completes_sends=not reboot_loses_sends,
        seed=seed,
    )
    try:
        asyncio.run(_serve(phone))
    except OSError as exc:
        raise click.ClickException(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}"
        ) from exc


async def _serve(phone: SimulatedPhone) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await phone.start()
    try:
        click.echo(
            f"listening on {phone.host}:{phone.port} serial={phone.serial} "
            f"store={phone.store_path} authorized_keys={phone.authorized_keys.path}"
        )
        sys.stdout.flush()
        await stop.wait()
    finally:
        await phone.stop()
        click.echo("stopped")
