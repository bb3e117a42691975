"""The simulated phone: an ADB daemon on loopback TCP in front of an SMS store and a shell."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Final, Self

import structlog

from android_bridge.simulator._auth import AuthorizedKeys
from android_bridge.simulator._content import ContentAccess, ContentCommand
from android_bridge.simulator._device import (
    PRODUCT_DEVICE,
    PRODUCT_MODEL,
    PRODUCT_NAME,
    Messaging,
    SendRequest,
    SystemCommands,
    build_properties,
)
from android_bridge.simulator._faults import Fault, FaultPlan
from android_bridge.simulator._platform import DEFAULT_RELEASE, android_release
from android_bridge.simulator._shell import CommandFn, Shell
from android_bridge.simulator._store import DEFAULT_SUB_ID, MESSAGE_TYPE_OUTBOX, SmsStore
from android_bridge.simulator._toybox import grep as toybox_grep
from android_bridge.simulator._transport import Connection, DropConnection

log = structlog.get_logger("android_bridge.simulator")

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
        send_delay_ms: int = 0,
        clock_skew_ms: int = 0,
        faults: Iterable[Fault | str | tuple[Fault | str, int]] = (),
        background_sends: float = 0.0,
        region: str = "US",
        reboot_completes_sends: bool = True,
        seed: int | None = None,
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
        self.send_delay_ms = send_delay_ms
        self.clock_skew_ms = clock_skew_ms
        self.background_sends = background_sends
        self.region = region.upper()
        self.reboot_completes_sends = reboot_completes_sends
        self.store_path = Path(store_path)
        self.authorized_keys = AuthorizedKeys(Path(authorized_keys_path))
        self.faults = FaultPlan()
        self.faults.extend(faults)
        #: Every shell command line received, in order.
        self.commands_run: list[str] = []
        self._random = random.Random(seed)
        self._store: SmsStore | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[Connection] = set()
        self._connection_tasks: set[asyncio.Task[None]] = set()
        self._pending_sends: dict[int, asyncio.Task[None]] = {}
        self._background_task: asyncio.Task[None] | None = None
        self._messaging = Messaging(self._send)
        self._system = SystemCommands(self._properties, self.now_ms, lambda: self.root)
        self.reboots = 0

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
        """The CNXN banner: what adbd tells a client about this device."""
        return (
            f"device::ro.product.name={PRODUCT_NAME};ro.product.model={PRODUCT_MODEL};"
            f"ro.product.device={PRODUCT_DEVICE};features="
        )

    async def start(self) -> None:
        """Open the store and start listening."""
        if self._server is not None:
            return
        self._store = SmsStore(self.store_path)
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
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
        for connection in list(self._connections):
            connection.abort(reset=True)
        if self._connection_tasks:
            # Aborted sockets end their serve loops on their own; cancel only stragglers.
            _, stragglers = await asyncio.wait(set(self._connection_tasks), timeout=2)
            for task in stragglers:
                task.cancel()
        tasks = list(self._pending_sends.values())
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

    async def wait_idle(self) -> None:
        """Wait until every delayed send (OUTBOX -> SENT/FAILED) has finished.

        Wrap it in ``asyncio.timeout`` to bound the wait.
        """
        while self._pending_sends:
            await asyncio.gather(*self._pending_sends.values(), return_exceptions=True)

    async def reboot(self) -> None:
        """Reboot now: reset every connection; pending sends finish or fail as configured."""
        self.reboots += 1
        log.info("simulator_reboot", completes_sends=self.reboot_completes_sends)
        self._messaging.compose = None
        for connection in list(self._connections):
            connection.abort(reset=True)
        if not self.reboot_completes_sends:
            for row_id, task in list(self._pending_sends.items()):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                self._pending_sends.pop(row_id, None)
                self.store.mark_failed(row_id)

    def now_ms(self) -> int:
        """The device clock in milliseconds (host clock plus the configured skew)."""
        return time.time_ns() // 1_000_000 + self.clock_skew_ms

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
            await connection.serve()
        except asyncio.CancelledError:
            connection.abort()
        finally:
            if task is not None:
                self._connection_tasks.discard(task)

    async def run_shell(self, command: str, connection: Connection) -> bytes:
        """Run one ``shell:`` command line and return its merged output."""
        self.commands_run.append(command)
        if self.latency_ms:
            await asyncio.sleep(self.latency_ms / 1000)
        if self.faults.take(Fault.HANG):
            log.info("simulator_fault_hang")
            await asyncio.Event().wait()
        shell = Shell(self._commands())
        output, _ = await shell.run(command)
        return output.encode("utf-8")

    def _commands(self) -> dict[str, CommandFn]:
        content = ContentCommand(
            self.store, self._content_access, self._take_provider_error, lambda: 4242
        )
        return {
            "am": self._messaging.am,
            "content": content,
            "date": self._system.date,
            "getprop": self._system.getprop,
            "grep": toybox_grep,
            "id": self._system.id,
            "input": self._messaging.input,
            "whoami": self._system.whoami,
        }

    # -- the phone -----------------------------------------------------------------------

    def _properties(self) -> dict[str, str]:
        return build_properties(
            region=self.region,
            root=self.root,
            serial=f"SBSIM{self.port:05d}",
            release=self.release,
            build_type=self.build_type,
        )

    def _content_access(self) -> ContentAccess:
        return ContentAccess(root=self.root, visible_sub_ids=(DEFAULT_SUB_ID,))

    def _take_provider_error(self) -> bool:
        return self.faults.take(Fault.PROVIDER_ERROR)

    async def _send(self, request: SendRequest) -> None:
        """The messaging app sends ``request``: OUTBOX row now, SENT/FAILED after the delay."""
        faults = self.faults.take_send_faults()
        if faults:
            log.info("simulator_send_faults", faults=sorted(fault.value for fault in faults))
        if Fault.DROP_BEFORE_SEND in faults:
            raise DropConnection("drop-before-send")
        address = request.address
        body = request.body
        if Fault.WRONG_RECIPIENT in faults:
            address = wrong_recipient(address)
        if Fault.MANGLE_BODY in faults:
            body = autocorrect(body)
        copies = 2 if Fault.DUPLICATE_SEND in faults else 1
        for _ in range(copies):
            row_id = self.store.insert_outgoing(address, body, date_ms=self.now_ms())
            if Fault.STUCK_OUTBOX in faults:
                continue
            await self._complete_later(row_id, failed=Fault.SEND_FAILS in faults)
        if Fault.REBOOT in faults:
            await self.reboot()
            raise DropConnection("reboot")
        if Fault.DROP_AFTER_SEND in faults:
            raise DropConnection("drop-after-send")
        if Fault.HANG_AFTER_SEND in faults:
            # Sent, but the reply never comes; the client's timeout is all it will see.
            await asyncio.Event().wait()

    async def _complete_later(self, row_id: int, *, failed: bool) -> None:
        if self.send_delay_ms == 0:
            self._complete(row_id, failed=failed)
            return

        async def finish() -> None:
            try:
                await asyncio.sleep(self.send_delay_ms / 1000)
                self._complete(row_id, failed=failed)
            finally:
                self._pending_sends.pop(row_id, None)

        self._pending_sends[row_id] = asyncio.create_task(finish())

    def _complete(self, row_id: int, *, failed: bool) -> None:
        row = self.store.row(row_id)
        if row is None or row.type != MESSAGE_TYPE_OUTBOX:
            return
        if failed:
            self.store.mark_failed(row_id)
        else:
            self.store.mark_sent(row_id, date_sent_ms=self.now_ms())

    async def _background_loop(self) -> None:
        """A human using the phone: sends (and now and then receives) messages at random."""
        while True:
            await asyncio.sleep(self._random.expovariate(self.background_sends))
            address = self._random.choice(_BACKGROUND_CONTACTS)
            body = self._random.choice(_BACKGROUND_BODIES)
            if self._random.random() < 0.25:
                self.store.insert_incoming(address, body, date_ms=self.now_ms())
                continue
            row_id = self.store.insert_outgoing(address, body, date_ms=self.now_ms())
            await self._complete_later(row_id, failed=False)


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
