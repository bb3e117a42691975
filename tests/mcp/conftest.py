"""Fixtures for the MCP server: ``starebrain mcp`` run as a real process, driven by the
official SDK's own client over stdio or streamable HTTP, against simulated phones."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import CallToolResult

from android_bridge.simulator import SimulatedPhone
from starebrain_actions import RetryPolicy
from starebrain_actions.mcp.config import ServerConfig
from starebrain_actions.mcp.server import build_server
from starebrain_actions.mcp.service import open_service
from tests._postgres import fresh_schema

TO = "+1 202 555 0100"
#: The token the HTTP servers of the tests are started with ($STAREBRAIN_MCP_TOKEN).
TOKEN = "test-token-0123456789-abcdefghijklmnopqrstuvwxyz"
BODY = "Your code is 4821"
#: A policy fast enough for tests: UNKNOWN after a second, quick backoff, short timeouts, and
#: rows settled as soon as the simulated phones' radios can have answered (the MCP client
#: starts the server with a minimal environment: no $STAREBRAIN_SETTLE_AFTER).
FAST = [
    "--grace",
    "1",
    "--backoff",
    "0.05",
    "--connect-timeout",
    "3",
    "--command-timeout",
    "5",
    "--settle-after",
    "0.3",
    "--framework-settle-after",
    "0.2",
]


def starebrain() -> list[str]:
    """The installed ``starebrain`` console script of this interpreter's environment."""
    script = Path(sys.executable).parent / "starebrain"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from starebrain_actions.cli.main import main; main()"]


def server_args(
    db: Path, key: Path, phones: list[SimulatedPhone], *extra: str, gate: bool = False
) -> list[str]:
    """``starebrain --db DB mcp --device … --key KEY`` with the fast policy, then ``extra``.
    Without ``gate``, a policy file beside the ledger whose approval mode is "never" (the
    server's default, "new", holds every first SMS to a number for a person's approval);
    with it, the server's own default."""
    devices = [arg for phone in phones for arg in ("--device", phone.serial)]
    policy: list[str] = []
    if not gate:
        never = db.parent / "policy-never.toml"
        never.write_text('[recipients]\napprove = "never"\n', encoding="utf-8")
        policy = ["--policy", str(never)]
    return ["--db", str(db), "mcp", *devices, "--key", str(key), *FAST, *policy, *extra]


@asynccontextmanager
async def stdio_session(
    args: list[str], *, errlog: IO[str], command: list[str] | None = None
) -> AsyncIterator[Client]:
    """The SDK's client over stdio, talking to ``starebrain ARGS`` in a subprocess
    (``command`` replaces the executable part, e.g. to put a wrapper in front)."""
    argv = [*(command or starebrain()), *args]
    params = StdioServerParameters(command=argv[0], args=argv[1:])
    async with Client(stdio_client(params, errlog=errlog), read_timeout_seconds=60) as client:
        yield client


@asynccontextmanager
async def http_server(
    args: list[str],
    *,
    address: str = "127.0.0.1:0",
    env: dict[str, str | None] | None = None,
    seen: list[str] | None = None,
) -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    """``starebrain ARGS --http ADDRESS`` in a subprocess, with ``$STAREBRAIN_MCP_TOKEN`` set
    to ``TOKEN`` (``env`` adds to or replaces the environment; a value None removes it);
    yields its URL (read from the line it prints on stderr) and the process. ``seen``
    collects the stderr lines up to that one. Stopped with SIGTERM at the end."""
    environment = {**os.environ, "STAREBRAIN_DB": "", "STAREBRAIN_MCP_TOKEN": TOKEN}
    for name, value in (env or {}).items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value
    process = await asyncio.create_subprocess_exec(
        *starebrain(),
        *args,
        "--http",
        address,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=environment,
    )
    assert process.stderr is not None
    seen = seen if seen is not None else []
    try:
        async with asyncio.timeout(30):
            while True:
                line = (await process.stderr.readline()).decode()
                if not line:
                    raise AssertionError(f"the server exited before listening: {seen}")
                seen.append(line)
                if "listening on " in line:
                    url = line.split("listening on ", 1)[1].strip()
                    break
        yield url, process
    finally:
        if process.returncode is None:
            process.terminate()
        await asyncio.wait_for(process.wait(), timeout=30)


@asynccontextmanager
async def http_client(url: str, token: str | None = TOKEN) -> AsyncIterator[Client]:
    """The SDK's client over streamable HTTP, sending ``Authorization: Bearer TOKEN``."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else None
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http), read_timeout_seconds=60) as client,
    ):
        yield client


def structured(result: CallToolResult) -> dict[str, Any]:
    """A successful tool result's structured content (its text content holds the same JSON)."""
    assert not result.is_error, result.content
    assert result.structured_content is not None
    assert result.structured_content == json.loads(result.content[0].text)  # type: ignore[union-attr]
    return dict(result.structured_content)


def error_text(result: CallToolResult) -> str:
    """A tool error's text."""
    assert result.is_error, result.structured_content
    return " ".join(getattr(block, "text", "") for block in result.content)


async def sent_once(phone: SimulatedPhone) -> None:
    """Wait (10 s at most) until a message has left the phone."""
    await phone.wait_transmissions(within_s=10)


def sms_out(phone: SimulatedPhone) -> list[str]:
    """Bodies of every message that really left the phone (SMS, MMS or RCS)."""
    return [transmission.body for transmission in phone.transmissions]


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A fresh ledger path."""
    return tmp_path / "ledger.db"


@pytest.fixture
def stderr_file(tmp_path: Path) -> Iterator[Callable[[str], IO[str]]]:
    """``open_log(name)``: a file under tmp_path for a server's stderr (closed at teardown)."""
    opened: list[IO[str]] = []

    def open_log(name: str) -> IO[str]:
        handle = (tmp_path / name).open("w+", encoding="utf-8")
        opened.append(handle)
        return handle

    yield open_log
    for handle in opened:
        handle.close()


#: The policy of the tests that send through a server in this process: fast retries.
SEND_POLICY = RetryPolicy(
    settle_after=timedelta(milliseconds=300),
    framework_settle_after=timedelta(milliseconds=200),
    maximum_attempts=3,
    grace_window=timedelta(seconds=1),
    initial_interval=timedelta(milliseconds=50),
)


@asynccontextmanager
async def client_on(
    db: Path | str, key: Path, devices: list[str], **overrides: Any
) -> AsyncIterator[Client]:
    """The SDK's client on a server in this process (fast policy, short timeouts)."""
    overrides.setdefault("policy", SEND_POLICY)
    overrides.setdefault("poll_interval_s", 0.05)
    overrides.setdefault("command_timeout_s", 3.0)
    overrides.setdefault("connect_timeout_s", 2.0)
    config = ServerConfig(db=db, devices=tuple(devices), key_path=key, **overrides)
    async with open_service(config) as service, Client(build_server(service)) as client:
        yield client


@pytest.fixture(params=["sqlite", "postgresql"])
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Path | str]:
    """A fresh ledger for the tests that run on both backends: a SQLite file, or a
    PostgreSQL schema of this test's own."""
    if request.param == "sqlite":
        yield tmp_path / "ledger.db"
        return
    async with fresh_schema() as url:
        yield url
