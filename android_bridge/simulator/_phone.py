"""The simulated phone: an ADB daemon on loopback TCP in front of an SMS store and a shell."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Final, Literal, Self
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs

from android_bridge._log import get_logger
from android_bridge.simulator._apps import (
    DEFAULT_APP,
    Channel,
    MessagingAppProfile,
    RcsDirectory,
    Transmission,
    app_profile,
    simple_characters,
    sms_segments,
)
from android_bridge.simulator._auth import AuthorizedKeys
from android_bridge.simulator._awk import awk
from android_bridge.simulator._content import ContentAccess, ContentCommand
from android_bridge.simulator._device import (
    DEFAULT_FOCUS_DELAY_MS,
    PRODUCT_DEVICE,
    PRODUCT_MODEL,
    PRODUCT_NAME,
    SCREEN_STATES,
    Compose,
    Messaging,
    Screen,
    SendRequest,
    SystemCommands,
    build_properties,
)
from android_bridge.simulator._faults import Fault, FaultPlan
from android_bridge.simulator._files import (
    LOCAL_TMP,
    Credentials,
    FileCommands,
    FilesView,
    FileTree,
    toybox_release,
)
from android_bridge.simulator._framework_jar import FrameworkJarKind, SystemImage
from android_bridge.simulator._isms import SHELL_PACKAGE, HeldSend, IsmsHost, IsmsService
from android_bridge.simulator._platform import DEFAULT_RELEASE, android_release
from android_bridge.simulator._shell import CommandFn, OutputFn, Session, Shell, TerminalHungUp
from android_bridge.simulator._store import (
    DEFAULT_SUB_ID,
    MESSAGE_TYPE_FAILED,
    MESSAGE_TYPE_OUTBOX,
    MESSAGE_TYPE_SENT,
    MMS_BOX_OUTBOX,
    MMS_BOX_SENT,
    NO_ERROR_CODE,
    STATUS_COMPLETE,
    SmsStore,
)
from android_bridge.simulator._su import _SHELL_GROUPS, Identity, SuCommand
from android_bridge.simulator._system_state import SystemState
from android_bridge.simulator._telephony import ROOT_UID, SHELL_UID
from android_bridge.simulator._toybox import grep as toybox_grep
from android_bridge.simulator._transport import DEVICE_FEATURES, Connection, listening_socket

log = get_logger("android_bridge.simulator")

_AUTOCORRECT: Final = {
    "teh": "the",
    "dont": "don't",
    "im": "I'm",
    "u": "you",
    "ur": "your",
    "thx": "thanks",
    "pls": "please",
    "cant": "can't",
}
_BACKGROUND_CONTACTS: Final = ("+15550142", "+15550177", "+15550199", "+15550123")
_BACKGROUND_BODIES: Final = (
    "On my way",
    "Running 10 min late, sorry!",
    "Can you call me when you get this?",
    "ok",
    "Dinner at 7?",
    "Thanks!",
    "Your code is 4821",
)


class _Stall:
    """The link of the command line being run stalled: its output no longer reaches the
    client, and it never answers."""

    def __init__(self) -> None:
        self.on = False


_STALL: contextvars.ContextVar[_Stall] = contextvars.ContextVar("simulator_stall")
#: The connection whose stream runs the command line under way (what a fault resets).
_CONNECTION: contextvars.ContextVar[Connection] = contextvars.ContextVar("simulator_connection")
#: The session of the command line under way (whether a hang-up ended it).
_SESSION: contextvars.ContextVar[Session] = contextvars.ContextVar("simulator_session")


class SimulatedPhone:
    """A phone that speaks the real ADB protocol on ``host:port``, backed by an SQLite SMS store.

    Use as ``async with SimulatedPhone(...) as phone:`` or ``await phone.start()`` /
    ``await phone.stop()``. ``port=0`` picks a free port; ``phone.serial`` is ``host:port``.
    """

    def __init__(
        self,
        *,
        store_path: Path,
        authorized_keys_path: Path,
        host: str = "127.0.0.1",
        port: int = 0,
        root: bool = False,
        android: int = DEFAULT_RELEASE,
        build_type: str | None = None,
        allow_new_keys: bool = False,
        latency_ms: int = 0,
        content_row_cost_ms: float = 0.0,
        send_delay_ms: int = 0,
        clock_skew_ms: int = 0,
        faults: Iterable[Fault | str | tuple[Fault | str, int]] = (),
        background_sends: float = 0.0,
        region: str = "US",
        reboot_completes_sends: bool = True,
        seed: int | None = None,
        app: str | MessagingAppProfile = DEFAULT_APP,
        rcs_recipients: Iterable[str] | Literal["all"] = (),
        screen: Screen = "on",
        second_sms_app: bool = False,
        focus_delay_ms: int = DEFAULT_FOCUS_DELAY_MS,
        am_unresolved_exit: int | None = None,
        unlock_after_boot_ms: int | None = None,
        tcpip_survives_reboot: bool = False,
        disable_adb_auth_timeout: bool = False,
        sim_sub_ids: Sequence[int] = (DEFAULT_SUB_ID,),
        permission_module_updated: bool = False,
        sms_default_setting: str | None = None,
        work_profile: bool = False,
        secondary_user_sms_app: str | None = None,
        framework_jar: FrameworkJarKind = "aosp",
        app_send_timeout_ms: int = 5 * 60 * 1000,
        mms_fail_after_ms: int = 50 * 60 * 1000,
        threads_autoincrement: bool = True,
        serialno: str | None = None,
    ) -> None:
        if latency_ms < 0 or send_delay_ms < 0:
            raise ValueError("latency_ms and send_delay_ms must not be negative")
        if background_sends < 0:
            raise ValueError("background_sends must not be negative")
        #: The Android release modelled (see ``_platform``): what differs between 10 and 15.
        self.release = android_release(android)
        if build_type is None:
            build_type = "userdebug" if root else "user"
        if build_type not in ("user", "userdebug", "eng"):
            raise ValueError("build_type must be user, userdebug or eng")
        if root and build_type == "user":
            # adbd: "adbd cannot run as root in production builds"
            raise ValueError("adb root needs a userdebug or eng build")
        #: ``ro.build.type``: only userdebug and eng builds have ``su`` and ``adb root``.
        self.build_type = build_type
        self.host = host
        self.port = port
        #: adbd runs as uid 0 (``adb root``); the SMS provider still restricts what it sees.
        self.root = root
        self.allow_new_keys = allow_new_keys
        self.latency_ms = latency_ms
        if content_row_cost_ms < 0:
            raise ValueError("content_row_cost_ms must not be negative")
        #: A slow phone: each row a ``content query`` prints costs this much more time (the
        #: tool walks its cursor a row at a time; the cost is added after the query, so the
        #: rows it prints are the rows there were when it ran). 0: no cost beyond
        #: ``latency_ms``. A harness knob: it makes the phone slower, never kinder.
        self.content_row_cost_ms = content_row_cost_ms
        self.send_delay_ms = send_delay_ms
        if app_send_timeout_ms < 0 or mms_fail_after_ms < 0:
            raise ValueError("app_send_timeout_ms and mms_fail_after_ms must not be negative")
        #: ``app-timeout``: when the app gives up on a send try and rewrites its row FAILED
        #: (AOSP Messaging: ``SMS_SEND_TIMEOUT_IN_MILLIS_DEFAULT``, 5 minutes).
        self.app_send_timeout_ms = app_send_timeout_ms
        #: ``mms-network-timeout``: when an MMS waiting for its network turns FAILED (the
        #: app's 20-minute resend window, then MmsService's 30-minute network wait).
        self.mms_fail_after_ms = mms_fail_after_ms
        self.clock_skew_ms = clock_skew_ms
        self.background_sends = background_sends
        self.region = region.upper()
        self.reboot_completes_sends = reboot_completes_sends
        if not sim_sub_ids or any(sub_id < 1 for sub_id in sim_sub_ids):
            raise ValueError("sim_sub_ids needs at least one subscription id, each 1 or more")
        #: The subscriptions the phone knows for its user (one per SIM: ``(1, 2)`` for dual
        #: SIM); Android 14+ providers show rows of these and of ``sub_id`` -1 only.
        self.sim_sub_ids = tuple(dict.fromkeys(sim_sub_ids))
        self.store_path = Path(store_path)
        #: A new store's ``threads`` table has AUTOINCREMENT (see ``SmsStore``): False for a
        #: phone whose database predates it and whose upgrade failed.
        self.threads_autoincrement = threads_autoincrement
        #: ``ro.serialno``: None gives each phone its own (``SBSIM`` and its port); a value
        #: gives every phone started with it the same, as cheap builds share one
        #: (``0123456789ABCDEF``) and every emulator of a release reports ``EMULATOR<ver>``.
        self.serialno = serialno
        if unlock_after_boot_ms is not None and unlock_after_boot_ms < 0:
            raise ValueError("unlock_after_boot_ms must not be negative")
        #: Added to the device clock by ``advance_time`` (ms).
        self._clock_offset_ms = 0
        expiry = None if disable_adb_auth_timeout else self.release.adb_auth_expiry
        self.authorized_keys = AuthorizedKeys(
            Path(authorized_keys_path),
            clock=self.now_ms,
            allowed_connection_ms=None if expiry is None else int(expiry.total_seconds() * 1000),
        )
        #: False from a reboot until the user's first unlock (``unlock_user``): the
        #: credential-encrypted storage, and with it the SMS database, is locked.
        self.user_unlocked = True
        #: After a reboot the user unlocks after this many ms; None: only ``unlock_user()``.
        self.unlock_after_boot_ms = unlock_after_boot_ms
        #: ADB over TCP survives a reboot (an emulator); a phone loses ``adb tcpip`` mode.
        self.tcpip_survives_reboot = tcpip_survives_reboot
        #: Whether adbd listens on TCP (False after a reboot until ``enable_tcpip``).
        self.tcpip_enabled = True
        #: Recipients reachable by RCS chat (``phone.rcs.add(number)`` adds one).
        self.rcs = RcsDirectory(rcs_recipients)
        #: Every message that really left the phone, on any channel, in order.
        self.transmissions: list[Transmission] = []
        #: Test harness: the futures of ``wait_transmissions`` calls, each woken when the
        #: phone appends a transmission.
        self._transmission_waiters: set[asyncio.Future[None]] = set()
        #: Test harness: scripts the ``hang`` fault parked for good (they never send), which
        #: ``radio_idle`` does not wait for.
        self._parked_scripts: set[Session] = set()
        self._unlock_task: asyncio.Task[None] | None = None
        self.faults = FaultPlan()
        self.faults.extend(faults)
        #: Every shell command line received, in order.
        self.commands_run: list[str] = []
        self._random = random.Random(seed)
        #: SMS received before the user's first unlock, waiting in the raw table.
        self._held_incoming: list[_Incoming] = []
        self._store: SmsStore | None = None
        self._files: FileTree | None = None
        #: What the release's toybox does differently (``_files.ToyboxRelease``).
        self.toybox = toybox_release(self.release.version)
        self._server: asyncio.Server | None = None
        self._connections: set[Connection] = set()
        self._connection_tasks: set[asyncio.Task[None]] = set()
        self._pending_sends: dict[tuple[Channel, int], asyncio.Task[None]] = {}
        self._background_task: asyncio.Task[None] | None = None
        self._messaging = Messaging(
            self._send,
            app=app_profile(app),
            release=self.release,
            focus_delay_ms=focus_delay_ms,
            am_error_exit=am_unresolved_exit,
            take_faults=self.faults.take_am_faults,
            user_unlocked=lambda: self.user_unlocked,
        )
        self.screen = screen
        self.second_sms_app = second_sms_app
        self._system = SystemCommands(self._properties, self.now_ms, lambda: self.root)
        #: ``dumpsys``, ``cmd role`` and ``settings`` over the windows, screen and apps.
        self.system_state = SystemState(
            self._messaging,
            lambda: self.release,
            secure_setting=self._secure_setting,
            sim_sub_ids=lambda: tuple(self.sim_sub_ids),
        )
        self.system_state.permission_module_updated = permission_module_updated
        self.system_state.sms_default_setting = sms_default_setting
        self.system_state.work_profile = work_profile
        self.system_state.secondary_user_sms_app = secondary_user_sms_app
        if disable_adb_auth_timeout:
            self.system_state.global_settings["adb_allowed_connection_time"] = "0"
        self.reboots = 0
        #: Armed ``drop_after_command`` points: (command name, commands of that name to go,
        #: whether adbd restarts).
        #: armed drops: (command name, count left, "drop" | "adbd" | "reboot")
        self._drops_after_command: list[tuple[str, int, str]] = []
        #: Every script adbd is running, and its task: what a SIGKILL reaches.
        self._scripts: dict[Session, asyncio.Task[object]] = {}
        #: Test harness: cleared by ``hold_radio``: the app's delayed verdicts wait for it.
        self._radio_free = asyncio.Event()
        self._radio_free.set()
        self._framework_sends = 0
        #: ``/system/framework/framework.jar`` and the tools that read it (``_framework_jar``).
        self.system_image = SystemImage(lambda: self.release.version, framework_jar)
        #: ``service`` with ``isms`` behind it: the framework's send path (``_isms``).
        self._isms = IsmsService(self._isms_host())

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def serial(self) -> str:
        """The ADB serial a client uses: ``host:port``."""
        return f"{self.host}:{self.port}"

    @property
    def store(self) -> SmsStore:
        """The SMS store (available once started).

        Raises:
            RuntimeError: the phone has not been started.
        """
        if self._store is None:
            raise RuntimeError("the simulated phone is not started")
        return self._store

    @property
    def banner(self) -> str:
        """The CNXN banner: what adbd tells a client about this device.

        adbd's ``get_connection_string`` (``adb.cpp``): ``device::`` then
        ``ro.product.name``, ``ro.product.model``, ``ro.product.device`` and
        ``features=<supported_features()>``, joined by ``;``. The features are those the
        simulator serves (see ``DEVICE_FEATURES``).
        """
        return (
            f"device::ro.product.name={PRODUCT_NAME};ro.product.model={PRODUCT_MODEL};"
            f"ro.product.device={PRODUCT_DEVICE};features={','.join(DEVICE_FEATURES)}"
        )

    async def start(self) -> None:
        """Open the store and start listening."""
        if self._store is not None:
            return
        self._store = SmsStore(self.store_path, threads_autoincrement=self.threads_autoincrement)
        self._files = FileTree(self.store_path, clock_ns=lambda: self.now_ms() * 1_000_000)
        self._files.boot()
        self.authorized_keys.start_keystore()
        self._server = await asyncio.start_server(
            self._accept, sock=listening_socket(self.host, self.port)
        )
        self.tcpip_enabled = True
        sockets = self._server.sockets
        if sockets:
            self.port = int(sockets[0].getsockname()[1])
        if self.background_sends > 0:
            self._background_task = asyncio.create_task(self._background_loop())
        log.info("simulator_listening", serial=self.serial, root=self.root)

    async def stop(self) -> None:
        """Stop listening, reset every connection, cancel pending work and close the store."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        self._kill_scripts()
        for connection in list(self._connections):
            connection.abort(reset=True)
        if self._connection_tasks:
            # Aborted sockets end their serve loops on their own; cancel only stragglers.
            _, stragglers = await asyncio.wait(set(self._connection_tasks), timeout=2)
            for task in stragglers:
                task.cancel()
        tasks = list(self._pending_sends.values())
        if self._unlock_task is not None:
            tasks.append(self._unlock_task)
            self._unlock_task = None
        if self._background_task is not None:
            tasks.append(self._background_task)
            self._background_task = None
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._pending_sends.clear()
        if server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)
        if self._store is not None:
            self._store.close()
            self._store = None
        if self._files is not None:
            self._files.close()
            self._files = None
        log.info("simulator_stopped", serial=self.serial)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- test controls -------------------------------------------------------------------

    def inject_fault(self, fault: Fault | str, count: int = 1) -> None:
        """Arm ``fault`` for the next ``count`` uses (sends, queries or commands; see Fault).

        Raises:
            ValueError: unknown fault name or a count below 1.
        """
        self.faults.add(fault, count)

    def drop_after_command(
        self, name: str, *, nth: int = 1, adbd_restarts: bool = False, reboot: bool = False
    ) -> None:
        """Drop the ADB connection right after the ``nth`` next command called ``name`` returns.

        The command has done what it does (``am`` has opened the compose screen); the phone
        then resets the connection, as when it leaves the network mid-script, and the
        script is hung up there (see ``_shell.Session``): one that does not ignore SIGHUP
        stops, no later command of it runs; one that does (``trap '' HUP``) runs on to its
        end, its output lost. With ``adbd_restarts`` adbd itself restarts there instead (a
        crash, ``adb root``/``unroot``/``tcpip``/``usb``): init kills every process it
        started, so the script stops there whatever it ignores (see ``restart_adbd``). With
        ``reboot`` the phone reboots there (its power lost, a kernel panic): the script stops
        there too, and the phone comes back as after ``reboot`` (locked until the user's
        first unlock, ``adb tcpip`` mode lost unless ``tcpip_survives_reboot``).
        ``name`` is the command's name without ``/system/bin/`` (``am``, ``input``,
        ``ln``...). Several drops may be armed at once.

        Raises:
            ValueError: an empty name, ``nth`` below 1, or both ``adbd_restarts`` and
                ``reboot``.
        """
        if not name or nth < 1:
            raise ValueError("drop_after_command needs a command name and nth >= 1")
        if adbd_restarts and reboot:
            raise ValueError("adbd restarts or the phone reboots, not both")
        mode = "reboot" if reboot else "adbd" if adbd_restarts else "drop"
        self._drops_after_command.append((name, nth, mode))

    def restart_adbd(self) -> None:
        """adbd restarts now (a crash, ``adb root``/``unroot``/``tcpip``/``usb``): init kills
        every process of its service's cgroup with SIGKILL (``KillProcessGroup(SIGKILL)``
        once the service's process is gone, system/core ``init/service.cpp``
        android-10.0.0_r30 and 15.0.0_r1, libprocessgroup walking ``cgroup.procs``), so
        every script it was running stops where it stands, ``trap '' HUP`` or not, and every
        connection is reset. It listens again at once (the TCP port survives, unlike a
        reboot); sends already queued go on."""
        log.info("simulator_adbd_restart")
        self._kill_scripts()
        for connection in list(self._connections):
            connection.abort(reset=True)

    def _kill_scripts(self) -> None:
        """SIGKILL to every script adbd started (a task running the caller's own script
        stops at its next step boundary)."""
        for session, task in list(self._scripts.items()):
            session.kill()
            if task is not asyncio.current_task():
                task.cancel()

    async def wait_idle(self, *, within_s: float | None = 120.0) -> None:
        """Wait until every delayed send (OUTBOX -> SENT/FAILED) has finished, and every
        script that runs on after its hang-up (``trap '' HUP``) has ended.

        Test harness: bounded by ``within_s`` (None: no bound), so that a send or a script
        that never ends fails the test that waits, saying what is still busy, instead of
        holding the whole run.

        Raises:
            AssertionError: still busy after ``within_s`` seconds.
        """
        loop = asyncio.get_running_loop()
        deadline = None if within_s is None else loop.time() + within_s
        while True:
            orphans = [
                task
                for session, task in self._scripts.items()
                if session.hung_up and not session.finished
            ]
            if not self._pending_sends and not orphans:
                return
            busy = [*self._pending_sends.values(), *orphans]
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                raise AssertionError(
                    f"the phone is still busy after {within_s} s: delayed sends"
                    f" {sorted(self._pending_sends)!r}, {len(orphans)} script(s) running on"
                    " after their hang-up"
                )
            await asyncio.wait(busy, timeout=left)

    def hold_radio(self) -> None:
        """Test harness: the radio's delayed verdicts on the app's sends (``send_delay_ms``,
        and the app's faults that come later) wait until ``release_radio``, so a test can let
        a client see the app's SENT row before the radio fails it, whatever the load; so does
        the radio's answer to a framework send, and with it the row the framework writes only
        at that answer (a radio that answers late: ``SMSDispatcher.SmsTracker
        .persistSentMessageIfRequired`` runs at the send's final result, frameworks/opt/
        telephony android-10.0.0_r30 to 15.0.0_r1, as ``_isms`` reads it)."""
        self._radio_free.clear()

    def release_radio(self) -> None:
        """Test harness: the held verdicts come now (see ``hold_radio``)."""
        self._radio_free.set()

    async def wait_terminal_read(self, *, within_s: float = 10.0) -> None:
        """Wait until a script running on the phone waits on a read of its terminal (its PTY
        or the shell protocol's stdin socket), which nobody writes to.

        Test harness, not phone behaviour: it only watches.

        Raises:
            AssertionError: no script did within ``within_s`` seconds.
        """
        waits = {asyncio.ensure_future(s.terminal_read.wait()) for s in self._scripts}
        if not waits:
            raise AssertionError("no script is running on the phone")
        try:
            done, _ = await asyncio.wait(
                waits, timeout=within_s, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for wait in waits:
                wait.cancel()
        if not done:
            raise AssertionError(f"no script waited on a read of its terminal in {within_s} s")

    async def wait_transmissions(
        self,
        predicate: Callable[[Transmission], bool] | None = None,
        *,
        count: int = 1,
        within_s: float = 10.0,
        then_idle: bool = False,
    ) -> list[Transmission]:
        """Wait until at least ``count`` of ``transmissions`` match ``predicate`` (every one
        when None); return every match, in order.

        Test harness, not phone behaviour: nothing the phone does changes. An app writes its
        row (SENT, for an optimistic one) before the radio sends, and the radio's send comes
        ``send_delay_ms`` later (the framework's too), so a send a client saw succeed may
        not be in ``transmissions`` yet: wait for the transmission itself, not for the row.
        The wait is woken each time the phone appends a transmission (no polling). With
        ``then_idle`` it then waits for ``radio_idle`` too (up to ``within_s`` again) and
        returns the matches at that point: what a test asserting an exact count ("sent once,
        never twice") needs.

        Raises:
            AssertionError: fewer than ``count`` matched within ``within_s`` seconds, or
                (``then_idle``) the radio stayed busy; the message says what was seen.
            ValueError: ``count`` or ``within_s`` below 0.
        """
        if count < 0 or within_s < 0:
            raise ValueError("count and within_s must not be negative")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s

        def matching() -> list[Transmission]:
            return [t for t in self.transmissions if predicate is None or predicate(t)]

        while len(found := matching()) < count:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise AssertionError(
                    f"waited {within_s} s for {count} matching transmission(s), "
                    f"{len(found)} matched: {found!r}; every transmission: "
                    f"{self.transmissions!r}"
                )
            waiter: asyncio.Future[None] = loop.create_future()
            self._transmission_waiters.add(waiter)
            try:
                await asyncio.wait({waiter}, timeout=remaining)
            finally:
                self._transmission_waiters.discard(waiter)
        if then_idle:
            await self.radio_idle(within_s=within_s)
            found = matching()
        return found

    async def radio_idle(self, *, within_s: float = 10.0) -> None:
        """Wait until nothing on the phone can still send: no delayed send is waiting for the
        radio (``send_delay_ms``: the app's or the framework's row written, its transmission
        to come), and no script adbd started is still running (one running on after its
        hang-up, or one still in ``input``/``service call``, may yet send). Scripts the
        ``hang`` fault parked never send and are not waited for; nor are a stalled link's
        (``hang-after-send``), which have run to their end. Call it before asserting that
        nothing (or nothing more) left the phone. Unlike ``wait_idle`` it is bounded and
        says what is still busy; call it when no client of the test's own is running a
        script (a script that never ends keeps the phone busy).

        Test harness, not phone behaviour: it only watches. Returns at once when idle;
        otherwise it re-checks whenever a send or script ends, and every 50 ms.

        Raises:
            AssertionError: still busy after ``within_s`` seconds (what is busy is listed).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        current = asyncio.current_task()
        while True:
            sends = {key: task for key, task in self._pending_sends.items() if not task.done()}
            scripts = [
                task
                for session, task in self._scripts.items()
                if not session.finished
                and session not in self._parked_scripts
                and task is not current
                and not task.done()
            ]
            if not sends and not scripts:
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise AssertionError(
                    f"the phone is still busy after {within_s} s: delayed sends "
                    f"{sorted(sends)!r}, {len(scripts)} script(s) still running"
                )
            await asyncio.wait(
                {*sends.values(), *scripts},
                timeout=min(remaining, 0.05),
                return_when=asyncio.FIRST_COMPLETED,
            )

    async def reboot(self) -> None:
        """Reboot now, as a phone does.

        - Every connection is reset; pending sends finish or fail as configured.
        - Every window and app process is gone; the keyguard is up (``screen`` "locked").
        - ``user_unlocked`` is False until the user's first unlock (``unlock_user``, or
          ``unlock_after_boot_ms``): before it, apps that are not direct-boot aware do not
          resolve and the SMS database is locked.
        - ``adb tcpip`` mode is lost: it lives in the non-persistent property
          ``service.adb.tcp.port``, which adbd reads at start (``persist.adb.tcp.port`` is the
          persistent one; adbd ``daemon/main.cpp``, system/core android-10.0.0_r1,
          packages/modules/adb android-11 to 15), so connections are refused until
          ``enable_tcpip()``, unless ``tcpip_survives_reboot`` (an emulator, whose adbd
          listens on TCP at every boot).
        - ADB keys stay; their last-use times survive (``adb_temp_keys.xml``).
        """
        self.reboots += 1
        log.info("simulator_reboot", completes_sends=self.reboot_completes_sends)
        self._messaging.reset()
        self._isms.reset()
        self._messaging.screen = "locked"
        self.user_unlocked = False
        self._kill_scripts()  # every process is gone
        if not self.tcpip_survives_reboot and self._server is not None:
            server, self._server = self._server, None
            # Not wait_closed(): the reboot may run inside one of the connections it ends.
            server.close()
            self.tcpip_enabled = False
        for connection in list(self._connections):
            connection.abort(reset=True)
        if not self.reboot_completes_sends:
            for key, task in list(self._pending_sends.items()):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                self._pending_sends.pop(key, None)
                channel, provider_id = key
                if channel == "mms":
                    self.store.mark_mms_failed(provider_id)
                else:
                    self.store.mark_failed(provider_id)
        if self._files is not None:
            # init's post-fs-data: /data/local/tmp and its parents, modes and owners again.
            self._files.boot()
        self.authorized_keys.start_keystore()
        if self._unlock_task is not None:
            self._unlock_task.cancel()
            self._unlock_task = None
        if self.unlock_after_boot_ms is not None:
            self._unlock_task = asyncio.create_task(self._unlock_later(self.unlock_after_boot_ms))

    async def _unlock_later(self, delay_ms: int) -> None:
        await asyncio.sleep(delay_ms / 1000)
        self._unlock_task = None
        self.unlock_user()

    def unlock_user(self) -> None:
        """The user enters the PIN: the user is unlocked and the keyguard goes away. SMS
        received while locked now reach the app, which writes their rows (see
        :meth:`receive_sms`)."""
        self.user_unlocked = True
        self._messaging.screen = "on"
        held, self._held_incoming = self._held_incoming, []
        for incoming in held:
            self._deliver(incoming)

    async def enable_tcpip(self) -> None:
        """``adb tcpip``: adbd listens on the phone's TCP port again (after a reboot)."""
        if self._server is not None or self._store is None:
            return
        self._server = await asyncio.start_server(
            self._accept, sock=listening_socket(self.host, self.port)
        )
        self.tcpip_enabled = True

    def disable_tcpip(self) -> None:
        """``adb usb``: adbd stops listening on TCP until ``enable_tcpip()`` (an outage).

        adbd's ``usb:`` service (``restart_usb_service``, system/core ``adb/services.cpp``,
        android-10.0.0_r1) sets ``service.adb.tcp.port`` to 0 and adbd restarts on USB only:
        every script it ran is killed (see ``restart_adbd``), every connection is reset, and
        a TCP connect is refused
        until ``adb tcpip``. Nothing else changes: no reboot, sends already queued go on.
        """
        server, self._server = self._server, None
        if server is not None:
            server.close()
        self.tcpip_enabled = False
        self._kill_scripts()  # adbd restarts: init kills what it started
        for connection in list(self._connections):
            connection.abort(reset=True)

    def stall_links(self) -> None:
        """Every open ADB connection stalls, as when the phone drops off Wi-Fi without a
        reset (an outage, or a path that stops carrying packets): nothing more goes either
        way on them, the phone stops reading what clients write (their writes block once
        their own buffers are full) and sends nothing, and the scripts they run run on
        (``Connection.stall``). Connections made afterwards are served. Until
        ``resume_links()``, a reboot or adbd restarting (which reset them)."""
        for connection in list(self._connections):
            connection.stall()

    def resume_links(self) -> None:
        """The stalled connections carry packets again (``Connection.resume``)."""
        for connection in list(self._connections):
            connection.resume()

    def advance_time(self, delta: timedelta) -> None:
        """Move the device clock forward by ``delta`` (no real waiting): ``date``, new rows
        and the ADB key store see the later time."""
        if delta < timedelta(0):
            raise ValueError("time only moves forward")
        self._clock_offset_ms += int(delta.total_seconds() * 1000)

    # -- files (test controls) -------------------------------------------------------

    def _tree(self) -> FileTree:
        if self._files is None:
            raise RuntimeError("the simulated phone is not started")
        return self._files

    @property
    def files(self) -> FilesView:
        """The phone's file tree as a test reads it (as root): ``exists``, ``is_dir``,
        ``is_symlink``, ``readlink``, ``listdir``, ``stat``, ``walk``.

        Raises:
            RuntimeError: the phone has not been started.
        """
        return FilesView(self._tree())

    def clear_tmp(self) -> None:
        """Someone ran ``rm -rf /data/local/tmp/*`` (dot names too): everything below
        ``/data/local/tmp`` is gone, the directory stays."""
        self._tree().clear_children(LOCAL_TMP)

    async def wipe_data(self) -> None:
        """A factory reset, then the boot after it.

        Recovery formats ``/data`` (``wipe_data``): the SMS/MMS database
        (``/data/user_de``/``/data/data/com.android.providers.telephony``), everything in
        ``/data/local/tmp``, and ``/data/misc/adb/adb_keys`` (where adbd and
        ``AdbDebuggingManager`` keep "Always allow" keys: system/core
        ``adb/daemon/auth.cpp`` ``key_paths``, android-10.0.0_r1) are gone. So is the
        ``adb tcpip`` mode, and with it every connection: like a reboot (see ``reboot``).
        A real phone also turns USB debugging off; here ``enable_tcpip()`` stands for the
        user turning it on again, and an unknown key is then asked about again.
        """
        self.store.wipe()
        self._held_incoming.clear()  # the raw table went with the database
        self._tree().wipe()
        keys = self.authorized_keys
        if keys.path.exists():
            keys.path.write_text("", encoding="utf-8")
        keys.last_connection.clear()
        await self.reboot()

    def _zone(self) -> ZoneInfo:
        try:
            return ZoneInfo(self._properties().get("persist.sys.timezone", "UTC"))
        except (ZoneInfoNotFoundError, ValueError):
            return ZoneInfo("UTC")

    # -- the messaging app and the screen (test controls) --------------------------------

    @property
    def app(self) -> MessagingAppProfile:
        """The default SMS app (see ``_apps``); assign a profile or its name to change it."""
        return self._messaging.app

    @app.setter
    def app(self, value: str | MessagingAppProfile) -> None:
        self._messaging.app = app_profile(value)

    @property
    def screen(self) -> Screen:
        """``on`` (unlocked), ``locked`` (keyguard up) or ``off`` (asleep, keyguard behind).

        While not ``on`` every key event goes to the keyguard; activities start behind it.
        """
        return self._messaging.screen

    @screen.setter
    def screen(self, value: Screen) -> None:
        if value not in SCREEN_STATES:
            raise ValueError(f"screen must be one of {', '.join(SCREEN_STATES)}")
        self._messaging.screen = value

    @property
    def second_sms_app(self) -> bool:
        """A second SMS app is installed and no default is set for ``SENDTO``: an implicit
        ``SENDTO`` brings up the chooser (``ResolverActivity``)."""
        return self._messaging.second_sms_app

    @second_sms_app.setter
    def second_sms_app(self, value: bool) -> None:
        self._messaging.second_sms_app = value

    @property
    def compose(self) -> Compose | None:
        """The topmost compose window (recipients, draft, focus), or None."""
        return self._messaging.compose

    def open_compose(
        self,
        address: str,
        draft: str,
        *,
        subject: str = "",
        foreground: bool = True,
        package: str | None = None,
    ) -> Compose:
        """Leave the default app's compose window open for ``address`` holding ``draft``, as a
        ``SENDTO smsto:<address>`` (``-p package`` when given) opened it and nobody sent it.

        In the foreground a new equal ``SENDTO`` is "delivered to the top-most instance";
        behind the launcher (``foreground=False``) its task "has been brought to the front".
        Either way the new extras are dropped for an app whose SENDTO reuses its task.
        """
        addresses = tuple(part for part in address.replace(";", ",").split(",") if part)
        return self._messaging.open_compose(
            addresses, draft, subject=subject, foreground=foreground, package=package
        )

    def receive_sms(
        self, sender: str, body: str, *, sub_id: int | None = None, date_sent_ms: int | None = None
    ) -> int | None:
        """An SMS from ``sender`` reaches the phone: the default SMS app writes its inbox row,
        as on a phone. Returns the row's ``_id``, or None while the user is locked (the row
        is written when the user unlocks: :meth:`unlock_user`).

        What the row holds, and where each value comes from (docs/simulator.md, "Incoming
        SMS"): type 1; ``address`` exactly as given (the PDU's originating address: a
        national number without ``+`` stays one); ``body`` the whole text, one row however
        many parts it took (``InboundSmsHandler.processMessagePart`` keeps the parts in the
        ``raw`` table and hands them on only once all are in, and the app joins them:
        frameworks/opt/telephony at LineageOS's merges of android-10.0.0_r46 to
        14.0.0_r50 and lineage-22.0); ``date`` the phone's clock (:meth:`now_ms`) when the
        app writes it; ``date_sent`` the service centre's time stamp of the first part
        (whole seconds: TP-SCTS), by default the network's time, which is the host's clock
        plus :meth:`advance_time` but not ``clock_skew_ms`` (a phone whose clock is behind
        gets a ``date`` before its ``date_sent``, as a real one does); ``sub_id`` the SIM
        it came in on (default: the phone's first SIM, its default for SMS); ``creator``
        the default SMS app's package (``SmsProvider.insert``: the caller's package);
        ``read``/``seen``/``error_code`` as the app writes them
        (``MessagingAppProfile.inbox_as_aosp_messaging``); the conversation found or
        created, its snippet, date, count and read flag updated by the provider's triggers.

        Raises:
            ValueError: an empty sender, a ``sub_id`` that is none of the phone's SIMs, or
                a ``date_sent_ms`` that is not whole seconds.
        """
        if not sender:
            raise ValueError("an SMS needs an originating address")
        chosen = self.sim_sub_ids[0] if sub_id is None else sub_id
        if chosen not in self.sim_sub_ids:
            raise ValueError(
                f"sub_id {chosen} is none of the phone's SIMs {list(self.sim_sub_ids)}"
            )
        if date_sent_ms is None:
            network_ms = time.time_ns() // 1_000_000 + self._clock_offset_ms
            date_sent_ms = network_ms // 1000 * 1000
        elif date_sent_ms % 1000:
            raise ValueError(
                f"date_sent_ms {date_sent_ms} is not whole seconds: the service centre's time"
                " stamp (TP-SCTS) has one-second resolution"
            )
        incoming = _Incoming(sender, body, chosen, date_sent_ms)
        if not self.user_unlocked:
            # before the first unlock the parts wait in the raw table and the user gets a
            # "new message" notification; the app gets SMS_DELIVER once the user unlocks
            # (InboundSmsHandler.processMessagePartWithUserLocked, then
            # SmsBroadcastUndelivered)
            self._held_incoming.append(incoming)
            log.info("sms_held_until_unlock", sub_id=chosen)
            return None
        return self._deliver(incoming)

    def _deliver(self, incoming: _Incoming) -> int:
        """The default SMS app takes ``SMS_DELIVER`` and writes the inbox row."""
        app = self.app
        top = self._messaging.top_activity()
        # AOSP Messaging: read when the sender's conversation is the one the user looks at
        # (DataModel.isFocusedConversation: its ConversationActivity resumed, screen on)
        focused = (
            app.inbox_as_aosp_messaging
            and self.screen == "on"
            and isinstance(top, Compose)
            and top.app.package == app.package
            and top.addresses == (incoming.sender,)
        )
        row_id = self.store.insert_incoming(
            incoming.sender,
            incoming.body,
            date_ms=self.now_ms(),
            date_sent_ms=incoming.date_sent_ms,
            sub_id=incoming.sub_id,
            read=1 if focused else 0,
            seen=1 if app.inbox_as_aosp_messaging else 0,
            creator=app.package,
            # AOSP Messaging writes NO_ERROR_CODE; the framework's values have none, so the
            # column's default for a database made on this release (0 on 10, -1 from 11)
            error_code=(
                NO_ERROR_CODE if app.inbox_as_aosp_messaging or self.release.version != 10 else 0
            ),
        )
        log.info("sms_received", row_id=row_id, sub_id=incoming.sub_id)
        return row_id

    async def resend_failed(self, row_id: int) -> None:
        """The phone's owner taps a failed message in the app to send it again (test hook).

        AOSP Messaging's manual resend (``ResendMessageAction``, then ``SendMessageAction``:
        ``MessageData.markMessageManualResend`` sets the message's timestamp to now, and
        ``updateMessageAndStatus`` writes the same telephony row back to type 2 with that
        date; packages/apps/Messaging android-10.0.0_r30 to android-15.0.0_r1, as LineageOS
        17.1 and 22.0 mirror it): the row keeps its ``_id``, turns SENT with a new ``date``,
        and the radio sends the text again.

        Raises:
            ValueError: no FAILED SMS row ``row_id`` written by a messaging app.
        """
        row = self.store.row(row_id)
        if row is None or row.type != MESSAGE_TYPE_FAILED or row.creator == SHELL_PACKAGE:
            raise ValueError(f"no failed message of the app at sms _id {row_id}")
        self.store.update(row_id, {"type": MESSAGE_TYPE_SENT, "date": self.now_ms()})
        await self._complete_later(
            _Outgoing(
                "sms", row_id, (row.address or "",), row.body or "", row.creator or self.app.package
            ),
            failed=False,
        )

    def now_ms(self) -> int:
        """The device clock in ms: host clock plus the configured skew and ``advance_time``."""
        return time.time_ns() // 1_000_000 + self.clock_skew_ms + self._clock_offset_ms

    @property
    def connections(self) -> int:
        """How many ADB connections are open."""
        return len(self._connections)

    # -- ADB side ------------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = Connection(self, reader, writer, self._connections.discard)
        self._connections.add(connection)
        task = asyncio.current_task()
        if task is not None:
            self._connection_tasks.add(task)
        try:
            with self.authorized_keys.session():
                await connection.serve()
        except asyncio.CancelledError:
            connection.abort()
        finally:
            if task is not None:
                self._connection_tasks.discard(task)

    async def run_shell(
        self, command: str, connection: Connection, output: OutputFn, session: Session
    ) -> int:
        """Run one command line in ``session`` (its terminal: the stream), streaming its
        output to ``output``; return its exit status.

        The script is mksh's ``sh -c`` as adbd starts it; a hang-up or a kill reaches it
        through ``session`` (see ``_shell.Session``). After a ``hang-after-send`` the command
        line runs on to its end on the phone (adbd's shell service runs it on its own,
        whether or not the client reads its output: packages/modules/adb
        ``daemon/shell_service.cpp``, ``Subprocess``, android-10.0.0_r1 to
        android-15.0.0_r1), but nothing more of its output reaches the client, and it never
        answers.

        Raises:
            ScriptKilled: the script is gone (hung up without ignoring SIGHUP, or killed).
        """
        self.commands_run.append(command)
        task = asyncio.current_task()
        if task is not None:
            self._scripts[session] = task
        try:
            return await self._run_script(command, connection, output, session)
        finally:
            session.finished = True
            self._scripts.pop(session, None)
            self._parked_scripts.discard(session)

    async def _run_script(
        self, command: str, connection: Connection, output: OutputFn, session: Session
    ) -> int:
        if self.latency_ms:
            await asyncio.sleep(self.latency_ms / 1000)
        if self.faults.take(Fault.HANG):
            log.info("simulator_fault_hang")
            self._parked_scripts.add(session)  # harness bookkeeping (radio_idle)
            # the link stalls as the command line arrives: nothing more goes either way on
            # this connection, so the client's later writes block once its buffers are full
            connection.stall()
            await asyncio.Event().wait()
        stalled = _Stall()
        token = _STALL.set(stalled)
        connection_token = _CONNECTION.set(connection)
        session_token = _SESSION.set(session)

        async def deliver(fd: int, data: str) -> None:
            if session.hung_up:
                raise TerminalHungUp
            if not stalled.on:
                await output(fd, data)

        try:
            shell = Shell(
                self._commands(),
                on_output=deliver,
                after_command=self._after_command,
                session=session,
                files=self._file_commands(),
                leader=True,
            )
            _, status = await shell.run_chunks(command)
        finally:
            _SESSION.reset(session_token)
            _CONNECTION.reset(connection_token)
            _STALL.reset(token)
        if stalled.on:
            session.finished = True
            await asyncio.Event().wait()  # the reply never comes
        return status

    def _drop_connection(self, reason: str) -> None:
        """Reset the connection of the script under way, as a phone leaving the network
        does: adbd closes its streams, and the script is hung up (``Connection.abort``)."""
        connection = _CONNECTION.get(None)
        if connection is not None:
            log.info("simulator_drop_connection", reason=reason)
            connection.abort(reset=True)

    async def _after_command(self, argv: list[str], status: int) -> None:
        """Fire an armed ``drop_after_command`` when its command has just returned."""
        name = argv[0].removeprefix("/system/bin/") if argv else ""
        if not any(armed == name for armed, _, _ in self._drops_after_command):
            return
        counted = [
            (armed, remaining - 1 if armed == name else remaining, restarts)
            for armed, remaining, restarts in self._drops_after_command
        ]
        fired = [drop for drop in counted if drop[1] <= 0]
        self._drops_after_command = [drop for drop in counted if drop[1] > 0]
        modes = {mode for _, _, mode in fired}
        if "reboot" in modes:
            log.info("simulator_drop_after_command", command=name, reboot=True)
            await self.reboot()
        elif "adbd" in modes:
            log.info("simulator_drop_after_command", command=name, adbd_restarts=True)
            self.restart_adbd()
        elif fired:
            self._drop_connection(f"drop after {name}")

    def _commands(
        self, uid: int | None = None, identity: Identity | None = None
    ) -> dict[str, CommandFn]:
        """The phone's commands as a process of ``uid`` sees them (default: the adb shell,
        uid 2000, or 0 after ``adb root``); ``identity`` is set for a process ``su`` started."""
        caller = (ROOT_UID if self.root else SHELL_UID) if uid is None else uid
        content = ContentCommand(
            self.store,
            lambda: self._content_access(caller),
            self._take_provider_error,
            lambda: 4242,
            lambda: self.content_row_cost_ms,
        )
        commands: dict[str, CommandFn] = {
            "am": self._messaging.am,
            "awk": awk,
            "cmd": self.system_state.cmd,
            "dumpsys": self.system_state.dumpsys,
            "settings": self.system_state.settings,
            "content": content,
            "date": self._system.date,
            "getprop": self._system.getprop,
            "grep": toybox_grep,
            "id": self._system.id if identity is None else identity.id,
            "input": self._messaging.input,
            "service": self._isms,
            "whoami": self._system.whoami if identity is None else identity.whoami,
        }
        if self.build_type != "user":
            # /system/xbin/su exists on userdebug and eng builds only (system/extras su).
            commands["su"] = SuCommand(caller, self._commands, self._file_commands)
        commands.update(self._file_commands(uid, identity).commands())
        commands.update(self.system_image.commands(self._file_commands(uid, identity)))
        return commands

    def _file_commands(
        self, uid: int | None = None, identity: Identity | None = None
    ) -> FileCommands:
        """The file tools, and the files a shell's redirections open, as a process of
        ``uid`` (``identity``: one ``su`` started) sees them."""
        caller = (ROOT_UID if self.root else SHELL_UID) if uid is None else uid
        if identity is None:
            # adbd: setgid(AID_SHELL) and its supplementary groups (not shell); adb root: 0.
            credentials = Credentials(uid=caller, gid=caller, groups=_SHELL_GROUPS)
        else:
            credentials = Credentials(uid=identity.uid, gid=identity.gid, groups=identity.groups)
        return FileCommands(self._tree(), cred=credentials, toybox=self.toybox, zone=self._zone)

    # -- the phone -----------------------------------------------------------------------

    @property
    def held_framework_sends(self) -> tuple[HeldSend, ...]:
        """Framework sends held by ``SmsUsageMonitor``'s confirmation dialog (never sent)."""
        return tuple(self._isms.held_sends)

    def _isms_host(self) -> IsmsHost:
        def track(work: Awaitable[None]) -> None:
            self._framework_sends += 1
            key: tuple[Channel, int] = ("sms", -self._framework_sends)

            async def finish() -> None:
                try:
                    await work
                finally:
                    self._pending_sends.pop(key, None)

            self._pending_sends[key] = asyncio.create_task(finish())

        def transmission(address: str, body: str, row_id: int | None, time_ms: int) -> Transmission:
            return Transmission(
                channel="sms",
                addresses=(address,),
                body=body,
                provider_id=row_id,
                time_ms=time_ms,
                app=SHELL_PACKAGE,
            )

        return IsmsHost(
            version=lambda: self.release.version,
            uid=lambda: ROOT_UID if self.root else SHELL_UID,
            now_ms=self.now_ms,
            sim_sub_ids=lambda: self.sim_sub_ids,
            insert_row=lambda **columns: self.store.insert(**columns),
            update_row=lambda row_id, values: self.store.update(row_id, values),
            record=self._transmitted,
            take_send_faults=self.faults.take_send_faults,
            send_delay_ms=lambda: self.send_delay_ms,
            track=track,
            make_transmission=transmission,
            code_shift=lambda: 1 if self.system_image.kind == "vendor-reordered" else 0,
            link_faults_before=self._link_faults_before,
            link_faults_after=self._link_faults_after,
            radio_free=self._radio_free,
        )

    def _secure_setting(self, name: str, user_id: int = 0) -> str | None:
        """A ``Settings.Secure`` value of ``user_id`` the simulator keeps (``android_id``),
        else None."""
        if name == "android_id" and self._store is not None:
            return self._store.android_id(user_id)
        return None

    @property
    def android_id(self) -> str:
        """The phone's ``Settings.Secure.ANDROID_ID`` (user 0): its identity, kept with the
        store and new after ``wipe_data``."""
        return self.store.android_id()

    def _properties(self) -> dict[str, str]:
        return build_properties(
            region=self.region,
            root=self.root,
            serial=f"SBSIM{self.port:05d}" if self.serialno is None else self.serialno,
            release=self.release,
            build_type=self.build_type,
        )

    def _content_access(self, uid: int) -> ContentAccess:
        return ContentAccess(
            uid=uid,
            release=self.release,
            sim_sub_ids=self.sim_sub_ids,
            user_unlocked=self.user_unlocked,
        )

    def _take_provider_error(self) -> bool:
        return self.faults.take(Fault.PROVIDER_ERROR)

    async def _send(self, request: SendRequest) -> None:
        """The messaging app sends ``request``, as its profile and the armed faults say.

        The app picks the channel (``MessagingAppProfile.channel_for``): RCS chat writes
        nothing to the provider; MMS writes a ``content://mms`` message (outbox, then sent or
        failed); SMS writes one ``content://sms`` row per recipient (OUTBOX, then SENT or
        FAILED after ``send_delay_ms``). The text is the app's (``alter_text``). Every
        message that really leaves the phone is appended to ``transmissions``.
        """
        faults = self.faults.take_send_faults()
        if faults:
            log.info("simulator_send_faults", faults=sorted(fault.value for fault in faults))
        if not self._link_faults_before(faults):
            return
        app = request.app
        addresses = request.addresses
        if Fault.WRONG_RECIPIENT in faults:
            addresses = (wrong_recipient(addresses[0]), *addresses[1:])
        channel: Channel
        if Fault.RCS_SEND in faults:
            channel = "rcs"
        elif Fault.MMS_CONVERT in faults or Fault.MMS_NETWORK_TIMEOUT in faults:
            channel = "mms"
        else:
            channel = app.channel_for(addresses, request.body, request.subject, self.rcs)
        body = app.alter_text(request.body, channel)
        if Fault.SIMPLE_CHARACTERS in faults:
            body = simple_characters(body)
        if Fault.MANGLE_BODY in faults:
            body = autocorrect(body)
        failed = Fault.SEND_FAILS in faults
        if channel == "sms" and sms_segments(body) > 1 and self.faults.take(Fault.PART_FAILS):
            log.info("simulator_send_faults", faults=[Fault.PART_FAILS.value])
            failed = True  # the last part fails, the ones before it go out (_complete)
        stuck = Fault.STUCK_OUTBOX in faults
        copies = 2 if Fault.DUPLICATE_SEND in faults else 1
        for _ in range(copies):
            if channel == "rcs":
                if not failed and not stuck:
                    self._record(_Outgoing("rcs", None, addresses, body, app.package))
                continue
            if channel == "mms":
                pdu_id = self.store.insert_outgoing_mms(
                    addresses,
                    body,
                    date_ms=self.now_ms(),
                    subject=request.subject or None,
                    msg_box=MMS_BOX_SENT if app.optimistic_sent else MMS_BOX_OUTBOX,
                    creator=app.package,
                )
                outgoing = [_Outgoing("mms", pdu_id, addresses, body, app.package)]
            else:
                # one clock reading for them all (``InsertNewMessageAction``: ``timestamp``
                # for each recipient's row, ``timestamp + 1`` for the summary)
                sent_at = self.now_ms()
                if len(addresses) > 1 and app.broadcast_summary_row:
                    self._insert_broadcast_summary(app, addresses, body, date_ms=sent_at + 1)
                outgoing = [
                    _Outgoing(
                        "sms",
                        self._insert_outgoing(app, address, body, date_ms=sent_at),
                        (address,),
                        body,
                        app.package,
                    )
                    for address in addresses
                ]
            if stuck:
                # the radio never sends it: the row stays as written (an optimistic app's
                # SENT row for good, once it gives up in its own database)
                continue
            for message in outgoing:
                if channel == "mms" and Fault.MMS_NETWORK_TIMEOUT in faults:
                    # MmsService gave up waiting for the MMS network: the sent-box row turns
                    # FAILED, and nothing went out
                    self._later(
                        message,
                        self.mms_fail_after_ms,
                        lambda mms: self._complete(mms, failed=True),
                    )
                elif channel == "sms" and Fault.APP_TIMEOUT in faults:
                    self._later(message, self.app_send_timeout_ms, self._app_timeout)
                else:
                    await self._complete_later(message, failed=failed)
        await self._link_faults_after(faults)

    def _link_faults_before(self, faults: frozenset[Fault]) -> bool:
        """The link's faults at the moment a send starts (the app's send key, or the
        framework's ``service call``); False when the send must not happen.

        ``drop-before-send``: the connection resets as the send starts: a script whose sh
        does not ignore SIGHUP has the sending command killed (mksh j_exit) before it acts,
        and nothing is sent; one that ignores it (the command inherited the ignored SIGHUP,
        and nothing else signals it) runs on, and the message is sent."""
        if Fault.DROP_BEFORE_SEND in faults:
            self._drop_connection("drop-before-send")
            session = _SESSION.get(None)
            if session is None or session.killed:
                return False
        return True

    async def _link_faults_after(self, faults: frozenset[Fault]) -> None:
        """The link's faults once a send went out, on either path: a reboot (the script is
        killed there, with every process); the connection reset right after (the script is
        hung up, and runs on to its end if it ignores SIGHUP); or the link stalls (the
        script runs on to its end on the phone; the client's timeout is all it will see,
        ``run_shell``)."""
        if Fault.REBOOT in faults:
            await self.reboot()
            return
        if Fault.DROP_AFTER_SEND in faults:
            self._drop_connection("drop-after-send")
            return
        if Fault.HANG_AFTER_SEND in faults:
            _STALL.get(_Stall()).on = True
            connection = _CONNECTION.get(None)
            if connection is not None:
                connection.stall()  # nothing more goes either way on this link

    def _insert_broadcast_summary(
        self, app: MessagingAppProfile, addresses: tuple[str, ...], body: str, *, date_ms: int
    ) -> int:
        """The summary row an app writes for a text to several recipients sent as SMS,
        before the recipients' own rows (``MessagingAppProfile.broadcast_summary_row``:
        AOSP Messaging ``InsertNewMessageAction.insertBroadcastSmsMessage``): SENT at once,
        never sent itself, never changed by what the radio does."""
        return self.store.insert(
            address=" ".join(addresses),
            body=body,
            date=date_ms,
            date_sent=0,
            read=1,
            seen=1,
            status=STATUS_COMPLETE,
            type=MESSAGE_TYPE_SENT,
            thread_id=self.store.thread_id_for(addresses),
            error_code=0 if self.release.version == 10 else NO_ERROR_CODE,
            sub_id=self.sim_sub_ids[0],
            creator=app.package,
        )

    def _insert_outgoing(
        self, app: MessagingAppProfile, address: str, body: str, *, date_ms: int | None = None
    ) -> int:
        """The row ``app`` writes for one outgoing SMS before the radio answers: SENT for an
        app that writes it optimistically (every profile: ``optimistic_sent``), else OUTBOX."""
        return self.store.insert_outgoing(
            address,
            body,
            date_ms=self.now_ms() if date_ms is None else date_ms,
            creator=app.package,
            message_type=MESSAGE_TYPE_SENT if app.optimistic_sent else MESSAGE_TYPE_OUTBOX,
            # no error_code written: the provider's default for a database made on this
            # release (0 on 10, NO_ERROR_CODE -1 from 11: MmsSmsDatabaseHelper)
            error_code=0 if self.release.version == 10 else NO_ERROR_CODE,
            # the subscription it sends on: the phone's SIM (its first, the default for SMS).
            # SmsProvider.insert stores the sub_id the app passes (TelephonyProvider
            # android-10.0.0_r30 to 15.0.0_r1); the apps' own code was not read. A row naming
            # a SIM the phone lacks would be hidden from 14 (getSelectionBySubIds), which no
            # app sending on its SIM writes
            sub_id=self.sim_sub_ids[0],
        )

    async def _complete_later(self, message: _Outgoing, *, failed: bool) -> None:
        """The radio's verdict on ``message`` after ``send_delay_ms`` (at once without one)."""
        if self.send_delay_ms == 0:
            self._complete(message, failed=failed)
            return
        self._later(message, self.send_delay_ms, lambda sent: self._complete(sent, failed=failed))

    def _later(self, message: _Outgoing, delay_ms: int, then: Callable[[_Outgoing], None]) -> None:
        """``then(message)`` after ``delay_ms``, as a pending send (``radio_idle`` waits)."""
        assert message.provider_id is not None
        key: tuple[Channel, int] = (message.channel, message.provider_id)

        async def finish() -> None:
            try:
                await asyncio.sleep(delay_ms / 1000)
                await self._radio_free.wait()  # test harness: ``hold_radio``
                then(message)
            finally:
                self._pending_sends.pop(key, None)

        self._pending_sends[key] = asyncio.create_task(finish())

    def _app_timeout(self, message: _Outgoing) -> None:
        """``app-timeout``: the app's send timeout passed: it rewrites its row FAILED (type
        only: ``MmsUtils.updateSmsMessageSendingStatus``); the radio's success comes after
        and is ignored, but the SMS went out."""
        assert message.provider_id is not None
        row = self.store.row(message.provider_id)
        if row is not None and row.type in (MESSAGE_TYPE_OUTBOX, MESSAGE_TYPE_SENT):
            self.store.update(message.provider_id, {"type": MESSAGE_TYPE_FAILED})
        self._record(message)

    def _complete(self, message: _Outgoing, *, failed: bool) -> None:
        """The radio's verdict on one SMS or MMS still in the outbox."""
        assert message.provider_id is not None
        if message.channel == "mms":
            boxes = {mms.id: mms.msg_box for mms in self.store.mms_messages()}
            if boxes.get(message.provider_id) not in (MMS_BOX_OUTBOX, MMS_BOX_SENT):
                return
            if failed:
                self.store.mark_mms_failed(message.provider_id)
                return
            self.store.mark_mms_sent(message.provider_id, date_sent_ms=self.now_ms())
        else:
            row = self.store.row(message.provider_id)
            if row is None or row.type not in (MESSAGE_TYPE_OUTBOX, MESSAGE_TYPE_SENT):
                return
            if failed:
                # AOSP Messaging rewrites only type (and date, to the same value):
                # MmsUtils.updateSmsMessageSendingStatus
                self.store.update(message.provider_id, {"type": MESSAGE_TYPE_FAILED})
                parts = sms_segments(message.body)
                if message.app != SHELL_PACKAGE and parts > 1:
                    # the last part failed, the ones before it went out: the app's row keeps
                    # the worst result of its parts (SmsSender.SendResult.setPartResult)
                    self._record(message, parts_out=parts - 1)
                return
            if row.type == MESSAGE_TYPE_OUTBOX:
                self.store.mark_sent(message.provider_id, date_sent_ms=self.now_ms())
            # an optimistic app's SENT row is left as it is: nothing tells it was sent
        self._record(message)

    def _record(self, message: _Outgoing, *, parts_out: int | None = None) -> None:
        self._transmitted(
            Transmission(
                channel=message.channel,
                addresses=message.addresses,
                body=message.body,
                provider_id=message.provider_id,
                time_ms=self.now_ms(),
                app=message.app,
                parts_out=parts_out,
            )
        )

    def _transmitted(self, transmission: Transmission) -> None:
        """One message really left the phone: append it to ``transmissions`` and wake the
        tests waiting in ``wait_transmissions`` (the waking is harness only)."""
        self.transmissions.append(transmission)
        waiters, self._transmission_waiters = self._transmission_waiters, set()
        for waiter in waiters:
            loop = waiter.get_loop()
            if _running_loop() is loop:
                _wake(waiter)
            else:
                loop.call_soon_threadsafe(_wake, waiter)

    async def _background_loop(self) -> None:
        """A human using the phone: sends (and now and then receives) messages at random."""
        while True:
            await asyncio.sleep(self._random.expovariate(self.background_sends))
            address = self._random.choice(_BACKGROUND_CONTACTS)
            body = self._random.choice(_BACKGROUND_BODIES)
            if self._random.random() < 0.25:
                self.receive_sms(address, body)
                continue
            creator = self.app.package
            row_id = self._insert_outgoing(self.app, address, body)
            await self._complete_later(
                _Outgoing("sms", row_id, (address,), body, creator), failed=False
            )


@attrs.frozen
class _Outgoing:
    """One message on its way out: its channel, provider row, recipients, text and app."""

    channel: Channel
    provider_id: int | None
    addresses: tuple[str, ...]
    body: str
    app: str


@attrs.frozen
class _Incoming:
    """One received SMS on its way to the app: sender, whole text, SIM, SC time stamp."""

    sender: str
    body: str
    sub_id: int
    date_sent_ms: int


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def wrong_recipient(address: str) -> str:
    """A plausible mis-addressing: the last digit changes."""
    for index in range(len(address) - 1, -1, -1):
        if address[index].isdigit():
            digit = (int(address[index]) + 1) % 10
            return address[:index] + str(digit) + address[index + 1 :]
    return address + "1"


def autocorrect(body: str) -> str:
    """Alter ``body`` as an over-eager keyboard would; the result always differs."""
    words = body.split(" ")
    for index, word in enumerate(words):
        if word.lower() in _AUTOCORRECT:
            words[index] = _AUTOCORRECT[word.lower()]
            changed = " ".join(words)
            if changed != body:
                return changed
    for index, char in enumerate(body):
        if char.isalpha():
            swapped = char.lower() if char.isupper() else char.upper()
            if swapped != char:
                return body[:index] + swapped + body[index + 1 :]
    return body + "."
