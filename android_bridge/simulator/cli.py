"""``starebrain simulator``: run the simulated phone standalone until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import cast

import attrs
import click
import structlog

from android_bridge._keys import default_key_path
from android_bridge._paths import simulator_dir
from android_bridge._private_files import make_private_dirs
from android_bridge.simulator._apps import (
    APP_PROFILES,
    DEFAULT_APP,
    MessagingAppProfile,
    app_profile,
)
from android_bridge.simulator._console import ConsoleError, SmsConsole, send_to_running_phone
from android_bridge.simulator._device import DEFAULT_FOCUS_DELAY_MS, SCREEN_STATES, Screen
from android_bridge.simulator._faults import Fault, parse_fault
from android_bridge.simulator._framework_jar import FRAMEWORK_JAR_KINDS, FrameworkJarKind
from android_bridge.simulator._phone import SimulatedPhone
from android_bridge.simulator._platform import DEFAULT_RELEASE


def default_directory() -> Path:
    """Where the store and ``adb_keys`` live when not given: ``simulator`` in the user's
    starebrain configuration directory, the one that holds starebrain's own ADB key."""
    return simulator_dir()


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


def _parse_sub_ids(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...]:
    parts = [part.strip() for part in value.split(",")]
    if not all(part.isdigit() and int(part) >= 1 for part in parts):
        raise click.BadParameter(
            f"expected subscription ids of 1 or more separated by commas, got {value!r}",
            ctx=ctx,
            param=param,
        )
    return tuple(int(part) for part in parts)


_FAULT_HELP = (
    "Inject a fault, COUNT times (default 1); repeatable. One of: "
    + ", ".join(fault.value for fault in Fault)
    + ". Send faults apply to the next sends; screen-off, chooser, stale-draft and slow-launch"
    " to the next am start runs; provider-error to the next content queries; hang to the next"
    " shell commands."
)


@click.group("simulator", invoke_without_command=True, context_settings={"max_content_width": 100})
@click.pass_context
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
    "[default: <config dir>/simulator/sms.db]",
)
@click.option(
    "--authorized-keys",
    "authorized_keys_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The phone's adb_keys file: one base64 public key per line, as in starebrain's "
    "adbkey.pub. [default: <config dir>/simulator/adb_keys, beside starebrain's adbkey]",
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
@click.option(
    "--app",
    type=click.Choice(sorted(APP_PROFILES)),
    default=DEFAULT_APP,
    show_default=True,
    help="The default SMS app's behaviours: aosp (AOSP Messaging), google (Google Messages), "
    "samsung (Samsung Messages). See docs/simulator.md.",
)
@click.option(
    "--simple-characters",
    is_flag=True,
    help="The app strips accents from SMS text (Google Messages' 'Use simple characters').",
)
@click.option(
    "--mms-after-segments",
    type=click.IntRange(min=0),
    default=None,
    metavar="N",
    help="A text needing more than N SMS goes as MMS (0: never). [default: the app's]",
)
@click.option(
    "--rcs-recipient",
    "rcs_recipients",
    multiple=True,
    metavar="NUMBER|all",
    help="A recipient reachable by RCS chat (repeatable; 'all' for everyone): apps with RCS "
    "send them chat messages, which never reach content://sms.",
)
@click.option(
    "--screen",
    type=click.Choice(SCREEN_STATES),
    default="on",
    show_default=True,
    help="on (unlocked), locked (keyguard up) or off (asleep): while not on, the keyguard "
    "takes every key event.",
)
@click.option(
    "--second-sms-app",
    is_flag=True,
    help="A second SMS app is installed with no default set: an implicit SENDTO brings up "
    "the app chooser.",
)
@click.option(
    "--focus-delay-ms",
    type=click.IntRange(min=0),
    default=DEFAULT_FOCUS_DELAY_MS,
    show_default=True,
    help="Time from am start to the new window taking key events (am -W waits for it).",
)
@click.option(
    "--am-unresolved-exit",
    type=click.IntRange(0, 255),
    default=None,
    help="Exit status of am start when the start fails. [default: 0 on Android 10-14, 1 on 15]",
)
@click.option(
    "--unlock-after-boot-ms",
    type=click.IntRange(min=0),
    default=None,
    help="After a reboot the user unlocks after this long. [default: only when told]",
)
@click.option(
    "--tcpip-survives-reboot",
    is_flag=True,
    help="ADB over TCP stays on across a reboot, as on an emulator (a phone loses adb tcpip).",
)
@click.option(
    "--disable-adb-auth-timeout",
    is_flag=True,
    help="Keys never expire (the developer option); otherwise an allowed key unused for 7 days "
    "is forgotten.",
)
@click.option(
    "--sim-sub-ids",
    default="1",
    show_default=True,
    metavar="ID[,ID...]",
    callback=_parse_sub_ids,
    help="Subscription ids of the phone's SIMs (1,2 for dual SIM). Android 14+ providers show "
    "rows of these and of sub_id -1 only.",
)
@click.option(
    "--permission-module-updated",
    is_flag=True,
    help="Google Play updated the phone's Permission module: on Android 12 and 13 `cmd role"
    " get-role-holders` then answers (14+ has it anyway; 10 and 11 keep the role service in"
    " the platform, so nothing changes there).",
)
@click.option(
    "--sms-default-setting",
    default=None,
    metavar="PACKAGE",
    help="What `settings get secure sms_default_application` prints: a stale package, as on a"
    " phone upgraded from Android 9. Never kept in step with the SMS role. [default: null]",
)
@click.option(
    "--work-profile",
    is_flag=True,
    help="The phone has a work profile (user 10, no SMS role): `dumpsys role` lists two users.",
)
@click.option(
    "--secondary-user-sms-app",
    default=None,
    metavar="PACKAGE",
    help="The phone has a secondary user whose default SMS app is PACKAGE.",
)
@click.option(
    "--framework-jar",
    type=click.Choice(sorted(FRAMEWORK_JAR_KINDS)),
    default="aosp",
    show_default=True,
    help="How /system/framework/framework.jar is built: AOSP's (its ISms$Stub proves the isms"
    " codes), stripped of its DEX, a DEX 041, without ISms$Stub, unreadable by the shell,"
    " missing, or an OEM's ISms with one method more in front (every isms code moves by one).",
)
@click.option(
    "--serialno",
    default=None,
    metavar="SERIAL",
    help="ro.serialno (default SBSIM and the port): give several phones one serial, as cheap"
    " builds share 0123456789ABCDEF.",
)
@click.option(
    "--threads-without-autoincrement",
    is_flag=True,
    help="A new store's threads table lacks AUTOINCREMENT (a database whose optional upgrade"
    " failed): a deleted latest conversation's id goes to the next one.",
)
@click.option("--seed", type=int, default=None, help="Seed for --background-sends.")
@click.option("-v", "--verbose", is_flag=True, help="Log every packet-level event.")
def simulator_command(
    ctx: click.Context,
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
    app: str,
    simple_characters: bool,
    mms_after_segments: int | None,
    rcs_recipients: tuple[str, ...],
    screen: str,
    second_sms_app: bool,
    focus_delay_ms: int,
    am_unresolved_exit: int | None,
    unlock_after_boot_ms: int | None,
    tcpip_survives_reboot: bool,
    disable_adb_auth_timeout: bool,
    sim_sub_ids: tuple[int, ...],
    permission_module_updated: bool,
    sms_default_setting: str | None,
    work_profile: bool,
    secondary_user_sms_app: str | None,
    framework_jar: str,
    serialno: str | None,
    threads_without_autoincrement: bool,
    seed: int | None,
    verbose: bool,
) -> None:
    """Run a simulated Android phone that speaks the real ADB protocol.

    Point adb-shell (or `adb connect HOST:PORT`) at it; it authenticates with RSA keys,
    answers `content query`, `am start`, `input`, `getprop`, `date`, `id` like a phone, and
    stores messages in an SQLite sms table you can inspect. Stops on Ctrl-C or SIGTERM.

    While it runs, `starebrain simulator receive-sms` makes it receive an SMS.
    """
    if ctx.invoked_subcommand is not None:
        return
    directory = default_directory()
    store = store_path or directory / "sms.db"
    keys = authorized_keys_path or directory / "adb_keys"
    if not keys.exists() and not allow_new_keys:
        public_key = f"{default_key_path()}.pub"
        raise click.UsageError(
            f"authorized keys file {keys} does not exist. Start with --allow-new-keys to "
            "accept and remember the first key a client offers (as a phone's owner taps "
            "Allow), or authorize starebrain's key, once it exists: (umask 077 && mkdir -p"
            f" {keys.parent} && cp {public_key} {keys})"
        )
    if allow_new_keys:
        # the phone writes the first key it accepts there: a directory it creates is 0700,
        # as the store's is (android_bridge._private_files)
        try:
            make_private_dirs(keys.parent)
        except OSError as exc:
            raise click.ClickException(
                f"cannot create {keys.parent}: {exc.strerror or exc}"
            ) from exc
    _configure_logging(logging.DEBUG if verbose else logging.INFO)
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
        app=_app_profile(app, simple_characters, mms_after_segments),
        rcs_recipients="all" if "all" in rcs_recipients else rcs_recipients,
        screen=cast(Screen, screen),
        second_sms_app=second_sms_app,
        focus_delay_ms=focus_delay_ms,
        am_unresolved_exit=am_unresolved_exit,
        unlock_after_boot_ms=unlock_after_boot_ms,
        tcpip_survives_reboot=tcpip_survives_reboot,
        disable_adb_auth_timeout=disable_adb_auth_timeout,
        sim_sub_ids=sim_sub_ids,
        permission_module_updated=permission_module_updated,
        sms_default_setting=sms_default_setting,
        work_profile=work_profile,
        secondary_user_sms_app=secondary_user_sms_app,
        framework_jar=cast(FrameworkJarKind, framework_jar),
        serialno=serialno,
        threads_autoincrement=not threads_without_autoincrement,
        seed=seed,
    )
    try:
        asyncio.run(_serve(phone))
    except OSError as exc:
        raise click.ClickException(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}"
        ) from exc


def _configure_logging(level: int) -> None:
    """This command is an application: its events (and the bridge's, in this process) go to
    stderr, pretty on a terminal; stdout carries only the ``listening`` and ``stopped`` lines."""
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="%Y-%m-%d %H:%M:%S", utc=False),
            structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )


def _app_profile(
    name: str, simple_characters: bool, mms_after_segments: int | None
) -> MessagingAppProfile:
    """The named profile with the command line's switches applied."""
    profile = app_profile(name)
    if simple_characters:
        profile = attrs.evolve(profile, simple_characters=True)
    if mms_after_segments is not None:
        profile = attrs.evolve(profile, mms_after_segments=mms_after_segments or None)
    return profile


async def _serve(phone: SimulatedPhone) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await phone.start()
    console = SmsConsole(
        phone.store_path,
        lambda sender, body, sub_id, date_sent_ms: phone.receive_sms(
            sender, body, sub_id=sub_id, date_sent_ms=date_sent_ms
        ),
    )
    try:
        await console.start()
        click.echo(
            f"listening on {phone.host}:{phone.port} serial={phone.serial} "
            f"store={phone.store_path} authorized_keys={phone.authorized_keys.path}"
        )
        sys.stdout.flush()
        await stop.wait()
    finally:
        await console.stop()
        await phone.stop()
        click.echo("stopped")


def _check_date_sent(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    if value is not None and value % 1000:
        raise click.BadParameter(
            f"{value} is not whole seconds: the service centre's time stamp (TP-SCTS) has"
            " one-second resolution",
            ctx=ctx,
            param=param,
        )
    return value


@simulator_command.command("receive-sms")
@click.argument("sender")
@click.argument("body")
@click.option(
    "--store",
    "store_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The store of the running phone (its --store). [default: <config dir>/simulator/sms.db]",
)
@click.option(
    "--sub-id",
    type=click.IntRange(min=1),
    default=None,
    help="The SIM it comes in on (one of the phone's --sim-sub-ids). [default: the first]",
)
@click.option(
    "--date-sent-ms",
    type=int,
    default=None,
    callback=_check_date_sent,
    help="The service centre's time stamp, ms since the epoch, whole seconds. "
    "[default: the network's time now]",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="Seconds to wait for the phone's answer.",
)
def receive_sms_command(
    sender: str,
    body: str,
    store_path: Path | None,
    sub_id: int | None,
    date_sent_ms: int | None,
    timeout: float,
) -> None:
    """Make the running simulated phone receive an SMS from SENDER saying BODY.

    The phone writes the inbox row as a phone's default SMS app does (type 1, in
    SENDER's conversation; see docs/simulator.md) and this prints its _id. SENDER is kept
    as given, as the network delivers the originating address: +12025550143, or a national
    number such as 2025550143. While the phone's user is locked (after a reboot) the SMS
    waits, as on a phone, and the row is written at the unlock: this prints "held".

    The phone is found by its store (--store, as given to `starebrain simulator`): it
    writes <store>.console while it runs. Exit 1 when no phone answers or it refuses (a
    --sub-id that is none of its SIMs).
    """
    store = store_path or default_directory() / "sms.db"
    try:
        row_id = asyncio.run(
            send_to_running_phone(
                store, sender, body, sub_id=sub_id, date_sent_ms=date_sent_ms, timeout_s=timeout
            )
        )
    except ConsoleError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo("held until the user unlocks" if row_id is None else f"received _id={row_id}")
