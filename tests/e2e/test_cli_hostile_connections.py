"""Connection errors say why: a phone that has not authorised the key, a port where no ADB
server answers, a key file that cannot be used, a ``--key`` that names nothing."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from android_bridge import Device, DeviceUnreachable, KeyPermissionError, ensure_key
from starebrain_actions import Ledger, SmsIntent
from starebrain_actions.cli.main import main
from tests.conftest import PhoneFactory
from tests.e2e.conftest import BODY, RECIPIENT, starebrain_command, without_file_override

#: Fast timeouts: every step of these failures fits in them.
FAST = ("--connect-timeout", "1", "--wait", "20")

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def cli(*argv: str) -> Result:
    """Run the CLI off the test's event loop (the servers below live on it)."""
    return await asyncio.to_thread(CliRunner().invoke, main, list(argv), catch_exceptions=False)


def error_line(result: Result) -> str:
    """The one error line on stderr."""
    [line] = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    return line


@pytest.fixture
async def tcp_server() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    """Start loopback TCP servers that are not ADB devices; returns ``host:port``."""
    servers: list[asyncio.Server] = []

    async def start(handler: Handler) -> str:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        servers.append(server)
        return f"127.0.0.1:{server.sockets[0].getsockname()[1]}"

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Accept, read whatever comes, say nothing."""
    try:
        while await reader.read(4096):
            pass
    finally:
        writer.close()


async def http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer anything with an HTTP error, as a web server on the wrong port does."""
    await reader.read(4096)
    writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    await writer.drain()
    writer.close()


async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Accept and close at once."""
    writer.close()


# --------------------------------------------------------------------------- authorisation


async def test_a_phone_that_never_authorises_the_key_says_so(
    phone_factory: PhoneFactory, ledger_path: Path, tmp_path: Path
) -> None:
    """The phone does not know the key and nobody taps "Allow" within --wait: exit 7 (the
    phone is not ready), the error says to allow it on the phone and names the key file;
    nothing ran on the phone."""
    phone = await phone_factory(allow_new_keys=False)
    stranger = ensure_key(tmp_path / "stranger" / "adbkey")
    result = await cli(
        "--db", str(ledger_path), "send", "--device", phone.serial, "--key", str(stranger),
        "--to", RECIPIENT, "--body", BODY, "--connect-timeout", "1", "--wait", "1.5",
    )  # fmt: skip
    assert 7 == result.exit_code, result.output
    line = error_line(result)
    assert "the phone has not authorised this key: allow it on the phone; key:" in line
    assert str(stranger) in line
    assert [] == phone.commands_run


async def test_the_bridge_says_the_key_is_not_authorised(
    phone_factory: PhoneFactory, tmp_path: Path
) -> None:
    """`Device.connect` raises DeviceUnreachable saying the key is not authorised, naming it."""
    phone = await phone_factory(allow_new_keys=False)
    stranger = ensure_key(tmp_path / "stranger" / "adbkey")
    with pytest.raises(DeviceUnreachable, match="has not authorised this key") as caught:
        await Device.connect(phone.serial, key_path=stranger, connect_timeout_s=0.5)
    assert f"key: {stranger}" in str(caught.value)


# --------------------------------------------------------------------------- not ADB


@pytest.mark.parametrize(
    ("handler", "says"),
    [
        (silent, "nothing answered the ADB handshake within 1 s"),
        (http, "it answered b'HTTP/1.1 400 Bad', not the ADB protocol"),
        (hang_up, "closed it without an ADB handshake"),
    ],
    ids=["silent", "http", "hang-up"],
)
async def test_a_port_where_no_adb_server_answers_is_not_an_adb_device(
    tcp_server: Callable[[Handler], Awaitable[str]],
    ledger_path: Path,
    adb_key_path: Path,
    handler: Handler,
    says: str,
) -> None:
    """`send` to a TCP server that is not adbd (silent, HTTP, hanging up) says "not an ADB
    device" and what the port did, exit 1 at once (waiting would not mend it)."""
    address = await tcp_server(handler)
    result = await cli(
        "--db", str(ledger_path), "send", "--device", address, "--key", str(adb_key_path),
        "--to", RECIPIENT, "--body", BODY, *FAST,
    )  # fmt: skip
    assert 1 == result.exit_code, result.output
    line = error_line(result)
    assert f"{address}: not an ADB device" in line
    assert says in line


async def test_reconcile_reports_a_port_that_is_not_an_adb_device(
    tcp_server: Callable[[Handler], Awaitable[str]], ledger_path: Path, adb_key_path: Path
) -> None:
    """`reconcile --json` reports the device unreachable with "not an ADB device"."""
    address = await tcp_server(http)
    async with Ledger.open(ledger_path) as ledger:
        await ledger.create_action("A-1", SmsIntent(recipient=RECIPIENT, body=BODY))
    result = await cli(
        "--db", str(ledger_path), "reconcile", "--device", address, "--key", str(adb_key_path),
        "--json",
    )  # fmt: skip
    assert 1 == result.exit_code, result.output
    [device] = json.loads(result.stdout)["devices"]
    assert device["reachable"] is False
    assert "not an ADB device" in device["error"]


async def test_a_refused_port_is_still_could_not_connect(
    ledger_path: Path, adb_key_path: Path, closed_port: int
) -> None:
    """A port nobody listens on is "could not connect", not "not an ADB device": tried again
    within --wait, then exit 7."""
    result = await cli(
        "--db", str(ledger_path), "send", "--device", f"127.0.0.1:{closed_port}",
        "--key", str(adb_key_path), "--to", RECIPIENT, "--body", BODY, "--wait", "1.5",
    )  # fmt: skip
    assert 7 == result.exit_code, result.output
    line = error_line(result)
    assert "could not connect" in line and "not an ADB device" not in line


# --------------------------------------------------------------------------- key files


@pytest.mark.parametrize(
    "content",
    [b"not a key at all\n", b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"],
    ids=["text", "broken-pem"],
)
async def test_a_malformed_key_file_is_a_bad_key_file(
    phone_factory: PhoneFactory, ledger_path: Path, tmp_path: Path, content: bytes
) -> None:
    """A key file that is not a key: "bad key file PATH" (not PhoneUnavailable), exit 1,
    nothing reaches the phone and no public key is written for it."""
    phone = await phone_factory()
    key = tmp_path / "adbkey"
    key.write_bytes(content)
    key.chmod(0o600)
    result = await cli(
        "--db", str(ledger_path), "send", "--device", phone.serial, "--key", str(key),
        "--to", RECIPIENT, "--body", BODY, *FAST,
    )  # fmt: skip
    assert 1 == result.exit_code, result.output
    line = error_line(result)
    assert f"bad key file {key}" in line
    assert "PhoneUnavailable" not in line
    assert [] == phone.commands_run
    assert not Path(f"{key}.pub").exists()


async def test_the_bridge_raises_a_key_permission_error_for_a_bad_key(tmp_path: Path) -> None:
    """Through the API a bad key file is a KeyPermissionError saying "bad key file", raised
    before any connection is tried."""
    key = tmp_path / "adbkey"
    key.write_bytes(b"garbage")
    key.chmod(0o600)
    with pytest.raises(KeyPermissionError, match=f"bad key file {key}"):
        await Device.connect("127.0.0.1:9", key_path=key, connect_timeout_s=0.5)


def test_an_unreadable_key_file_is_a_bad_key_file(
    ledger_path: Path, adb_key_path: Path, closed_port: int, tmp_path: Path
) -> None:
    """A key file its owner cannot read: "bad key file PATH" and the reason, exit 1."""
    key = tmp_path / "adbkey"
    shutil.copyfile(adb_key_path, key)
    key.chmod(0o000)
    env = {k: v for k, v in os.environ.items() if k != "STAREBRAIN_DB"}
    args = [
        "--db", str(ledger_path), "send", "--device", f"127.0.0.1:{closed_port}",
        "--key", str(key), "--to", RECIPIENT, "--body", BODY, *FAST,
    ]  # fmt: skip
    result = subprocess.run(
        without_file_override([*starebrain_command(), *args]),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert 1 == result.returncode, result.stderr
    assert "Traceback" not in result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert f"bad key file {key}: Permission denied" in line


@pytest.mark.parametrize(
    "command",
    [
        ["send", "--device", "127.0.0.1:9", "--to", RECIPIENT, "--body", BODY],
        ["reconcile", "--device", "127.0.0.1:9"],
        ["nightly"],
    ],
    ids=["send", "reconcile", "nightly"],
)
def test_a_key_option_naming_nothing_never_creates_a_key(
    ledger_path: Path, tmp_path: Path, command: list[str]
) -> None:
    """`--key PATH` where no key exists is a usage error (exit 2) that says how to make one;
    no key is created and no ledger either."""
    missing = tmp_path / "keys" / "typo-adbkey"
    result = CliRunner().invoke(
        main,
        ["--db", str(ledger_path), *command[:1], "--key", str(missing), *command[1:]],
        catch_exceptions=False,
    )
    assert 2 == result.exit_code, result.output
    line = error_line(result)
    assert f"no key at {missing}" in line
    assert f"starebrain key new --key {missing}" in line and "omit --key" in line
    assert not missing.parent.exists()
    assert not ledger_path.exists()


def test_an_adb_key_variable_naming_nothing_never_creates_a_key(
    ledger_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`$STAREBRAIN_ADB_KEY` naming a missing file is refused like `--key` (exit 2, says how
    to make one); nothing is created."""
    missing = tmp_path / "keys" / "adbkey"
    monkeypatch.setenv("STAREBRAIN_ADB_KEY", str(missing))
    result = CliRunner().invoke(
        main,
        ["--db", str(ledger_path), "send", "--device", "127.0.0.1:9", "--to", RECIPIENT,
         "--body", BODY],
        catch_exceptions=False,
    )  # fmt: skip
    assert 2 == result.exit_code, result.output
    line = error_line(result)
    assert f"no key at {missing} (from $STAREBRAIN_ADB_KEY)" in line
    assert f"starebrain key new --key {missing}" in line
    assert not missing.parent.exists() and not ledger_path.exists()


async def test_a_deadline_cutting_the_wait_keeps_the_reason(
    phone_factory: PhoneFactory, tmp_path: Path
) -> None:
    """A caller's deadline that ends while the phone has not authorised the key still learns
    why (`connect_failure` of its TimeoutError), and stays a timeout (a cancellation)."""
    from starebrain_actions.phone.android import AndroidPhone, connect_failure

    phone = await phone_factory(allow_new_keys=False)
    stranger = ensure_key(tmp_path / "stranger" / "adbkey")
    with pytest.raises(TimeoutError) as caught:
        async with asyncio.timeout(1):
            await AndroidPhone.connect(phone.serial, key_path=stranger, connect_timeout_s=10)
    reason = connect_failure(caught.value)
    assert reason is not None
    assert f"{phone.serial}: the phone has not authorised this key" in reason
    assert f"key: {stranger}" in reason


async def test_a_deadline_on_a_silent_port_keeps_the_reason(
    tcp_server: Callable[[Handler], Awaitable[str]], adb_key_path: Path
) -> None:
    """A deadline ending while a port says nothing to the handshake: "not an ADB device"."""
    from starebrain_actions.phone.android import AndroidPhone, connect_failure

    address = await tcp_server(silent)
    with pytest.raises(TimeoutError) as caught:
        async with asyncio.timeout(1):
            await AndroidPhone.connect(address, key_path=adb_key_path, connect_timeout_s=10)
    assert f"{address}: not an ADB device" in (connect_failure(caught.value) or "")


async def test_a_deadline_on_a_working_phone_has_no_reason(
    phone_factory: PhoneFactory, adb_key_path: Path
) -> None:
    """A deadline cutting a handshake that was going well gives no invented reason."""
    from starebrain_actions.phone.android import connect_failure

    assert connect_failure(TimeoutError()) is None
    phone = await phone_factory(latency_ms=2000)
    with pytest.raises(TimeoutError) as caught:
        async with asyncio.timeout(0.5):
            await Device.connect(phone.serial, key_path=adb_key_path, connect_timeout_s=10)
    assert connect_failure(caught.value) is None
