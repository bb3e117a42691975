"""One ADB device over TCP: connection, error mapping, framed shell round trips, device facts.

Every adb-shell, socket and asyncio exception is translated here (``raise … from exc``) into
the bridge's tree. The line between the two halves of the tree is the ``OPEN`` packet that
carries the shell command: everything that fails before it is :class:`NotSent`; everything
that fails after it may have run on the phone and is :class:`OutcomeUnknown`.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import attrs
import structlog
from adb_shell import exceptions as adb_exceptions
from adb_shell.adb_device_async import AdbDeviceAsync
from adb_shell.transport.tcp_transport_async import TcpTransportAsync

from android_bridge._keys import load_signer
from android_bridge._records import Mode
from android_bridge._shell import StepOutput, frame_script
from android_bridge.exceptions import (
    BridgeError,
    DeviceUnreachable,
    NotSent,
    OutcomeUnknown,
    UnparseableOutput,
)

#: Runs a command as the system uid (``su`` on userdebug/eng builds: system/extras su).
SYSTEM_PREFIX = "su 1000 "
#: The payload limit of ADB protocol version 1 devices, used if the device announced none.
_LEGACY_MAX_PAYLOAD = 4096

_log = structlog.get_logger("android_bridge.device")

#: Every exception adb-shell, asyncio or the socket layer may raise during I/O. They share no
#: base class, so they are listed one by one (adb-shell 0.4.x, read from its source).
_TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    OSError,  # ConnectionRefusedError, ConnectionResetError, BrokenPipeError, socket.gaierror
    EOFError,
    asyncio.TimeoutError,
    asyncio.IncompleteReadError,
    socket.timeout,
    adb_exceptions.AdbCommandFailureException,
    adb_exceptions.AdbConnectionError,
    adb_exceptions.AdbTimeoutError,
    adb_exceptions.DeviceAuthError,
    adb_exceptions.InvalidChecksumError,
    adb_exceptions.InvalidCommandError,
    adb_exceptions.InvalidResponseError,
    adb_exceptions.InvalidTransportError,
    adb_exceptions.TcpTimeoutException,
)


class _EofAwareTransport(TcpTransportAsync):  # type: ignore[misc]
    """adb-shell's TCP transport, but a closed peer raises at once instead of spinning.

    At EOF ``StreamReader.read`` returns ``b""`` without suspending; adb-shell would loop on
    it until its read timeout. A reset is what it is, so say so immediately.
    """

    async def bulk_read(self, numbytes: int, transport_timeout_s: float | None) -> bytes:
        data: bytes = await super().bulk_read(numbytes, transport_timeout_s)
        if numbytes and not data:
            raise ConnectionResetError("the device closed the connection")
        return data

    def is_alive(self) -> bool:
        reader: asyncio.StreamReader | None = self._reader
        writer: asyncio.StreamWriter | None = self._writer
        return (
            reader is not None
            and writer is not None
            and not reader.at_eof()
            and not writer.is_closing()
        )


def parse_address(address: str) -> tuple[str, int]:
    """Split ``host:port`` (``[v6]:port`` allowed); the port defaults to 5555.

    Raises:
        ValueError: the address is malformed.
    """
    match = re.fullmatch(
        r"\[(?P<v6>[^\]]+)\](?::(?P<p6>\d+))?|(?P<host>[^:]+)(?::(?P<port>\d+))?", address
    )
    if match is None:
        raise ValueError(f"not a host:port address: {address!r}")
    host = match.group("v6") or match.group("host")
    port_text = match.group("p6") or match.group("port")
    port = int(port_text) if port_text else 5555
    if not 0 < port < 65536:
        raise ValueError(f"port out of range in {address!r}")
    return host, port


@attrs.frozen(kw_only=True)
class DeviceFacts:
    """What the device said about itself when we connected (read once, cached)."""

    #: "root" when the shell runs as uid 0, otherwise "shell".
    mode: Mode
    #: The shell's uid as ``id`` printed it.
    uid: int
    #: Upper-case ISO 3166 region for national numbers, if the device told us one.
    region: str | None
    #: True when reads go through ``su 1000`` (the system uid), which the SMS provider does
    #: not restrict: every type (outbox, failed, queued too) is visible. Root and the shell
    #: user both get the restricted view (``ProviderUtil.isAccessRestricted``).
    full_view: bool = False


def region_from_props(sim_country: str, locale: str) -> str | None:
    """Pick the region from ``gsm.sim.operator.iso-country`` or else ``persist.sys.locale``."""
    for candidate in sim_country.strip().split(","):
        if re.fullmatch(r"[A-Za-z]{2}", candidate.strip()):
            return candidate.strip().upper()
    match = re.fullmatch(r"[A-Za-z]{2,3}[-_](?:[A-Za-z]{4}[-_])?([A-Za-z]{2})", locale.strip())
    if match:
        return match.group(1).upper()
    return None


class Device:
    """An async handle on one phone over ADB/TCP.

    Use ``async with await Device.connect("host:port") as device:``. Each call to
    :meth:`run` is one ``shell:`` round trip (counted in :attr:`round_trips`). After a
    transport failure the handle reconnects on its next call.
    """

    def __init__(
        self,
        address: str,
        *,
        signer: Any,
        connect_timeout_s: float,
        command_timeout_s: float,
        default_region: str,
        read_as_system: bool = False,
    ) -> None:
        self.address = address
        self._read_as_system = read_as_system
        self._host, self._port = parse_address(address)
        self._signer = signer
        self._connect_timeout_s = connect_timeout_s
        self._command_timeout_s = command_timeout_s
        self._default_region = default_region
        self._transport: _EofAwareTransport | None = None
        self._adb: AdbDeviceAsync | None = None
        self._lock = asyncio.Lock()
        self._facts: DeviceFacts | None = None
        #: Shell round trips started on this handle (connect probes included).
        self.round_trips = 0
        #: Successful (re)connections made by this handle.
        self.connections = 0
        #: Highest ``_id`` known to exist on the phone (a proven anchor), 0 if none yet.
        self.known_max_id = 0

    @classmethod
    async def connect(
        cls,
        address: str,
        *,
        key_path: Path | str | None = None,
        connect_timeout_s: float = 5.0,
        command_timeout_s: float = 20.0,
        default_region: str = "US",
        read_as_system: bool = False,
    ) -> Device:
        """Connect, authenticate with the RSA key and read the device's facts (one round trip).

        ``read_as_system``: read the SMS provider through ``su 1000`` (userdebug and eng
        builds, e.g. an emulator's "Google APIs" image), which sees every message type; the
        connection is refused if ``su 1000 id`` does not run as uid 1000.

        Raises:
            KeyPermissionError: the private key has loose permissions.
            DeviceUnreachable: refused, timed out, authentication was refused, or
                ``read_as_system`` was asked of a device without a working ``su 1000``.
        """
        signer = load_signer(Path(key_path) if key_path is not None else None)
        device = cls(
            address,
            signer=signer,
            connect_timeout_s=connect_timeout_s,
            command_timeout_s=command_timeout_s,
            default_region=default_region,
            read_as_system=read_as_system,
        )
        await device._connect()
        try:
            facts = await device.facts()
        except BridgeError as exc:
            await device.close()
            raise DeviceUnreachable(f"{address}: connected but the shell did not answer") from exc
        if read_as_system and not facts.full_view:
            await device.close()
            raise DeviceUnreachable(
                f"{address}: `su 1000` does not run as the system uid there (it needs a"
                " userdebug or eng build); connect without reading as system"
            )
        return device

    @property
    def serial(self) -> str:
        """The device's name for the ledger: its ``host:port``."""
        return self.address

    async def __aenter__(self) -> Device:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection (idempotent)."""
        adb, self._adb, self._transport = self._adb, None, None
        if adb is not None:
            with contextlib.suppress(*_TRANSPORT_ERRORS):
                await adb.close()

    def _abort(self) -> None:
        """Drop the connection without waiting (usable while being cancelled)."""
        transport, self._adb, self._transport = self._transport, None, None
        writer = getattr(transport, "_writer", None) if transport is not None else None
        if writer is not None:
            writer.close()

    async def _connect(self) -> None:
        await self.close()
        transport = _EofAwareTransport(self._host, self._port)
        adb = AdbDeviceAsync(transport, default_transport_timeout_s=self._connect_timeout_s)
        try:
            async with asyncio.timeout(self._connect_timeout_s * 2):
                await adb.connect(
                    rsa_keys=[self._signer],
                    transport_timeout_s=self._connect_timeout_s,
                    auth_timeout_s=self._connect_timeout_s,
                    read_timeout_s=self._connect_timeout_s,
                )
        except _TRANSPORT_ERRORS as exc:
            with contextlib.suppress(*_TRANSPORT_ERRORS):
                await adb.close()
            _log.warning("adb_connect_failed", device=self.address, error=type(exc).__name__)
            raise DeviceUnreachable(
                f"{self.address}: could not connect and authenticate ({type(exc).__name__}: {exc})"
            ) from exc
        self._transport, self._adb = transport, adb
        self.connections += 1
        _log.info("adb_connected", device=self.address, connections=self.connections)

    async def reconnect(self) -> None:
        """Drop the connection and connect again.

        Raises:
            DeviceUnreachable: the device cannot be reached now.
        """
        await self._connect()

    async def shell(self, command: str) -> bytes:
        """Run ``command`` in one ``shell:`` round trip and return the raw bytes it printed.

        Reconnects first if the link is known dead: failing *there* is :class:`NotSent`.

        Raises:
            DeviceUnreachable: (re)connecting failed; the command was not written.
            NotSent: the command cannot be carried in one ADB packet.
            OutcomeUnknown: the command was written and then anything went wrong.
        """
        async with self._lock:
            if self._adb is None or self._transport is None or not self._transport.is_alive():
                await self._connect()
            adb = self._adb
            assert adb is not None
            encoded = command.encode("utf-8")
            limit = int(getattr(adb, "_maxdata", 0) or _LEGACY_MAX_PAYLOAD)
            if len(encoded) + len(b"shell:\0") > limit:
                raise NotSent(
                    f"command of {len(encoded)} bytes exceeds the device's ADB payload limit"
                    f" ({limit} bytes)"
                )
            self.round_trips += 1
            try:
                async with asyncio.timeout(self._command_timeout_s):
                    output: bytes = await adb.shell(
                        command,
                        transport_timeout_s=self._command_timeout_s,
                        read_timeout_s=self._command_timeout_s,
                        timeout_s=self._command_timeout_s,
                        decode=False,
                    )
            except asyncio.CancelledError:
                # The caller gave up mid-command: the link is in an unknown state.
                self._abort()
                raise
            except _TRANSPORT_ERRORS as exc:
                await self.close()
                _log.warning("adb_command_failed", device=self.address, error=type(exc).__name__)
                raise OutcomeUnknown(
                    f"{self.address}: the command was written but its outcome was not observed"
                    f" ({type(exc).__name__}: {exc})"
                ) from exc
            return output

    async def run(self, steps: Sequence[str]) -> tuple[StepOutput, ...]:
        """Run several commands in one framed round trip; return each one's output and ``$?``.

        Raises:
            DeviceUnreachable / NotSent: as :meth:`shell`, nothing ran.
            OutcomeUnknown: as :meth:`shell`.
            UnparseableOutput: the output is not UTF-8.
            IncompleteRead: a frame is missing (output truncated or garbled).
        """
        script = frame_script(steps)
        raw = await self.shell(script.command)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UnparseableOutput("device output is not valid UTF-8") from exc
        if f"{script.nonce}:0:begin\r\n" in text:
            # adbd runs shell:<cmd> in a PTY set to raw mode (no output translation;
            # services.cpp / shell_service.cpp), so \n arrives as \n. A PTY in cooked mode
            # (very old adbd) turns every \n into \r\n, frame lines included, which would make
            # line endings in bodies indistinguishable: refuse it.
            raise UnparseableOutput("device output comes through a PTY (\\r\\n line endings)")
        return script.split(text)

    async def facts(self) -> DeviceFacts:
        """Mode (shell/root) and region, read once per handle in one round trip."""
        if self._facts is None:
            commands = ["id", "getprop gsm.sim.operator.iso-country", "getprop persist.sys.locale"]
            if self._read_as_system:
                commands.append(f"{SYSTEM_PREFIX}id")
            steps = await self.run(commands)
            match = re.search(r"uid=(\d+)", steps[0].output)
            if match is None:
                raise UnparseableOutput("`id` did not print a uid")
            uid = int(match.group(1))
            region = region_from_props(steps[1].output, steps[2].output)
            full_view = self._read_as_system and bool(
                re.match(r"uid=1000\(", steps[3].output) and steps[3].exit_status == 0
            )
            self._facts = DeviceFacts(
                mode="root" if uid == 0 else "shell", uid=uid, region=region, full_view=full_view
            )
        return self._facts

    @property
    def content_prefix(self) -> str:
        """What goes before ``content query``: ``su 1000 `` for a full view, else nothing.

        Valid once :meth:`facts` has run (``connect`` runs it).
        """
        return SYSTEM_PREFIX if self._facts is not None and self._facts.full_view else ""

    async def region(self) -> str:
        """Region for national numbers: SIM country, else locale, else the configured default."""
        facts = await self.facts()
        return facts.region or self._default_region

    async def mode(self) -> Mode:
        """ "root" when the shell is uid 0, else "shell" (both read the restricted view)."""
        return (await self.facts()).mode

    async def full_view(self) -> bool:
        """True when reads see every SMS type (through ``su 1000``)."""
        return (await self.facts()).full_view
