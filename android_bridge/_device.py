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
import struct
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final, NoReturn

import attrs
from adb_shell import exceptions as adb_exceptions
from adb_shell.adb_device_async import AdbDeviceAsync
from adb_shell.transport.tcp_transport_async import TcpTransportAsync

from android_bridge._keys import default_key_path, load_signer
from android_bridge._log import get_logger
from android_bridge._records import Mode
from android_bridge._shell import StepOutput, frame_script
from android_bridge._usb import ThreadedTransport, usb_serial, usb_transport
from android_bridge.exceptions import (
    BridgeError,
    DeviceUnreachable,
    DeviceUnusable,
    NotSent,
    OutcomeUnknown,
    UnparseableOutput,
)

#: Runs a command as the system uid (``su`` on userdebug/eng builds: system/extras su).
SYSTEM_PREFIX = "su 1000 "
#: The payload limit of ADB protocol version 1 devices, used if the device announced none.
_LEGACY_MAX_PAYLOAD = 4096
#: adbd runs ``shell:COMMAND`` as ``/system/bin/sh -c COMMAND`` (packages/modules/adb
#: ``daemon/shell_service.cpp``, ``Subprocess::ForkAndExec``): the command is one argument
#: of one ``execve``, which Linux refuses (``E2BIG``) past ``MAX_ARG_STRLEN``, 32 pages of
#: 4 KiB, its NUL included (include/uapi/linux/binfmts.h).
MAX_ARG_STRLEN = 32 * 4096
#: An ADB message header: command, arg0, arg1, data length, data crc, magic (command ^ ~0).
_HEADER = struct.Struct("<6I")
#: What a device may answer our ``CNXN`` with (system/core/adb/protocol.txt).
_HANDSHAKE_REPLIES = frozenset({b"AUTH", b"CNXN"})
#: Failures that mean "no answer in time".
_TIMEOUTS: tuple[type[BaseException], ...] = (
    asyncio.TimeoutError,
    socket.timeout,
    adb_exceptions.AdbTimeoutError,
    adb_exceptions.TcpTimeoutException,
)

_log = get_logger("android_bridge.device")


def timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` (an :class:`OutcomeUnknown` from :meth:`Device.shell`) is a command
    that ran out of time, not a link that failed."""
    return isinstance(exc, OutcomeUnknown) and isinstance(exc.__cause__, _TIMEOUTS)


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
    it until its read timeout. A reset is what it is, so say so immediately. It also keeps
    what a failed connection needs to say why: whether TCP connected, and the first bytes
    the peer sent (an ADB header, or something else).
    """

    #: True once the TCP connection is up.
    tcp_connected = False
    #: The first bytes received (up to one ADB header).
    first_bytes = b""

    async def connect(self, transport_timeout_s: float | None) -> None:
        await super().connect(transport_timeout_s)
        self.tcp_connected = True

    async def bulk_read(self, numbytes: int, transport_timeout_s: float | None) -> bytes:
        data: bytes = await super().bulk_read(numbytes, transport_timeout_s)
        if numbytes and not data:
            raise ConnectionResetError("the device closed the connection")
        if len(self.first_bytes) < _HEADER.size:
            self.first_bytes += data[: _HEADER.size - len(self.first_bytes)]
        return data

    def spoke_adb(self) -> bool:
        """True when the first message received has an ADB handshake header."""
        if len(self.first_bytes) < _HEADER.size:
            return False
        command, _, _, _, _, magic = _HEADER.unpack(self.first_bytes)
        return self.first_bytes[:4] in _HANDSHAKE_REPLIES and magic == command ^ 0xFFFFFFFF

    def is_alive(self) -> bool:
        reader: asyncio.StreamReader | None = self._reader
        writer: asyncio.StreamWriter | None = self._writer
        return (
            reader is not None
            and writer is not None
            and not reader.at_eof()
            and not writer.is_closing()
        )


class HandshakeFailure(str):
    """Why a handshake cut short by a cancellation (a caller's deadline, an interrupt) could
    not have succeeded: the message of that ``CancelledError``. (The error itself must stay
    a plain ``CancelledError``: ``asyncio.timeout`` turns only that exact class into
    ``TimeoutError``.)"""

    __slots__ = ()


class NotAdbHandshake(HandshakeFailure):
    """A ``HandshakeFailure`` of a port that never spoke ADB: waiting does not mend it."""

    __slots__ = ()


def handshake_failure(error: BaseException) -> str | None:
    """Why a connection cut short by a deadline could not have succeeded anyway ("the phone
    has not authorised this key…", "not an ADB device…"), or None.

    ``error`` is the ``TimeoutError`` ``asyncio.timeout`` raised (its ``__cause__`` is the
    cancellation), or the cancellation itself.
    """
    for candidate in (error, error.__cause__):
        if isinstance(candidate, asyncio.CancelledError) and candidate.args:
            reason = candidate.args[0]
        else:
            reason = None
        if isinstance(reason, HandshakeFailure):
            return str(reason)
    return None


def handshake_lasting(error: BaseException) -> bool:
    """Did the connection cut short by a deadline reach a port that is not an ADB device
    (which waiting does not mend)? See ``handshake_failure``."""
    return any(
        isinstance(candidate, asyncio.CancelledError)
        and bool(candidate.args)
        and isinstance(candidate.args[0], NotAdbHandshake)
        for candidate in (error, error.__cause__)
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
    #: ``ro.build.version.sdk`` (None when it did not print a number).
    sdk: int | None = None
    #: ``ro.build.fingerprint``: one build of one device; an update changes it.
    build: str = ""
    #: True when ``service check isms`` found the framework's SMS service.
    isms: bool = False
    #: ``Settings.Secure.ANDROID_ID`` of user 0 as the shell reads it (``settings get secure
    #: android_id``): the device's own value (the per-app value apps see applies to app uids
    #: only; SettingsProvider ``getSecureSetting``), random at first boot, regenerated by a
    #: factory reset. None when it printed anything but hex digits (``null``: not generated).
    android_id: str | None = None
    #: ``ro.serialno`` (the shell may read it on 10 to 15: system/sepolicy ``shell.te``
    #: ``get_prop(shell, serialno_prop)``). Not unique on its own: every emulator of one
    #: version reports ``EMULATOR<ver>``, cheap phones ``0123456789ABCDEF``. "" when empty.
    serialno: str = ""

    @property
    def identity(self) -> str | None:
        """The phone's own identity (:func:`phone_identity`)."""
        return phone_identity(self.android_id, self.serialno)


def phone_identity(android_id: str | None, serialno: str) -> str | None:
    """A phone's own identity, the same whatever address reaches it: ``android_id:<hex>``
    where ``android_id`` could be read; else ``serialno:<s>`` for a serial that names one
    phone (not empty, not an emulator's, not a known placeholder); else None."""
    if android_id:
        return f"android_id:{android_id}"
    if serial_names_one_phone(serialno):
        return f"serialno:{serialno}"
    return None


#: Serials many phones share: placeholders of cheap builds, and "unknown".
_SHARED_SERIALS: Final = frozenset({"0123456789ABCDEF", "1234567890ABCDEF", "unknown", "0"})


def serial_names_one_phone(serial: str) -> bool:
    """Whether ``ro.serialno`` can tell this phone from others: not empty, not a placeholder
    many phones share, not an emulator's ``EMULATOR<ver>`` (the same for every emulator of
    one version)."""
    return (
        bool(re.fullmatch(r"[A-Za-z0-9._-]{4,64}", serial))
        and serial not in _SHARED_SERIALS
        and not serial.upper().startswith("EMULATOR")
    )


#: What the shell reads of the phone's identity: ``ANDROID_ID`` of user 0, ``ro.serialno``.
IDENTITY_READS: Final = ("settings get secure android_id 2>/dev/null", "getprop ro.serialno")


def _android_id(output: str) -> str | None:
    """``settings get secure android_id``'s answer: hex digits (``Long.toHexString``, so up
    to 16, leading zeros dropped), else None (``null``: not generated yet, or an error)."""
    value = output.strip().lower()
    return value if re.fullmatch(r"[0-9a-f]{1,16}", value) else None


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
        key_path: Path | None = None,
    ) -> None:
        self.address = address
        self._read_as_system = read_as_system
        #: the private key's file, named when the phone has not authorised it
        self._key_path = key_path
        #: the USB serial of a ``usb:SERIAL`` phone (None: ADB over TCP, ``host:port``)
        self._usb_serial = usb_serial(address)
        self._host, self._port = ("", 0) if self._usb_serial else parse_address(address)
        self._signer = signer
        self._connect_timeout_s = connect_timeout_s
        self._command_timeout_s = command_timeout_s
        self._default_region = default_region
        self._transport: _EofAwareTransport | ThreadedTransport | None = None
        self._adb: AdbDeviceAsync | None = None
        self._lock = asyncio.Lock()
        self._facts: DeviceFacts | None = None
        #: set when another phone answered at the address after a reconnect (for good)
        self._replaced: str | None = None
        #: Shell round trips started on this handle (connect probes included).
        self.round_trips = 0
        #: Successful (re)connections made by this handle.
        self.connections = 0
        #: Highest ``_id`` known to exist on the phone (a proven anchor), 0 if none yet.
        self.known_max_id = 0
        #: What the ``also`` steps of the first :meth:`facts` read printed, in order.
        self.first_outputs: tuple[StepOutput, ...] = ()

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
        also: Sequence[str] = (),
    ) -> Device:
        """Connect, authenticate with the RSA key and read the device's facts (one round trip).

        ``also``: more steps (reads) run in that same round trip; what they printed is in
        :attr:`first_outputs`, in order (a caller's own first reads, at no round trip more).

        ``read_as_system``: read the SMS provider through ``su 1000`` (userdebug and eng
        builds, e.g. an emulator's "Google APIs" image), which sees every message type; the
        connection is refused if ``su 1000 id`` does not run as uid 1000.

        Raises:
            KeyPermissionError: the private key has loose permissions (``KeyFileError``:
                the key file is unreadable or not a key, "bad key file PATH").
            DeviceUnreachable: refused, timed out, not an ADB device ("not an ADB device"),
                the phone has not authorised the key ("the phone has not authorised this
                key"), or ``read_as_system`` was asked of a device without a working
                ``su 1000``.
        """
        key_file = Path(key_path) if key_path is not None else default_key_path()
        signer = load_signer(key_file)
        device = cls(
            address,
            signer=signer,
            connect_timeout_s=connect_timeout_s,
            command_timeout_s=command_timeout_s,
            default_region=default_region,
            read_as_system=read_as_system,
            key_path=key_file,
        )
        await device._connect()
        try:
            facts = await device.facts(also=also)
        except BridgeError as exc:
            await device.close()
            raise DeviceUnreachable(f"{address}: connected but the shell did not answer") from exc
        if read_as_system and not facts.full_view:
            await device.close()
            raise DeviceUnusable(
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
        """Close the connection (idempotent), never waiting for bytes that cannot leave.

        adb-shell closes with ``StreamWriter.close`` then ``wait_closed``, and asyncio closes
        a socket only once its write buffer has drained: on a stalled link (the phone gone
        from the network without a reset, so nothing is acknowledged) a command whose write
        blocked would keep it waiting for ever. Such a connection is aborted instead, and
        the graceful close is bounded by the connect timeout.
        """
        adb, transport = self._adb, self._transport
        self._adb, self._transport = None, None
        if adb is None:
            return
        writer = getattr(transport, "_writer", None) if transport is not None else None
        stream = getattr(writer, "transport", None)
        if stream is not None and stream.get_write_buffer_size() > 0:
            _log.warning("adb_unsent_bytes_dropped", device=self.address)
            stream.abort()
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                await adb.close()
        except _TRANSPORT_ERRORS:  # asyncio.TimeoutError is TimeoutError
            if stream is not None:
                stream.abort()

    def _abort(self) -> None:
        """Drop the connection without waiting (usable while being cancelled). A connection
        with bytes still unsent (a write blocked on a stalled link) is aborted: closing it
        would keep its socket open until they leave, which may be never."""
        transport, self._adb, self._transport = self._transport, None, None
        writer = getattr(transport, "_writer", None) if transport is not None else None
        if writer is not None:
            if writer.transport.get_write_buffer_size() > 0:
                writer.transport.abort()
            else:
                writer.close()

    async def _connect(self) -> None:
        await self.close()
        transport = (
            usb_transport(self.address)
            if self._usb_serial
            else _EofAwareTransport(self._host, self._port)
        )
        adb = AdbDeviceAsync(transport, default_transport_timeout_s=self._connect_timeout_s)
        # adb-shell calls this just before it offers our public key, i.e. once the phone
        # refused every signature: from then on only a person tapping "Allow" lets us in.
        offered_key: list[bool] = []
        try:
            async with asyncio.timeout(self._connect_timeout_s * 2):
                await adb.connect(
                    rsa_keys=[self._signer],
                    transport_timeout_s=self._connect_timeout_s,
                    auth_timeout_s=self._connect_timeout_s,
                    read_timeout_s=self._connect_timeout_s,
                    auth_callback=lambda _device: offered_key.append(True),
                )
        except _TRANSPORT_ERRORS as exc:
            with contextlib.suppress(*_TRANSPORT_ERRORS):
                await adb.close()
            _log.warning("adb_connect_failed", device=self.address, error=type(exc).__name__)
            why = f"{self.address}: {self._why_not_connected(transport, bool(offered_key), exc)}"
            if self._not_adb(transport, bool(offered_key)):
                raise DeviceUnusable(why) from exc
            raise DeviceUnreachable(why) from exc
        except asyncio.CancelledError as exc:
            # The caller's deadline (or an interrupt) cut the handshake short. Stay cancelled,
            # but when the handshake already showed why it cannot succeed, say so in the
            # cancellation: a caller turning its deadline into an error finds it as the
            # TimeoutError's __cause__ (``handshake_failure``).
            writer = getattr(transport, "_writer", None)
            if writer is not None:
                writer.close()
            if offered_key or (
                isinstance(transport, _EofAwareTransport)
                and transport.tcp_connected
                and not transport.spoke_adb()
            ):
                why = self._why_not_connected(transport, bool(offered_key), exc)
                not_adb = self._not_adb(transport, bool(offered_key))
                failure = NotAdbHandshake if not_adb else HandshakeFailure
                raise asyncio.CancelledError(failure(f"{self.address}: {why}")) from exc
            raise
        self._transport, self._adb = transport, adb
        self.connections += 1
        _log.info("adb_connected", device=self.address, connections=self.connections)
        if self._facts is not None and self._facts.identity is not None:
            await self._same_phone_again(adb)

    async def _same_phone_again(self, adb: AdbDeviceAsync) -> None:
        """After a reconnect: the phone at this address must still be the one this handle
        read at first (its identity, :attr:`DeviceFacts.identity`). A wiped or replaced phone
        at the same address is another phone; its rows and fence are not the first one's, so
        this handle refuses it for good (a new handle reads the new phone). One round trip,
        on reconnects only.

        Raises:
            DeviceUnreachable: another phone answers now (for good), or its identity could not
                be read now (booting: the next call tries again); nothing was run.
        """
        known = self._facts.identity if self._facts is not None else None
        android_id, serialno = IDENTITY_READS
        read = f'echo "A:$({android_id})"; echo "S:$({serialno})"'
        try:
            async with asyncio.timeout(self._command_timeout_s):
                output: bytes = await adb.shell(
                    read,
                    transport_timeout_s=self._command_timeout_s,
                    read_timeout_s=self._command_timeout_s,
                    timeout_s=self._command_timeout_s,
                    decode=False,
                )
        except _TRANSPORT_ERRORS as exc:  # asyncio.TimeoutError is TimeoutError
            await self.close()
            raise DeviceUnreachable(
                f"{self.address}: reconnected, but could not read which phone answers"
                f" ({type(exc).__name__}: {exc}); nothing was run"
            ) from exc
        self.round_trips += 1
        said = dict(
            line.split(":", 1)
            for line in output.decode("utf-8", "replace").splitlines()
            if line[:2] in ("A:", "S:")
        )
        identity = phone_identity(_android_id(said.get("A", "")), said.get("S", "").strip()[:64])
        if identity == known:
            return
        await self.close()
        if identity is None:
            raise DeviceUnreachable(
                f"{self.address}: reconnected, but the phone's identity could not be read"
                " (still booting?); nothing was run"
            )
        self._refuse_phone(identity)

    def _refuse_phone(self, identity: str) -> NoReturn:
        """Another phone (``identity``) answers at the address: refuse it for good.

        Raises:
            DeviceUnusable: always.
        """
        known = self._facts.identity if self._facts is not None else None
        self._replaced = (
            f"{self.address}: another phone answers here now ({identity}, not {known}:"
            " wiped, reset or replaced); this connection no longer uses it (connect again to"
            " use the new phone, under its own name)"
        )
        _log.warning("adb_phone_replaced", device=self.address)
        raise DeviceUnusable(self._replaced)

    async def check_identity(self, android_id_output: str, serialno_output: str) -> bool:
        """Judge an identity read on this connection (the outputs of
        :data:`IDENTITY_READS`, run by the caller in a round trip of its own) against the one
        this handle read first: True when it is the same phone, False when it cannot tell
        (no identity known, or none read). Another phone is refused for good, as on a
        reconnect (:meth:`replaced`), and the connection is closed.

        Raises:
            DeviceUnusable: another phone answers at the address now.
        """
        known = self._facts.identity if self._facts is not None else None
        identity = phone_identity(_android_id(android_id_output), serialno_output.strip()[:64])
        if known is None or identity is None:
            return False
        if identity == known:
            return True
        await self.close()
        self._refuse_phone(identity)

    @staticmethod
    def _not_adb(transport: Any, offered_key: bool) -> bool:
        """The port took the connection but never spoke ADB (``_why_not_connected`` says
        "not an ADB device")."""
        return (
            not offered_key
            and isinstance(transport, _EofAwareTransport)
            and not transport.spoke_adb()
            and transport.tcp_connected
        )

    def _why_not_connected(self, transport: Any, offered_key: bool, exc: BaseException) -> str:
        """Say which step of the handshake failed, in words a user can act on."""
        if offered_key:
            # adbd shows the "Allow USB debugging?" dialog and answers only once it is tapped.
            return (
                "the phone has not authorised this key: allow it on the phone; key:"
                f" {self._key_path or default_key_path()} (tick 'Always allow' in the phone's"
                " dialog, then try again)"
            )
        if not isinstance(transport, _EofAwareTransport) or transport.spoke_adb():
            return f"could not connect and authenticate ({type(exc).__name__}: {exc})"
        if not transport.tcp_connected:
            return f"could not connect ({type(exc).__name__}: {exc})"
        if transport.first_bytes:
            return (
                f"not an ADB device: it answered {transport.first_bytes[:16]!r}, not the ADB"
                " protocol (is this the phone's adb port, 5555 by default?)"
            )
        if isinstance(exc, asyncio.CancelledError):
            return (
                "not an ADB device: the port accepted the connection but nothing answered the"
                " ADB handshake"
            )
        if isinstance(exc, _TIMEOUTS):
            return (
                "not an ADB device: the port accepted the connection but nothing answered the"
                f" ADB handshake within {self._connect_timeout_s:g} s"
            )
        return (
            "not an ADB device: the port accepted the connection and closed it without an ADB"
            f" handshake ({type(exc).__name__}: {exc})"
        )

    async def reconnect(self) -> None:
        """Drop the connection and connect again, once the command under way (if any) ends.

        Under the handle's lock, as every use of the connection is: adb-shell cannot carry two
        streams at once on one connection (see :meth:`shell`).

        Raises:
            DeviceUnreachable: the device cannot be reached now.
        """
        async with self._lock:
            await self._connect()

    async def shell(self, command: str) -> bytes:
        """Run ``command`` in one ``shell:`` round trip and return the raw bytes it printed.

        Reconnects first if the link is known dead: failing *there* is :class:`NotSent`.

        Raises:
            DeviceUnreachable: (re)connecting failed; the command was not written.
            NotSent: the command cannot be carried in one ADB packet, or is longer than one
                ``execve`` argument may be (``MAX_ARG_STRLEN``).
            OutcomeUnknown: the command was written and then anything went wrong.
        """
        # One stream at a time per connection: adb-shell's packet store (0.4.4,
        # ``hidden_helpers._AdbPacketStore.put``) drops a CLSE that another stream's read
        # takes off the wire when it holds no packet yet for the stream it closes, and the
        # command then waits out its timeout (issue 38).
        task = asyncio.current_task()
        cancels = task.cancelling() if task is not None else 0
        async with self._lock:
            if self._replaced is not None:
                raise DeviceUnusable(self._replaced)
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
            if len(encoded) + 1 > MAX_ARG_STRLEN:
                # the shell would never start: execve fails with E2BIG before anything runs
                raise NotSent(
                    f"command of {len(encoded)} bytes exceeds the {MAX_ARG_STRLEN - 1} bytes"
                    " one argument may hold (Linux MAX_ARG_STRLEN): nothing was run"
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
                if task is not None and task.cancelling() > cancels:
                    # A cancellation (a Ctrl-C, a caller's deadline) came while connecting
                    # or while the command ran, and was swallowed on the way: Python 3.11's
                    # ``asyncio.wait_for``, with which adb-shell reads each packet, returns a
                    # read that completed as the cancellation arrived (cpython gh-86296).
                    # It is kept here.
                    raise asyncio.CancelledError
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

    async def run(self, steps: Sequence[str], *, one_write: bool = False) -> tuple[StepOutput, ...]:
        """Run several commands in one framed round trip; return each one's output and ``$?``.

        ``one_write``: the phone prints the whole output at once, in one ADB packet (for
        scripts that only read: :func:`~android_bridge._shell.frame_script`).

        Raises:
            DeviceUnreachable / NotSent: as :meth:`shell`, nothing ran.
            OutcomeUnknown: as :meth:`shell`.
            UnparseableOutput: the output is not UTF-8.
            IncompleteRead: a frame is missing (output truncated or garbled).
        """
        script = frame_script(steps, one_write=one_write)
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

    async def facts(self, *, also: Sequence[str] = ()) -> DeviceFacts:
        """Mode (shell/root), region, release, build, the ``isms`` service and the phone's
        identity (``android_id``, ``ro.serialno``), read once per handle in one round trip.
        ``also``: more steps for that round trip, when it is made now (their outputs go to
        :attr:`first_outputs`; ignored once the facts are known)."""
        if self._facts is None:
            commands = [
                "id",
                "getprop gsm.sim.operator.iso-country",
                "getprop persist.sys.locale",
                "getprop ro.build.version.sdk",
                "getprop ro.build.fingerprint",
                "service check isms",
                *IDENTITY_READS,
            ]
            if self._read_as_system:
                commands.append(f"{SYSTEM_PREFIX}id")
            own = len(commands)
            steps = await self.run([*commands, *also])
            self.first_outputs = steps[own:]
            match = re.search(r"uid=(\d+)", steps[0].output)
            if match is None:
                raise UnparseableOutput("`id` did not print a uid")
            uid = int(match.group(1))
            region = region_from_props(steps[1].output, steps[2].output)
            full_view = self._read_as_system and bool(
                re.match(r"uid=1000\(", steps[8].output) and steps[8].exit_status == 0
            )
            sdk = steps[3].output.strip()
            self._facts = DeviceFacts(
                mode="root" if uid == 0 else "shell",
                uid=uid,
                region=region,
                full_view=full_view,
                sdk=int(sdk) if sdk.isdigit() and len(sdk) < 6 else None,
                build=steps[4].output.strip()[:300],
                # frameworks/native cmds/service/service.cpp prints exactly this when found
                isms=steps[5].output.strip() == "Service isms: found",
                android_id=_android_id(steps[6].output) if steps[6].exit_status == 0 else None,
                serialno=steps[7].output.strip()[:64],
            )
        return self._facts

    @property
    def replaced(self) -> str | None:
        """Why this handle no longer uses the phone at its address (another phone answered
        there after a reconnect: wiped, reset or replaced); None while it does. For good:
        connect again."""
        return self._replaced

    @property
    def cached_facts(self) -> DeviceFacts | None:
        """What :meth:`facts` read, without a round trip (None before it has run)."""
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
