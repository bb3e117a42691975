"""The ADB wire: authentication, checksums, streams and hostile bytes, against a real server."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import tracemalloc
from pathlib import Path

import pytest
from adb_shell.auth.keygen import keygen
from adb_shell.auth.sign_pythonrsa import PythonRSASigner
from adb_shell.exceptions import TcpTimeoutException

from android_bridge.simulator import SimulatedPhone
from android_bridge.simulator._transport import shell_packet
from tests.conftest import PhoneFactory
from tests.simulator.sim_helpers import AUTH, CLSE, CNXN, OKAY, OPEN, WRTE, RawClient, connect


@pytest.fixture(scope="module")
def stranger_signer(tmp_path_factory: pytest.TempPathFactory) -> PythonRSASigner:
    """A key the phone has never seen."""
    path = tmp_path_factory.mktemp("stranger") / "adbkey"
    keygen(str(path))
    return PythonRSASigner.FromRSAKeyPath(str(path))


async def test_adb_shell_connects_authenticates_and_runs(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """adb-shell with an authorized key gets a shell and sees command output."""
    device = await connect(phone, adb_signer)
    try:
        assert "hello world\n" == await device.shell("echo hello world")
        assert "35\n" == await device.shell("getprop ro.build.version.sdk")
        assert ["echo hello world", "getprop ro.build.version.sdk"] == phone.commands_run
    finally:
        await device.close()


async def test_unknown_key_is_refused(
    phone: SimulatedPhone, stranger_signer: PythonRSASigner, authorized_keys_path: Path
) -> None:
    """An unknown key never gets a shell: the phone waits for an 'Allow' that never comes."""
    before = authorized_keys_path.read_text()
    device_error = None
    try:
        await connect(phone, stranger_signer, auth_timeout_s=0.5)
    except TcpTimeoutException as exc:
        device_error = exc
    assert device_error is not None
    assert before == authorized_keys_path.read_text()
    assert [] == phone.commands_run


async def test_unknown_key_accepted_and_remembered_with_allow_new_keys(
    phone_factory: PhoneFactory, stranger_signer: PythonRSASigner, authorized_keys_path: Path
) -> None:
    """With allow_new_keys the offered key is accepted, appended, and then signs in directly."""
    phone = await phone_factory(allow_new_keys=True)
    device = await connect(phone, stranger_signer)
    assert "ok\n" == await device.shell("echo ok")
    await device.close()
    lines = authorized_keys_path.read_text().splitlines()
    assert 2 == len(lines)
    assert stranger_signer.GetPublicKey().strip() == lines[1]
    strict = await phone_factory(authorized_keys_path=authorized_keys_path)
    again = await connect(strict, stranger_signer)
    assert "ok\n" == await again.shell("echo ok")
    await again.close()


async def test_bad_signature_gets_a_fresh_token(
    phone: SimulatedPhone, stranger_signer: PythonRSASigner, adb_signer: PythonRSASigner
) -> None:
    """A wrong signature is answered with a new AUTH TOKEN, and a right one then succeeds."""
    client = await RawClient.open(phone)
    try:
        await client.send(CNXN, 0x01000000, 4096, b"host::raw\0")
        _, _, _, first_token, _ = await client.read()
        await client.send(AUTH, 2, 0, stranger_signer.Sign(first_token))
        command, arg0, _, second_token, _ = await client.read()
        assert (AUTH, 1) == (command, arg0)
        assert first_token != second_token
        await client.send(AUTH, 2, 0, adb_signer.Sign(second_token))
        command, version, _, banner, _ = await client.read()
        assert CNXN == command
        assert 0x01000001 == version
        assert banner.startswith(b"device::ro.product.name=")
    finally:
        client.close()


async def test_version_one_peer_gets_checksums_and_has_them_checked(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """A 0x01000000 peer receives byte-sum checksums, and a bad checksum closes its connection."""
    client = await RawClient.open(phone)
    other = await RawClient.open(phone)
    try:
        await client.handshake(adb_signer, 0x01000000)
        await client.send(OPEN, 7, 0, b"shell:echo checked\0")
        _, remote_id, _, _, _ = await client.read()
        command, _, _, payload, data_check = await client.read()
        assert (WRTE, b"checked\n") == (command, payload)
        assert sum(b"checked\n") == data_check
        await client.send(OKAY, 7, remote_id)
        assert CLSE == (await client.read())[0]
        await client.send(OPEN, 8, 0, b"shell:echo never\0", data_check=12345)
        assert await client.at_eof()
        await other.handshake(adb_signer, 0x01000000)
        assert b"still here\n" == await other.shell("echo still here")
    finally:
        client.close()
        other.close()


async def test_version_two_peer_skips_checksums(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """A 0x01000001 peer gets zero checksums and may send any checksum value."""
    client = await RawClient.open(phone)
    try:
        await client.handshake(adb_signer, 0x01000001)
        await client.send(OPEN, 3, 0, b"shell:echo unchecked\0", data_check=0xDEADBEEF)
        _, remote_id, _, _, _ = await client.read()
        command, _, _, payload, data_check = await client.read()
        assert (WRTE, b"unchecked\n", 0) == (command, payload, data_check)
        await client.send(OKAY, 3, remote_id)
        assert CLSE == (await client.read())[0]
    finally:
        client.close()


async def test_streams_before_authentication_are_ignored(phone: SimulatedPhone) -> None:
    """An OPEN before authentication is never answered and runs nothing."""
    client = await RawClient.open(phone)
    try:
        await client.send(CNXN, 0x01000000, 4096, b"host::raw\0")
        await client.read()
        await client.send(OPEN, 1, 0, b"shell:echo sneaky\0")
        with pytest.raises(TimeoutError):
            await client.read(wait_s=0.3)
        assert [] == phone.commands_run
    finally:
        client.close()


async def test_unknown_service_is_closed(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """Opening a service the phone does not offer gets CLSE(0, id), as adbd answers."""
    client = await RawClient.open(phone)
    try:
        await client.handshake(adb_signer, 0x01000000)
        await client.send(OPEN, 9, 0, b"sync:\0")
        assert (CLSE, 0, 9) == (await client.read())[:3]
    finally:
        client.close()


async def test_large_output_is_split_at_max_payload_with_flow_control(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """Output larger than the peer's max payload arrives in several acknowledged WRTEs."""
    body = "x" * 9000
    phone.store.insert_incoming("+15550100", body, date_ms=1)
    client = await RawClient.open(phone)
    try:
        client.checksums = True
        await client.send(CNXN, 0x01000000, 4096, b"host::raw\0")
        _, _, _, token, _ = await client.read()
        await client.send(AUTH, 2, 0, adb_signer.Sign(token))
        _, _, max_payload, _, _ = await client.read()
        assert 4096 == max_payload
        await client.send(
            OPEN, 1, 0, b"shell:content query --uri content://sms --projection body\0"
        )
        _, remote_id, _, _, _ = await client.read()
        sizes = []
        output = b""
        while True:
            command, _, _, payload, _ = await client.read()
            if command == CLSE:
                break
            sizes.append(len(payload))
            output += payload
            await client.send(OKAY, 1, remote_id)
        assert f"Row: 0 body={body}\n".encode() == output
        assert max(sizes) <= 4096
        assert len(sizes) >= 3
    finally:
        client.close()


class StreamMux:
    """A raw client that runs many streams at once on one connection, as adb's host server
    does: one reader routes every packet to the stream its arg1 names, and each stream
    acknowledges its own WRTEs. (adb-shell cannot: its packet store drops a CLSE read by
    another stream's reader when it holds nothing yet for that stream, issue 38.)

    It records each rule of protocol.txt / docs/dev/protocol.md the device breaks: a WRTE
    before the previous one on that stream was acknowledged with an OKAY ("an additional
    WRITE message may not be sent until another READY message has been received"), a
    packet naming another peer id than the stream's OKAY did, or a packet for a stream not
    open (none asked for, or after its CLSE).
    """

    def __init__(self, client: RawClient, *, ack_delay_s: float = 0.0) -> None:
        self.client = client
        #: How long each stream holds back its OKAY: a device that does not wait for it
        #: sends its next WRTE in the meantime.
        self.ack_delay_s = ack_delay_s
        #: Rules the device broke, in the order seen.
        self.violations: list[str] = []
        self._inboxes: dict[int, asyncio.Queue[tuple[int, int, bytes]]] = {}
        self._remote_ids: dict[int, int] = {}
        self._unacknowledged: set[int] = set()
        self._closed: set[int] = set()
        self._router = asyncio.create_task(self._route())

    async def _route(self) -> None:
        while True:
            command, arg0, arg1, payload, _ = await self.client.read(wait_s=3600)
            inbox = self._inboxes.get(arg1)
            if inbox is None or arg1 in self._closed:
                self.violations.append(f"packet 0x{command:08x} on closed stream {arg1}")
                continue
            remote_id = self._remote_ids.setdefault(arg1, arg0)
            if arg0 != remote_id:
                self.violations.append(f"stream {arg1}: peer id {arg0}, not {remote_id}")
            if command == WRTE:
                if arg1 in self._unacknowledged:
                    self.violations.append(f"stream {arg1}: WRTE before our OKAY")
                self._unacknowledged.add(arg1)
            elif command == CLSE:
                self._closed.add(arg1)
            inbox.put_nowait((command, arg0, payload))

    async def run(self, local_id: int, destination: str) -> bytes:
        """OPEN ``destination`` as stream ``local_id`` and return all it wrote before CLSE."""
        inbox = self._inboxes[local_id] = asyncio.Queue()
        await self.client.send(OPEN, local_id, 0, destination.encode() + b"\0")
        command, remote_id, _ = await inbox.get()
        assert OKAY == command
        output = b""
        while True:
            command, _, payload = await inbox.get()
            if command == CLSE:
                await self.client.send(CLSE, local_id, remote_id)
                return output
            output += payload
            await asyncio.sleep(self.ack_delay_s)
            self._unacknowledged.discard(local_id)
            await self.client.send(OKAY, local_id, remote_id)

    async def close(self) -> None:
        """Stop routing and close the socket."""
        self._router.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._router
        self.client.close()


async def test_fifty_concurrent_streams_on_four_connections(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """Fifty shell commands spread over four connections, open at once, all complete with
    their own output, each WRTE waiting for its OKAY and nothing following CLSE."""
    muxes = []
    for _ in range(4):
        client = await RawClient.open(phone)
        await client.handshake(adb_signer, 0x01000001)
        muxes.append(StreamMux(client, ack_delay_s=0.01))
    try:

        async def one(index: int) -> bytes:
            command = f"sleep 0.05; echo stream-{index}; echo again-{index}"
            return await muxes[index % 4].run(index + 1, f"shell:{command}")

        # bounded: a stream the device never finishes fails the test instead of hanging it
        async with asyncio.timeout(60):
            results = await asyncio.gather(*(one(index) for index in range(50)))
        assert [f"stream-{index}\nagain-{index}\n".encode() for index in range(50)] == results
        assert [[], [], [], []] == [mux.violations for mux in muxes]
        assert 4 == phone.connections
    finally:
        for mux in muxes:
            await mux.close()


async def test_a_close_naming_another_peer_is_ignored(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """A CLSE whose local-id is not the stream's peer closes nothing: adbd looks the socket
    up by both ids (``find_local_socket(arg1, arg0)``, adb.cpp ``handle_packet``), so the
    command runs on, its WRTE is acknowledged and the stream ends with the device's CLSE."""
    client = await RawClient.open(phone)
    try:
        await client.handshake(adb_signer, 0x01000001)
        await client.send(OPEN, 6, 0, b"shell:sleep 0.2; echo kept\0")
        command, remote_id, _, _, _ = await client.read()
        assert OKAY == command
        await client.send(CLSE, 999, remote_id)
        assert (WRTE, remote_id, 6, b"kept\n") == (await client.read())[:4]
        await client.send(OKAY, 6, remote_id)
        assert (CLSE, remote_id, 6) == (await client.read())[:3]
    finally:
        client.close()


@pytest.mark.parametrize(
    "hostile",
    [
        pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", id="garbage"),
        pytest.param(struct.pack("<3I", CNXN, 0x01000000, 4096), id="truncated-header"),
        pytest.param(
            struct.pack("<6I", CNXN, 0x01000000, 4096, 100 * 1024 * 1024, 0, CNXN ^ 0xFFFFFFFF),
            id="100MB-length",
        ),
    ],
)
async def test_hostile_bytes_close_only_that_connection(
    phone: SimulatedPhone, adb_signer: PythonRSASigner, hostile: bytes
) -> None:
    """Garbage, a truncated header or a 100 MB length field cost one connection, nothing more."""
    healthy = await connect(phone, adb_signer)
    tracemalloc.start()
    try:
        bad = await RawClient.open(phone)
        bad.writer.write(hostile)
        await bad.writer.drain()
        if len(hostile) < 24:
            bad.writer.write_eof()
        assert await bad.at_eof()
        bad.close()
        _, peak = tracemalloc.get_traced_memory()
        assert peak < 10 * 1024 * 1024
        assert "alive\n" == await healthy.shell("echo alive")
        fresh = await connect(phone, adb_signer)
        assert "fresh\n" == await fresh.shell("echo fresh")
        await fresh.close()
    finally:
        tracemalloc.stop()
        await healthy.close()


async def test_stop_closes_every_connection(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """Leaving the context closes every connection and frees the port."""
    phone = await phone_factory()
    client = await RawClient.open(phone)
    await client.handshake(adb_signer, 0x01000000)
    await phone.stop()
    assert await client.at_eof()
    with pytest.raises(OSError):
        await asyncio.open_connection(phone.host, phone.port)
    client.close()


def shell_packets(data: bytes) -> list[tuple[int, bytes]]:
    """Split a shell protocol byte stream into (id, data) packets."""
    packets = []
    while data:
        packet_id, length = struct.unpack_from("<BI", data)
        packets.append((packet_id, data[5 : 5 + length]))
        data = data[5 + length :]
    return packets


async def run_service(client: RawClient, destination: str, local_id: int = 1) -> bytes:
    """OPEN ``destination``, acknowledge every WRTE, and return all bytes before CLSE."""
    await client.send(OPEN, local_id, 0, destination.encode() + b"\0")
    kind, remote_id, _, _, _ = await client.read()
    assert OKAY == kind
    data = b""
    while True:
        kind, _, _, payload, _ = await client.read()
        if kind == CLSE:
            await client.send(CLSE, local_id, remote_id)
            return data
        data += payload
        await client.send(OKAY, local_id, remote_id)


@pytest.mark.parametrize("android", [10, 15])
async def test_banner_announces_the_shell_protocol(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """The CNXN banner names the product and announces ``shell_v2``, the one adbd feature the
    phone serves (``get_connection_string``, ``supported_features``, android-10.0.0_r1 to 15)."""
    phone = await phone_factory(android=android)
    client = await RawClient.open(phone)
    try:
        banner = await client.handshake(adb_signer, 0x01000001)
    finally:
        client.close()
    assert (
        b"device::ro.product.name=sb_sim;ro.product.model=Starebrain Simulated Phone;"
        b"ro.product.device=sbsim;features=shell_v2"
    ) == banner


async def test_shell_v2_keeps_stdout_and_stderr_apart_and_sends_the_exit_status(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """``shell,v2:`` frames stdout (1) and stderr (2) apart and ends with an exit packet (3)
    before CLSE (``shell_protocol.h``, ``Subprocess::WaitForExit``)."""
    client = await RawClient.open(phone)
    try:
        await client.handshake(adb_signer, 0x01000001)
        data = await run_service(client, "shell,v2,raw:echo out; nosuch; echo done; exit 3")
    finally:
        client.close()
    assert [
        (1, b"out\n"),
        (2, b"/system/bin/sh: nosuch: inaccessible or not found\n"),
        (1, b"done\n"),
        (3, b"\x03"),
    ] == shell_packets(data)


async def test_legacy_shell_merges_stderr_and_sends_no_status(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """``shell:`` has one byte stream, stderr mixed in, and no exit status (``shell_service.cpp``
    "Raw No | No No")."""
    client = await RawClient.open(phone)
    try:
        await client.handshake(adb_signer, 0x01000001)
        data = await run_service(client, "shell:echo out; nosuch; exit 3")
    finally:
        client.close()
    assert b"out\n/system/bin/sh: nosuch: inaccessible or not found\n" == data


async def test_shell_v2_reports_a_syntax_error_as_status_one(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """A line the shell cannot parse prints to stderr and exits 1 through ``shell,v2:``."""
    client = await RawClient.open(phone)
    try:
        await client.handshake(adb_signer, 0x01000001)
        data = await run_service(client, "shell,v2:echo 'open")
    finally:
        client.close()
    assert [(2, b"/system/bin/sh: no closing quote\n"), (3, b"\x01")] == shell_packets(data)


async def test_shell_v2_input_packets_are_acknowledged(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """Window-size and close-stdin packets from the client are acknowledged and change nothing
    in what the command prints (``Subprocess::PassInput``)."""
    client = await RawClient.open(phone)
    try:
        await client.handshake(adb_signer, 0x01000001)
        await client.send(OPEN, 4, 0, b"shell,v2,raw:sleep 0.2; echo ok\0")
        _, remote_id, _, _, _ = await client.read()
        stdin = struct.pack("<BI", 5, 11) + b"24x80,0x0\0\0" + struct.pack("<BI", 4, 0)
        await client.send(WRTE, 4, remote_id, stdin)
        assert (OKAY, remote_id, 4) == (await client.read())[:3]
        data = b""
        while True:
            kind, _, _, payload, _ = await client.read()
            if kind == CLSE:
                break
            data += payload
            await client.send(OKAY, 4, remote_id)
    finally:
        client.close()
    assert [(1, b"ok\n"), (3, b"\x00")] == shell_packets(data)


def test_shell_packets_are_id_length_data() -> None:
    """A shell protocol packet is one id byte, a little-endian u32 length, then the data
    (``shell_protocol.h``: "Header is 1 byte ID + 4 bytes length")."""
    assert struct.pack("<BI", 2, 3) + b"err" == shell_packet(2, b"err")


async def test_raw_octets_from_echo_reach_the_client_unchanged(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """Octets that are not UTF-8 (mksh ``echo '\\x80'``, ``misc.c`` ``unbksl``) arrive as the
    bytes themselves, not re-encoded."""
    client = await RawClient.open(phone)
    try:
        await client.handshake(adb_signer, 0x01000001)
        data = await run_service(client, "shell:echo '\\x80\\xff\\u00e9'")
    finally:
        client.close()
    assert b"\x80\xff\xc3\xa9\n" == data


@pytest.mark.parametrize("service", ["shell:", "exec:", "shell,v2,raw:"])
async def test_a_command_longer_than_one_exec_argument_never_runs(
    phone: SimulatedPhone, adb_signer: PythonRSASigner, service: str
) -> None:
    """adbd execs ``/system/bin/sh -c <command>``: past ``MAX_ARG_STRLEN`` (131,072 bytes with
    its NUL) ``execle`` fails with E2BIG, nothing runs, and the client reads adbd's
    ``ReportError`` text (``adb/daemon/shell_service.cpp`` ``ForkAndExec``/``ReportError``,
    read in system/core at commit 238e2abc, before adb moved to packages/modules/adb). One
    byte shorter still runs."""
    longest = "echo ran #" + "x" * (131_071 - len("echo ran #"))
    client = await RawClient.open(phone)
    try:
        await client.handshake(adb_signer, 0x01000001)
        refused = await run_service(client, service + longest + "x")
        ran = await run_service(client, service + longest)
    finally:
        client.close()
    error = b"error: exec '/system/bin/sh' failed: Argument list too long\n"
    if service.startswith("shell,v2"):
        assert [(2, error), (3, b"\x7e")] == shell_packets(refused)
        assert [(1, b"ran\n"), (3, b"\x00")] == shell_packets(ran)
    else:
        assert error == refused
        assert b"ran\n" == ran
    assert [longest] == phone.commands_run


@pytest.mark.parametrize(
    ("service", "expected"),
    [
        ("shell:", b"tty\n"),
        ("exec:", b"tty\n"),
        ("shell,v2,pty:", b"tty\n"),
        ("shell,v2,raw:", b"pipe\n"),
    ],
)
async def test_only_the_shell_protocol_without_pty_runs_in_pipes(
    phone: SimulatedPhone, adb_signer: PythonRSASigner, service: str, expected: bytes
) -> None:
    """``shell:`` and ``exec:`` both reach ``StartSubprocess`` as ``kRaw`` without the shell
    protocol, which adbd turns into "a PTY in raw mode" (``daemon/services.cpp`` and
    ``shell_service.cpp``: system/core ``adb/`` at android-10.0.0_r30 and 11.0.0_r1,
    packages/modules/adb at android-12.0.0_r1 to 15.0.0_r1): the command's stdout is a
    terminal, as with ``shell,v2,pty:``; only ``shell,v2:`` without ``pty`` gives it pipes."""
    client = await RawClient.open(phone)
    try:
        await client.handshake(adb_signer, 0x01000001)
        data = await run_service(client, f"{service}[ -t 1 ] && echo tty || echo pipe")
    finally:
        client.close()
    if service.startswith("shell,v2"):
        assert [(1, expected), (3, b"\x00")] == shell_packets(data)
    else:
        assert expected == data
