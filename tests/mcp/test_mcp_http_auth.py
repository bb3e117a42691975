"""``starebrain mcp --http`` lets no one in without the token, and only through its own Host
and Origin: raw HTTP requests and the SDK's client against a real server process, on
127.0.0.1 and on another loopback address, with a simulated phone counting what went out."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.shared.exceptions import MCPError

from .conftest import (
    BODY,
    TO,
    TOKEN,
    error_text,
    http_client,
    http_server,
    server_args,
    sms_out,
    starebrain,
    structured,
)

pytestmark = pytest.mark.slow

PhoneFactory = Callable[..., Any]

PROTOCOL = "2025-06-18"
ACCEPT = "application/json, text/event-stream"


def _rpc(method: str, params: dict[str, Any] | None = None, id_: int | None = 1) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    if id_ is not None:
        message["id"] = id_
    return message


def _answer(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC message of a response, plain JSON or one server-sent event."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                return dict(json.loads(line[5:]))
        raise AssertionError(f"no data in {response.text!r}")
    return dict(response.json())


class RawSession:
    """Plain HTTP requests to the server, headers chosen by the test."""

    def __init__(self, http: httpx2.AsyncClient, url: str) -> None:
        self.http = http
        self.url = url
        self.session_id: str | None = None

    async def post(
        self, message: dict[str, Any], *, token: str | None = TOKEN, **headers: str
    ) -> httpx2.Response:
        sent = {"accept": ACCEPT, "content-type": "application/json", **headers}
        if token is not None:
            sent["authorization"] = f"Bearer {token}"
        if self.session_id is not None:
            sent["mcp-session-id"] = self.session_id
            sent["mcp-protocol-version"] = PROTOCOL
        return await self.http.post(self.url, json=message, headers=sent)

    async def open(self, **headers: str) -> None:
        """initialize, then notifications/initialized: the session a client would hold."""
        params = {
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        }
        response = await self.post(_rpc("initialize", params), **headers)
        assert 200 == response.status_code, response.text
        self.session_id = response.headers["mcp-session-id"]
        done = await self.post(_rpc("notifications/initialized", id_=None), **headers)
        assert 202 == done.status_code, done.text


def _send(action_id: str) -> dict[str, Any]:
    arguments = {"action_id": action_id, "to": TO, "body": BODY, "wait_seconds": 20}
    return _rpc("tools/call", {"name": "send_sms", "arguments": arguments}, id_=7)


@pytest.mark.parametrize("loopback", ["127.0.0.1", "127.0.0.2"])
async def test_without_the_token_nothing_is_sent_and_a_foreign_host_or_origin_is_refused(
    phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path, loopback: str
) -> None:
    """On 127.0.0.1 as on 127.0.0.2: initialize, initialized and tools/call with no token, or
    a wrong one, get 401 with a Bearer WWW-Authenticate and send nothing; with the token, a
    foreign Host is refused (421) and a foreign Origin too (403), localhost's names and the
    bind address are served, and send_sms sends one SMS."""
    phone = await phone_factory()
    args = server_args(db_path, adb_key_path, [phone])
    async with (
        http_server(args, address=f"{loopback}:0") as (url, _process),
        httpx2.AsyncClient(timeout=60) as http,
    ):
        assert url.startswith(f"http://{loopback}:")
        port = url.rsplit(":", 1)[1].split("/")[0]
        raw = RawSession(http, url)
        # no token, a wrong one, the token as a Basic credential: 401, nothing done
        basic = {"authorization": f"Basic {TOKEN}"}
        for token, headers in ((None, {}), ("not-the-token-" + "x" * 40, {}), (None, basic)):
            for message in (
                _rpc("initialize", {"protocolVersion": PROTOCOL, "capabilities": {}}),
                _rpc("notifications/initialized", id_=None),
                _send("A-1"),
            ):
                refused = await raw.post(message, token=token, **headers)
                assert 401 == refused.status_code, refused.text
                challenge = refused.headers["www-authenticate"]
                assert challenge.startswith("Bearer ") and 'error="invalid_token"' in challenge
        # the token with a rebinding attacker's Host or Origin: refused before any session
        evil_host = await raw.post(_rpc("initialize", {}), host="evil.example")
        evil_origin = await raw.post(_rpc("initialize", {}), origin="http://evil.example")
        other_port = await raw.post(_rpc("initialize", {}), host=f"{loopback}:1")
        assert (421, 403, 421) == (
            evil_host.status_code,
            evil_origin.status_code,
            other_port.status_code,
        )
        # the server's own names are served
        await RawSession(http, url).open(
            host=f"localhost:{port}", origin=f"http://localhost:{port}"
        )
        await raw.open(origin=f"http://{loopback}:{port}")
        sent = _answer(await raw.post(_send("A-1")))
        # a session goes on only with the token and the Host it was opened with
        stolen = await raw.post(_send("A-1"), token=None)
        moved = await raw.post(_send("A-1"), host="evil.example")
    assert "SUCCEEDED" == sent["result"]["structuredContent"]["status"], sent
    assert (401, 421) == (stolen.status_code, moved.status_code)
    assert [BODY] == sms_out(phone)


async def test_the_sdk_client_needs_the_right_token(
    phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path
) -> None:
    """The SDK's client with a wrong token, or none, cannot even initialize; with the token
    it lists the tools and sends."""
    phone = await phone_factory()
    async with http_server(server_args(db_path, adb_key_path, [phone])) as (url, _process):
        for token in ("w" * 40, None):
            with pytest.raises((MCPError, httpx2.HTTPStatusError, ExceptionGroup)):
                async with http_client(url, token=token) as client:
                    await client.list_tools()
        async with http_client(url) as client:
            result = structured(
                await client.call_tool(
                    "send_sms", {"action_id": "S-1", "to": TO, "body": BODY, "wait_seconds": 20}
                )
            )
    assert ("S-1", "SUCCEEDED") == (result["action_id"], result["status"])
    assert [BODY] == sms_out(phone)


def test_mcp_token_prints_the_token_the_server_uses_from_a_private_file(
    tmp_path: Path, phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path
) -> None:
    """Without $STAREBRAIN_MCP_TOKEN, `starebrain mcp token` creates the token file (0600, in
    a 0700 config dir), says where on stderr and prints the token; a second run prints the
    same; $STAREBRAIN_MCP_TOKEN wins over the file."""
    config = tmp_path / "config"
    env = {**os.environ, "XDG_CONFIG_HOME": str(config)}
    env.pop("STAREBRAIN_MCP_TOKEN", None)

    def token(environment: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*starebrain(), "mcp", "token"],
            capture_output=True,
            text=True,
            env=environment,
            timeout=60,
            check=True,
        )

    first, second = token(env), token(env)
    path = config / "starebrain" / "mcp-token"
    printed = first.stdout.strip()
    assert 0o600 == stat.S_IMODE(path.stat().st_mode)
    assert 0o700 == stat.S_IMODE(path.parent.stat().st_mode)
    assert printed == path.read_text().strip() == second.stdout.strip()
    assert len(printed) >= 32
    assert str(path) in first.stderr and printed not in first.stderr
    assert "" == second.stderr
    assert TOKEN == token({**env, "STAREBRAIN_MCP_TOKEN": TOKEN}).stdout.strip()


async def test_the_server_uses_the_token_file_and_never_prints_the_token(
    tmp_path: Path, phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path
) -> None:
    """A server started without $STAREBRAIN_MCP_TOKEN creates the token file, names its path
    on stderr (never the token), and accepts the token `starebrain mcp token` prints."""
    phone = await phone_factory()
    config = tmp_path / "config"
    env: dict[str, str | None] = {"XDG_CONFIG_HOME": str(config), "STAREBRAIN_MCP_TOKEN": None}
    seen: list[str] = []
    args = server_args(db_path, adb_key_path, [phone])
    async with http_server(args, env=env, seen=seen) as (url, _process):
        printed = subprocess.run(
            [*starebrain(), "mcp", "token"],
            capture_output=True,
            text=True,
            env={**os.environ, "XDG_CONFIG_HOME": str(config)} | {"STAREBRAIN_MCP_TOKEN": ""},
            timeout=60,
            check=True,
        ).stdout.strip()
        async with http_client(url, token=printed) as client:
            names = sorted(tool.name for tool in (await client.list_tools()).tools)
    path = config / "starebrain" / "mcp-token"
    assert "send_sms" in names
    assert any(f"created a token in {path}" in line for line in seen), seen
    assert not any(printed in line for line in seen)
    assert 0o600 == stat.S_IMODE(path.stat().st_mode)


#: The tokens of the two named clients of ``alice_and_bob``.
ALICE, BOB = "alice-" + "a" * 40, "bob-" + "b" * 40


def alice_and_bob(folder: Path, alice_policy: str) -> Path:
    """A clients file (0600) naming alice, with her own policy file holding
    ``alice_policy``, and bob, with none."""
    clients = folder / "clients.toml"
    clients.write_text(
        f'[clients.alice]\ntoken = "{ALICE}"\npolicy = "alice-policy.toml"\n\n'
        f'[clients.bob]\ntoken = "{BOB}"\n'
    )
    clients.chmod(0o600)
    (folder / "alice-policy.toml").write_text(alice_policy)
    return clients


async def test_two_clients_with_one_action_id_get_two_actions_and_see_only_their_own(
    tmp_path: Path, phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path
) -> None:
    """With --clients, alice and bob both send action A-1: two SMS go out, each result says
    A-1; a repeat by alice sends nothing; bob cannot read alice's other action, nor she his;
    $STAREBRAIN_MCP_TOKEN is not accepted then."""
    phone = await phone_factory()
    clients = alice_and_bob(tmp_path, '[recipients]\napprove = "never"\n')
    args = server_args(db_path, adb_key_path, [phone], "--clients", str(clients))
    call = {"action_id": "A-1", "to": TO, "wait_seconds": 20}
    async with (
        http_server(args) as (url, _process),
        http_client(url, token=ALICE) as as_alice,
        http_client(url, token=BOB) as as_bob,
    ):
        first = structured(await as_alice.call_tool("send_sms", {**call, "body": "from alice"}))
        second = structured(await as_bob.call_tool("send_sms", {**call, "body": "from bob"}))
        again = structured(await as_alice.call_tool("send_sms", {**call, "body": "from alice"}))
        only = structured(
            await as_alice.call_tool("send_sms", {**call, "action_id": "ALICE-2", "body": "2"})
        )
        bob_reads = await as_bob.call_tool("sms_status", {"action_id": "ALICE-2"})
        alice_reads = structured(await as_alice.call_tool("sms_status", {"action_id": "A-1"}))
        bob_reads_own = structured(await as_bob.call_tool("sms_status", {"action_id": "A-1"}))
        with pytest.raises((MCPError, httpx2.HTTPStatusError, ExceptionGroup)):
            async with http_client(url) as owner:
                await owner.list_tools()
    for result in (first, second, again, only, alice_reads, bob_reads_own):
        assert "SUCCEEDED" == result["status"], result
    assert ["A-1", "A-1", "A-1"] == [r["action_id"] for r in (first, second, again)]
    assert 1 == again["attempts"] and again["earlier_message"] is True
    assert "no action 'ALICE-2'" in error_text(bob_reads)
    assert ["from alice", "from bob", "2"] == sms_out(phone)


async def test_a_clients_own_policy_replaces_the_servers(
    tmp_path: Path, phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path
) -> None:
    """alice's policy file denies the number, bob has none (the server's policy lets it
    go): alice's send_sms is DENIED (verdict DENY) and sends nothing, bob's sends once."""
    phone = await phone_factory()
    clients = alice_and_bob(tmp_path, '[recipients]\ndeny = ["+1202*"]\n')
    args = server_args(db_path, adb_key_path, [phone], "--clients", str(clients))
    call = {"action_id": "A-1", "to": TO, "wait_seconds": 20}
    async with (
        http_server(args) as (url, _process),
        http_client(url, token=ALICE) as as_alice,
        http_client(url, token=BOB) as as_bob,
    ):
        denied = structured(await as_alice.call_tool("send_sms", {**call, "body": "from alice"}))
        sent = structured(await as_bob.call_tool("send_sms", {**call, "body": "from bob"}))
    assert ("DENIED", "DENY", "recipients.deny") == (
        denied["status"],
        denied["policy"]["verdict"],
        denied["policy"]["rule"],
    )
    assert "SUCCEEDED" == sent["status"]
    assert ["from bob"] == sms_out(phone)
