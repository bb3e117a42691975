"""One ADB connection as adbd serves it: CNXN, AUTH, then streams (OPEN/OKAY/WRTE/CLSE).

Services, as adbd's ``ShellService`` parses them (``shell[,arg1,arg2,...]:command``;
system/core ``adb/daemon/services.cpp`` android-10.0.0_r1, packages/modules/adb
``daemon/services.cpp`` android-11 to 15):

- ``shell:<command>`` and ``exec:<command>`` (no shell protocol): stdout and stderr merged
  into one byte stream, no exit status. adbd runs the command in a PTY set to raw mode
  (``cfmakeraw``: no ``\r\n`` translation, no echo) precisely so that closing the stream
  hangs the script up: "If we aren't using the shell protocol we must allocate a PTY to
  properly close the subprocess. PTYs automatically send SIGHUP to the slave-side process when
  the master side of the PTY closes" (``StartSubprocess``/``Subprocess::Subprocess`` in
  ``shell_service.cpp``, same text from android-10.0.0_r1 to 15).
- ``shell,v2[,raw|pty][,TERM=…]:<command>`` (the shell protocol, ``shell_protocol.h``): the
  stream carries packets ``[id: u8][length: u32 LE][data]``: 0 stdin, 1 stdout, 2 stderr,
  3 exit (one byte), 4 close stdin, 5 window size. stdout and stderr stay apart and the exit
  status arrives before CLSE. Without ``pty`` the command's stdin/stdout and its stderr are
  two Unix socket pairs (``CreateSocketpair``). When the stream dies adbd itself sends
  SIGHUP to the script's ``sh`` (``kill(pid_, SIGHUP)``), then closes its ends of both
  sockets (``Subprocess::PassDataStreams``: "protocol FD died, sending SIGHUP to pid";
  system/core ``adb/daemon/shell_service.cpp`` android-10.0.0_r30 and 11.0.0_r1,
  packages/modules/adb ``daemon/shell_service.cpp`` unchanged from 2020-05-19 to branch
  15-qpr2 in GrapheneOS's mirror): a later write raises SIGPIPE, which kills the writer.

Either way, when the connection or the stream goes, the script is hung up
(``_shell.Session``): its terminal's writes fail (``EIO`` on a PTY; ``EPIPE`` and SIGPIPE on
the shell protocol's sockets), and its ``sh`` gets SIGHUP. A script that does not ignore
SIGHUP stops where it stands: the command running at that moment has done whatever it did,
and no later command starts. One that ignores it (``trap '' HUP``) runs on to its end on the
phone, its output lost (with the shell protocol, up to its first builtin that writes to
stdout or stderr, which SIGPIPE kills). Only a SIGKILL ends every script (adbd restarting,
a reboot: the phone does that, not the connection). Output travels as the script runs, in
WRTE packets each acknowledged by an OKAY before the next, as adbd's flow control requires
(what the script wrote meanwhile goes out together in the next; the script itself blocks
only once its terminal's buffer is full), then CLSE. An interactive shell (no command) is
not modelled: the OPEN is refused. A malformed packet closes this connection only.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import secrets
import socket
import struct
from collections.abc import Callable
from typing import Final, Protocol

from android_bridge._log import get_logger
from android_bridge.simulator import _wire
from android_bridge.simulator._auth import AuthorizedKeys, InvalidPublicKey
from android_bridge.simulator._shell import (
    STDOUT_IS_TERMINAL,
    OutputFn,
    ScriptKilled,
    Session,
    TerminalHungUp,
)

log = get_logger("android_bridge.simulator")

#: How long to wait for a client's OKAY before giving up on a stream.
_ACK_TIMEOUT_S: Final = 60.0
#: How much of a script's output waits for adbd before the script's next write blocks: the
#: pty's buffer (``tty_buffer_set_limit(port, 8192)`` for each side in ``drivers/tty/pty.c``,
#: Android common kernels 4.14 to 6.6). Kept at that for the shell protocol's socketpair too,
#: whose buffer is larger: a script blocked sooner is never kinder.
_TERMINAL_BUFFER: Final = 8192

#: The receive buffer of the phone's ADB sockets (``SO_RCVBUF`` on the listening socket,
#: inherited by every connection it accepts; Linux doubles it). On a real network a stalled
#: link delivers nothing: the client's bytes wait unacknowledged in its own send buffer, and
#: its writes block once that is full. Loopback delivers them to this socket whether or not
#: the phone reads it, up to the window it advertised (64 KiB and more by default, autotuned
#: to MiBs), so it is kept small from the start: a window shrunk only once the link stalls
#: would leave the client's kernel waiting on its persist timer after the link comes back.
#: Only a client's uploads (commands, OKAYs) cross it; the phone's output is bounded by the
#: client's own receive buffer.
RECEIVE_BUFFER: Final = 8192


def listening_socket(host: str, port: int) -> socket.socket:
    """The socket adbd listens on: ``host:port`` (0: any free port), its receive buffer
    ``RECEIVE_BUFFER`` so that a stalled connection holds almost nothing of a client's.

    Made with ``IPPROTO_TCP`` named (``socket.create_server`` leaves the protocol 0): asyncio
    sets ``TCP_NODELAY`` on an accepted connection only when its socket says TCP, and
    without it each small reply waits on the client's delayed ACK (Nagle): 44 ms a round
    trip on loopback instead of well under one.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
        sock.bind((host, port))
        sock.listen()
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


#: Shell protocol packet ids (``shell_protocol.h``, ``ShellProtocol::Id``).
SHELL_ID_STDIN: Final = 0
SHELL_ID_STDOUT: Final = 1
SHELL_ID_STDERR: Final = 2
SHELL_ID_EXIT: Final = 3
SHELL_ID_CLOSE_STDIN: Final = 4
SHELL_ID_WINDOW_SIZE_CHANGE: Final = 5
_SHELL_PACKET_HEADER: Final = struct.Struct("<BI")

#: The shell service argument that selects the shell protocol (``kShellServiceArgShellProtocol``).
SHELL_ARG_PROTOCOL: Final = "v2"

#: The features this daemon announces in its CNXN banner. adbd announces its
#: ``supported_features()`` (``transport.cpp``): ``shell_v2`` at every release from Android 7
#: on, so at every tag from android-10.0.0_r1 to 15, next to ``cmd``, ``stat_v2``, ``ls_v2``,
#: ``fixed_push_mkdir``, ``apex``, ``abb``, ``fixed_push_symlink_timestamp``, ``abb_exec``,
#: ``remount_shell`` and, in later releases, ``track_app``, ``sendrecv_v2*`` and
#: ``delayed_ack``. Only ``shell_v2`` is announced here, because only it is served: every other
#: feature makes a client use a service or a packet form this daemon does not have (``sync:``
#: v2 for push/pull/ls, ``abb:``/``abb_exec:`` and ``cmd`` for install, remount,
#: ``track-app``, OPEN with a delayed-ack window), and none of them is needed to connect, run
#: ``shell:``/``shell,v2:`` commands or read the SMS provider. A client seeing ``shell_v2``
#: uses ``shell,v2:`` (Google's ``adb shell`` then returns the command's exit status);
#: adb-shell ignores features and keeps using ``shell:``.
DEVICE_FEATURES: Final = ("shell_v2",)

#: The longest single ``execve`` argument Linux takes, terminating NUL included
#: (``MAX_ARG_STRLEN``: 32 pages of 4 KiB, ``include/uapi/linux/binfmts.h``). adbd runs every
#: ``shell:``, ``shell,v2:`` and ``exec:`` command as ``execle("/system/bin/sh", "sh", "-c",
#: command)`` in a forked child (``Subprocess::ForkAndExec``, ``adb/daemon/shell_service.cpp``,
#: read in system/core at commit 238e2abc, before adb moved to packages/modules/adb, whose
#: copy is not checked here; Linux refuses the exec whatever adbd does), so a longer command
#: never starts: the child writes ``exec '/system/bin/sh' failed: <strerror(E2BIG)>`` to the
#: error pipe and ``ReportError`` gives the client ``error: <that>\n`` (on the shell protocol
#: as a stderr packet, then exit status 126), then the stream closes. The ADB payload (up to
#: 1 MiB) is no bound: such a command reaches adbd and fails there.
MAX_ARG_STRLEN: Final = 32 * 4096
#: What bionic's ``strerror(E2BIG)`` prints.
_E2BIG_TEXT: Final = "Argument list too long"


def shell_packet(packet_id: int, data: bytes) -> bytes:
    """One shell protocol packet: id byte, little-endian u32 length, data."""
    return _SHELL_PACKET_HEADER.pack(packet_id, len(data)) + data


class StreamHost(Protocol):
    """What a connection needs from the phone."""

    @property
    def banner(self) -> str:
        """The CNXN banner sent once a client is authorized."""
        ...

    @property
    def allow_new_keys(self) -> bool:
        """Whether an unknown key offered by a client is accepted (the user taps "Allow")."""
        ...

    @property
    def authorized_keys(self) -> AuthorizedKeys:
        """The phone's ``adb_keys``."""
        ...

    async def run_shell(
        self, command: str, connection: Connection, output: OutputFn, session: Session
    ) -> int:
        """Run one shell command line in ``session``, streaming (fd, text) to ``output``;
        return its status.

        Raises:
            ScriptKilled: the script is gone (hung up without ignoring SIGHUP, or killed).
        """
        ...


class _Stream:
    def __init__(
        self, local_id: int, remote_id: int, *, shell_protocol: bool, session: Session
    ) -> None:
        self.local_id = local_id
        self.remote_id = remote_id
        #: ``shell,v2:``: output framed in shell protocol packets, exit status sent.
        self.shell_protocol = shell_protocol
        #: The script's session: its terminal, and what a hang-up did to it.
        self.session = session
        self.acked = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.closed = False
        #: The script's output adbd has not sent yet (its PTY or socketpair), in the
        #: pieces it was written in, and the task sending it (``Connection._pump``).
        self.pending: collections.deque[bytes] = collections.deque()
        self.pending_bytes = 0
        self.pump: asyncio.Task[None] | None = None
        #: Set whenever the pending output is at most ``_TERMINAL_BUFFER`` bytes.
        self.room = asyncio.Event()
        self.room.set()

    def hang_up(self) -> None:
        """adbd closes the stream's PTY master (or, with the shell protocol, sends SIGHUP to
        the ``sh`` and closes its sockets, ``PassDataStreams``): the script's terminal is hung
        up; a script that does not ignore SIGHUP stops (its task is cancelled, or, from
        inside it, stops at its next step boundary), one that ignores it runs on (see
        ``_shell.Session``)."""
        self.session.hang_up()
        self.acked.set()  # a write waiting for the client's OKAY fails now
        self.pending.clear()  # what the terminal held is lost with it
        self.pending_bytes = 0
        self.room.set()
        gone = self.session.killed or self.session.finished
        if gone and self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()


class Connection:
    """Serves one TCP connection until the peer leaves, misbehaves, or the phone drops it."""

    def __init__(
        self,
        host: StreamHost,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        on_close: Callable[[Connection], None],
    ) -> None:
        self._host = host
        self._reader = reader
        self._writer = writer
        self._on_close = on_close
        self._version = _wire.VERSION_CHECKSUMMED
        self._max_payload = _wire.MAX_PAYLOAD_V1
        self._online = False
        self._token = b""
        self._streams: dict[int, _Stream] = {}
        self._next_local_id = 1
        self._write_lock = asyncio.Lock()
        self._closed = False
        #: Set while the link carries packets; cleared while it is stalled (``stall``).
        self._flowing = asyncio.Event()
        self._flowing.set()
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._log = log.bind(peer=self.peer)

    @property
    def online(self) -> bool:
        """Whether the peer has authenticated."""
        return self._online

    @property
    def stalled(self) -> bool:
        """Whether the link is stalled (``stall``) and not resumed."""
        return not self._flowing.is_set()

    def stall(self) -> None:
        """The link stalls, as when a phone drops off Wi-Fi without a reset, or a path stops
        carrying packets: nothing more goes either way. The phone neither reads what the
        client writes (the socket is no longer read, and its receive buffer is small:
        ``RECEIVE_BUFFER``, so the client's bytes wait in the client's own buffers and its
        writes block once they are full, as a TCP sender's do when nothing is acknowledged)
        nor sends anything (replies, OKAYs, CLSEs wait). Scripts on the phone run on as they would:
        their output waits with adbd. Until ``resume`` or ``abort``; a TCP connection whose
        peer never answers is the client's to give up.
        """
        if self._closed or self.stalled:
            return
        self._flowing.clear()
        transport = self._writer.transport
        if isinstance(transport, asyncio.ReadTransport):
            with contextlib.suppress(Exception):
                transport.pause_reading()
        self._log.info("adb_link_stalled")

    def resume(self) -> None:
        """The stalled link carries packets again: what waited on either side goes through
        (TCP retransmits what was not acknowledged)."""
        if self._closed or not self.stalled:
            return
        transport = self._writer.transport
        if isinstance(transport, asyncio.ReadTransport):
            with contextlib.suppress(Exception):
                transport.resume_reading()
        self._flowing.set()
        self._log.info("adb_link_resumed")

    async def serve(self) -> None:
        """Read packets until EOF or a protocol violation, then close."""
        try:
            while not self._closed:
                # a stalled link delivers nothing: not even what the reader already holds
                await self._flowing.wait()
                raw = await self._reader.readexactly(_wire.HEADER_SIZE)
                header = _wire.decode_header(raw, self._max_payload)
                payload = b""
                if header.data_length:
                    payload = await self._reader.readexactly(header.data_length)
                checksummed = (
                    header.arg0 < _wire.VERSION_SKIP_CHECKSUM
                    if header.command == _wire.A_CNXN
                    else self._version < _wire.VERSION_SKIP_CHECKSUM
                )
                if checksummed and payload and _wire.checksum(payload) != header.data_check:
                    raise _wire.MalformedPacket(f"bad checksum on {header.name}")
                await self._flowing.wait()
                if self._closed:
                    break
                await self._handle(header, payload)
        except (asyncio.IncompleteReadError, ConnectionError):
            self._log.debug("adb_peer_disconnected")
        except _wire.MalformedPacket as exc:
            self._log.warning("adb_malformed_packet", reason=str(exc))
        finally:
            self.abort()

    def abort(self, *, reset: bool = False) -> None:
        """Close the connection now: hang up every stream's script (adbd closes their PTYs
        once the transport is offline: ``handle_offline``, ``close_all_sockets``) and close
        the socket unanswered. Killing the scripts is the phone's business (a reboot, adbd
        restarting), not the connection's.

        With ``reset`` the socket is closed with a TCP RST (SO_LINGER 0), so the peer sees
        ``ECONNRESET`` at once, as when a phone drops off the network or reboots.
        """
        if self._closed:
            return
        self._closed = True
        self._flowing.set()  # whatever waited for the link fails now (the socket is gone)
        if reset:
            sock = self._writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        streams = list(self._streams.values())
        self._streams.clear()
        for stream in streams:
            stream.hang_up()
        transport = self._writer.transport
        with contextlib.suppress(Exception):
            transport.abort()
        self._on_close(self)

    async def _send(self, command: int, arg0: int, arg1: int, payload: bytes = b"") -> None:
        if self._closed:
            raise ConnectionResetError("connection closed")
        packet = _wire.encode_packet(
            command,
            arg0,
            arg1,
            payload,
            with_checksum=self._version < _wire.VERSION_SKIP_CHECKSUM,
        )
        async with self._write_lock:
            await self._flowing.wait()  # a stalled link sends nothing
            if self._closed:
                raise ConnectionResetError("connection closed")
            self._writer.write(packet)
            await self._writer.drain()

    async def _handle(self, header: _wire.Header, payload: bytes) -> None:
        command = header.command
        if command == _wire.A_CNXN:
            await self._on_connect(header, payload)
        elif command == _wire.A_AUTH:
            await self._on_auth(header, payload)
        elif not self._online:
            return
        elif command == _wire.A_OPEN:
            await self._on_open(header, payload)
        elif command == _wire.A_OKAY:
            stream = self._streams.get(header.arg1)
            if stream is not None and stream.remote_id == header.arg0:
                stream.acked.set()
        elif command == _wire.A_WRTE:
            stream = self._streams.get(header.arg1)
            if stream is not None and stream.remote_id == header.arg0:
                # The simulated commands read no stdin (nor, with the shell protocol, window
                # sizes or close-stdin packets), but every WRTE is acknowledged.
                await self._send(_wire.A_OKAY, stream.local_id, stream.remote_id)
        elif command == _wire.A_CLSE:
            # adbd closes only the socket both ids name (``find_local_socket(arg1, arg0)``,
            # arg0 0 matching any peer); a CLSE naming another peer is ignored and the
            # stream runs on (adb.cpp ``handle_packet``, sockets.cpp ``find_local_socket``:
            # read in GrapheneOS's mirror of packages/modules/adb, its history from 2019 to
            # branch 15-qpr2, not at AOSP tags)
            stream = self._streams.get(header.arg1)
            if stream is not None and header.arg0 in (0, stream.remote_id):
                del self._streams[header.arg1]
                stream.closed = True
                stream.hang_up()
                await self._send(_wire.A_CLSE, stream.local_id, stream.remote_id)

    async def _on_connect(self, header: _wire.Header, payload: bytes) -> None:
        # a new CNXN: adbd takes the transport offline first (``handle_offline``), which
        # closes every stream of the old one
        streams = list(self._streams.values())
        self._streams.clear()
        for stream in streams:
            stream.hang_up()
        self._online = False
        self._version = min(header.arg0, _wire.DEVICE_VERSION)
        self._max_payload = max(_wire.MAX_PAYLOAD_V1, min(header.arg1, _wire.MAX_PAYLOAD))
        self._log.debug("adb_cnxn", version=hex(header.arg0), max_payload=header.arg1)
        await self._send_token()

    async def _send_token(self) -> None:
        self._token = secrets.token_bytes(_wire.TOKEN_SIZE)
        await self._send(_wire.A_AUTH, _wire.AUTH_TOKEN, 0, self._token)

    async def _on_auth(self, header: _wire.Header, payload: bytes) -> None:
        if self._online or not self._token:
            return
        if header.arg0 == _wire.AUTH_SIGNATURE:
            key = self._host.authorized_keys.verify(self._token, payload)
            if key is None:
                self._log.info("adb_auth_rejected")
                await self._send_token()
                return
            await self._go_online()
        elif header.arg0 == _wire.AUTH_RSAPUBLICKEY:
            if not self._host.allow_new_keys:
                # Nobody taps "Allow": the phone stays silent and the client times out.
                self._log.info("adb_new_key_ignored")
                return
            line = payload.split(b"\0", 1)[0].decode("utf-8", "replace")
            try:
                self._host.authorized_keys.add(line)
            except InvalidPublicKey as exc:
                self._log.warning("adb_new_key_invalid", reason=str(exc))
                return
            self._log.info("adb_new_key_allowed")
            await self._go_online()
        else:
            raise _wire.MalformedPacket(f"unknown AUTH type {header.arg0}")

    async def _go_online(self) -> None:
        self._online = True
        self._log.info("adb_client_authorized")
        await self._send(
            _wire.A_CNXN, _wire.DEVICE_VERSION, self._max_payload, self._host.banner.encode()
        )

    async def _on_open(self, header: _wire.Header, payload: bytes) -> None:
        remote_id = header.arg0
        if remote_id == 0:
            return
        if header.arg1 != 0:
            # Delayed acks were not advertised; adbd refuses such an OPEN.
            await self._send(_wire.A_CLSE, 0, remote_id)
            return
        destination = payload.rstrip(b"\0").decode("utf-8", "replace")
        service, _, command = destination.partition(":")
        name, *arguments = service.split(",")
        if name not in ("shell", "exec") or not command:
            await self._send(_wire.A_CLSE, 0, remote_id)
            return
        # adbd ignores shell arguments it does not know ("not an error to allow for future
        # expansion"); ``exec:`` takes none and never speaks the shell protocol.
        shell_protocol = name == "shell" and SHELL_ARG_PROTOCOL in arguments
        local_id = self._next_local_id
        self._next_local_id = self._next_local_id + 1 if self._next_local_id < 0xFFFFFFFF else 1
        # Without the shell protocol adbd runs the command in a PTY it hangs up by closing
        # ("StartSubprocess": raw + no protocol -> kPty, make_pty_raw; exec: reaches it as
        # kRaw too); with it, in pipes (unless it asks for a pty) and adbd sends SIGHUP
        # itself.
        pipes = shell_protocol and "pty" not in arguments
        stream = _Stream(
            local_id,
            remote_id,
            shell_protocol=shell_protocol,
            session=Session(terminal="pipes" if pipes else "pty"),
        )
        self._streams[local_id] = stream
        await self._send(_wire.A_OKAY, local_id, remote_id)
        # The legacy shell:<command> runs in a PTY (raw mode, services.cpp ShellService), as
        # do exec:<command> (services.cpp: StartSubprocess(kRaw, kNone), which
        # shell_service.cpp turns into "a PTY in raw mode": system/core adb/ at
        # android-10.0.0_r30 and 11.0.0_r1, packages/modules/adb 12.0.0_r1 to 15.0.0_r1) and
        # shell,v2,pty:; only shell,v2: uses pipes. A PTY makes stdout (and stdin) a
        # terminal for the command (toybox ls then prints columns, rm asks before read-only
        # files).
        terminal = not pipes
        if len(payload.rstrip(b"\0").partition(b":")[2]) + 1 > MAX_ARG_STRLEN:
            stream.task = asyncio.create_task(self._refuse_exec(stream))
            return
        stream.task = asyncio.create_task(self._run_stream(stream, command, terminal=terminal))

    async def _refuse_exec(self, stream: _Stream) -> None:
        """What adbd sends when ``execle`` of the shell fails with ``E2BIG``: nothing ran."""
        text = f"error: exec '/system/bin/sh' failed: {_E2BIG_TEXT}\n".encode()
        try:
            if stream.shell_protocol:
                text = shell_packet(SHELL_ID_STDERR, text) + shell_packet(SHELL_ID_EXIT, b"\x7e")
            await self._write(stream, text)
            if not stream.closed:
                stream.closed = True
                self._streams.pop(stream.local_id, None)
                await self._send(_wire.A_CLSE, stream.local_id, stream.remote_id)
        except (ConnectionError, TimeoutError):
            self.abort()

    def _enqueue(self, stream: _Stream, data: bytes) -> None:
        """Hand ``data`` to adbd: it goes out with what else is pending (``_pump``)."""
        if stream.closed or not data:
            return
        stream.pending.append(data)
        stream.pending_bytes += len(data)
        if stream.pending_bytes > _TERMINAL_BUFFER:
            stream.room.clear()
        if stream.pump is None or stream.pump.done():
            stream.pump = asyncio.create_task(self._pump(stream))

    async def _pump(self, stream: _Stream) -> None:
        """adbd's side of a stream: what the script wrote since the last WRTE goes out as
        one more, up to the max payload, once the client acknowledged the last one
        (``local_socket_event_func`` reads the subprocess's fd only while the peer is
        ready: ``sockets.cpp``, android-10.0.0_r1 to 15.0.0_r1, flow control without
        ``delayed_ack``, which this daemon does not announce). A shell protocol packet is
        never split unless it alone exceeds the max payload."""
        try:
            while stream.pending and not stream.closed:
                payload = self._take(stream)
                if stream.pending_bytes <= _TERMINAL_BUFFER:
                    stream.room.set()
                stream.acked.clear()
                await self._send(_wire.A_WRTE, stream.local_id, stream.remote_id, payload)
                await asyncio.wait_for(stream.acked.wait(), _ACK_TIMEOUT_S)
        except (ConnectionError, TimeoutError):
            self.abort()
        finally:
            stream.room.set()

    def _take(self, stream: _Stream) -> bytes:
        """The next WRTE's payload: pending pieces, whole, up to the max payload (the first
        piece cut there if it alone is longer)."""
        pieces: list[bytes] = []
        size = 0
        while stream.pending:
            piece = stream.pending[0]
            if size + len(piece) > self._max_payload:
                if not pieces:
                    pieces.append(piece[: self._max_payload])
                    stream.pending[0] = piece[self._max_payload :]
                    size = self._max_payload
                break
            pieces.append(stream.pending.popleft())
            size += len(piece)
        stream.pending_bytes -= size
        return b"".join(pieces)

    async def _drain(self, stream: _Stream) -> None:
        """Wait until everything the script wrote has been sent and acknowledged."""
        while stream.pump is not None and not stream.pump.done():
            await asyncio.shield(stream.pump)
        if self._closed and not stream.closed:
            raise ConnectionResetError("connection closed")

    async def _write(self, stream: _Stream, data: bytes) -> None:
        """Send ``data`` and wait until the client has acknowledged all of it."""
        self._enqueue(stream, data)
        await self._drain(stream)
        if stream.session.hung_up:
            raise TerminalHungUp

    async def _run_stream(self, stream: _Stream, command: str, *, terminal: bool = False) -> None:
        STDOUT_IS_TERMINAL.set(terminal)  # this task's own context

        async def output(fd: int, text: str) -> None:
            if stream.session.hung_up:
                raise TerminalHungUp
            # Raw octets a command wrote (mksh ``echo '\x80'``) travel as surrogate escapes.
            data = text.encode("utf-8", "surrogateescape")
            if stream.shell_protocol:
                packet_id = SHELL_ID_STDOUT if fd == 1 else SHELL_ID_STDERR
                data = shell_packet(packet_id, data)
            self._enqueue(stream, data)
            # the script writes on until the terminal's buffer is full
            await stream.room.wait()
            if stream.session.hung_up:
                raise TerminalHungUp
            if self._closed:
                raise ConnectionResetError("connection closed")

        try:
            status = await self._host.run_shell(command, self, output, stream.session)
            await self._drain(stream)  # adbd reads the script's fd to its end first
            if stream.session.hung_up:
                return  # the stream is gone: nobody reads the status
            if stream.shell_protocol:
                await self._write(stream, shell_packet(SHELL_ID_EXIT, bytes([status & 0xFF])))
            if not stream.closed:
                stream.closed = True
                self._streams.pop(stream.local_id, None)
                await self._send(_wire.A_CLSE, stream.local_id, stream.remote_id)
        except (ScriptKilled, TerminalHungUp):
            return  # hung up or killed: the stream is gone, and the script with it
        except (ConnectionError, TimeoutError):
            self.abort()
        except Exception:
            # A simulator bug must not leave the client waiting forever: close the stream.
            self._log.exception("simulator_command_crashed", command_chars=len(command))
            if not stream.closed and not self._closed:
                stream.closed = True
                self._streams.pop(stream.local_id, None)
                with contextlib.suppress(ConnectionError):
                    await self._send(_wire.A_CLSE, stream.local_id, stream.remote_id)
