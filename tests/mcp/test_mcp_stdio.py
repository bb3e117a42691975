"""``starebrain mcp`` over stdio, as an MCP client runs it: a subprocess driven by the SDK's
own client, against simulated phones; the phone's transmissions are the ground truth."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pytest
from mcp.shared.exceptions import MCPError

from starebrain_actions import SmsIntent
from starebrain_actions.core.derived_ids import derive_action_id

from .conftest import (
    BODY,
    TO,
    error_text,
    sent_once,
    server_args,
    sms_out,
    starebrain,
    stdio_session,
    structured,
)

pytestmark = pytest.mark.slow

PhoneFactory = Callable[..., Any]
Logs = Callable[[str], IO[str]]


async def test_a_dropped_reply_ends_in_succeeded_by_reading_with_one_sms(
    phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path, stderr_file: Logs
) -> None:
    """The phone sends through the messaging app, then its reply is lost (the link stalls; the
    command times out): send_sms still returns SUCCEEDED, proven by a read, with one SMS; the id
    derived from the intent is said so and repeated; a repeat changes nothing; the same id with
    another body is a tool error that sends nothing."""
    phone = await phone_factory(faults=["hang-after-send"])
    args = server_args(
        db_path, adb_key_path, [phone], "--command-timeout", "3", "--send-path", "ui"
    )
    async with stdio_session(args, errlog=stderr_file("server.err")) as client:
        first = structured(
            await client.call_tool("send_sms", {"to": TO, "body": BODY, "wait_seconds": 15})
        )
        again = structured(await client.call_tool("send_sms", {"to": TO, "body": BODY}))
        changed = await client.call_tool(
            "send_sms", {"action_id": first["action_id"], "to": TO, "body": "Your code is 9999"}
        )
        status = structured(await client.call_tool("sms_status", {"action_id": again["action_id"]}))
    assert ("SUCCEEDED", "CONFIRMED", "ACCEPTED", 1) == (
        first["status"],
        first["delivery"],
        first["acceptance"],
        first["attempts"],
    )
    assert derive_action_id(SmsIntent(recipient=TO, body=BODY)) == first["action_id"]
    assert first["action_id_derived"] and first["settled"]
    assert "outcome unknown" in first["latest"]["last_error"]
    assert (first["action_id"], "SUCCEEDED", 1) == (
        again["action_id"],
        again["status"],
        again["attempts"],
    )
    assert "changed intent, nothing sent" in error_text(changed)
    assert ("SUCCEEDED", first["latest"]["dispatch_id"]) == (
        status["status"],
        status["latest"]["dispatch_id"],
    )
    assert [BODY] == sms_out(phone)


async def test_repeated_calls_concurrent_and_after_a_timeout_send_one_sms(
    phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path, stderr_file: Logs
) -> None:
    """The phone sends through the messaging app, then its reply never comes; the client gives
    up on send_sms (its read timeout cancels the call), then repeats it five times at once,
    through the same server and through a second server process on the same ledger: every call
    answers SUCCEEDED for the same action, and one SMS left the phone."""
    phone = await phone_factory(faults=["hang-after-send"])
    # the send command gives up 2.5 s after the phone went silent; the client, after 1 s
    args = server_args(
        db_path, adb_key_path, [phone], "--command-timeout", "2.5", "--send-path", "ui"
    )
    call = {"action_id": "A-17", "to": TO, "body": BODY, "wait_seconds": 30}
    async with (
        stdio_session(args, errlog=stderr_file("one.err")) as one,
        stdio_session(args, errlog=stderr_file("two.err")) as two,
    ):
        with pytest.raises(MCPError, match="timed out"):
            await one.call_tool("send_sms", call, read_timeout_seconds=1.0)
        await sent_once(phone)  # the repeats come while the send command hangs
        results = await asyncio.gather(
            *(client.call_tool("send_sms", call) for client in (one, one, one, two, two))
        )
        status = structured(await two.call_tool("sms_status", {"action_id": "A-17"}))
    for result in results:
        data = structured(result)
        assert ("A-17", "SUCCEEDED", 1, False) == (
            data["action_id"],
            data["status"],
            data["attempts"],
            data["action_id_derived"],
        )
    assert 1 == status["attempts"]
    assert [BODY] == sms_out(phone)


async def test_the_hourly_send_limit_holds_concurrently_and_across_a_restart(
    phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path, stderr_file: Logs
) -> None:
    """--max-sends-per-hour 2: of three new actions sent at once, two go out and the third is
    a tool error that sends nothing; a repeat of a finished one still answers; after a restart
    the limit still holds (it is counted in the ledger), refusing a new action before
    recording anything."""
    phone = await phone_factory()
    args = server_args(db_path, adb_key_path, [phone], "--max-sends-per-hour", "2")
    bodies = [f"Your code is {code}" for code in (1111, 2222, 3333)]
    async with stdio_session(args, errlog=stderr_file("first.err")) as client:
        results = await asyncio.gather(
            *(
                client.call_tool(
                    "send_sms",
                    {"action_id": f"otp-{n}", "to": TO, "body": body, "wait_seconds": 30},
                )
                for n, body in enumerate(bodies)
            )
        )
        sent = [structured(result) for result in results if not result.is_error]
        refused = [error_text(result) for result in results if result.is_error]
        first_id = sent[0]["action_id"]
        repeat = structured(
            await client.call_tool(
                "send_sms",
                {"action_id": first_id, "to": TO, "body": bodies[int(first_id.split("-")[1])]},
            )
        )
    assert ["SUCCEEDED", "SUCCEEDED"] == [data["status"] for data in sent]
    assert 1 == len(refused)
    assert "send limit reached" in refused[0] and "--max-sends-per-hour 2" in refused[0]
    assert "SUCCEEDED" == repeat["status"]
    assert 2 == len(sms_out(phone))
    async with stdio_session(args, errlog=stderr_file("second.err")) as client:
        later = await client.call_tool(
            "send_sms", {"action_id": "otp-later", "to": TO, "body": "Your code is 4444"}
        )
        unknown = await client.call_tool("sms_status", {"action_id": "otp-later"})
    assert "send limit reached" in error_text(later)
    assert "nothing was ever sent" in error_text(unknown)
    assert 2 == len(sms_out(phone))
    assert set(sms_out(phone)) < set(bodies)


async def test_stdout_carries_only_json_rpc_and_logs_go_to_stderr_redacted(
    phone_factory: PhoneFactory,
    db_path: Path,
    adb_key_path: Path,
    stderr_file: Logs,
    tmp_path: Path,
) -> None:
    """With debug logging, a send, a tool error and an unknown id: every byte the client read
    from the server's stdout is a JSON-RPC message, and the logs went to stderr, with the
    number and the text redacted."""
    phone = await phone_factory(faults=["hang-after-send"])
    copy = tmp_path / "stdout.jsonl"
    tee = [sys.executable, str(Path(__file__).with_name("_tee.py")), str(copy), *starebrain()]
    args = [
        "--log-level",
        "debug",
        *server_args(db_path, adb_key_path, [phone], "--command-timeout", "3"),
        *("--send-path", "ui"),  # the messaging app's send, so that its reply is lost
    ]
    errlog = stderr_file("server.err")
    async with stdio_session(args, errlog=errlog, command=tee) as client:
        await client.list_tools()
        sent = structured(await client.call_tool("send_sms", {"to": TO, "body": BODY}))
        bad = await client.call_tool("send_sms", {"to": "12", "body": BODY})
        await client.call_tool("sms_status", {"action_id": "nope"})
    assert "SUCCEEDED" == sent["status"] and bad.is_error
    lines = copy.read_text(encoding="utf-8").splitlines()
    assert len(lines) >= 5
    for line in lines:
        message = json.loads(line)
        assert "2.0" == message["jsonrpc"], line
        assert {"id", "method", "result", "error"} & set(message), line
    errlog.seek(0)
    logs = errlog.read()
    events = [json.loads(line)["event"] for line in logs.splitlines() if line.startswith("{")]
    assert {"mcp_server_started", "attempt_created", "delivery_confirmed"} <= set(events)
    assert "2025550100" not in logs and BODY not in logs


async def test_reconcile_reads_the_phone_and_never_sends(
    phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path, stderr_file: Logs
) -> None:
    """The phone sends through the messaging app and its reply never comes: the call's wait cuts
    the command off and returns unproven; then the reconcile tool reads the phone, settles it as
    SUCCEEDED, and sends nothing (no send command reaches the phone during the pass)."""
    phone = await phone_factory(faults=["hang-after-send"])
    args = server_args(
        db_path, adb_key_path, [phone], "--default-wait", "3", "--command-timeout", "10",
        "--send-path", "ui",
    )  # fmt: skip
    async with stdio_session(args, errlog=stderr_file("server.err")) as client:
        early = structured(
            await client.call_tool(
                "send_sms", {"action_id": "A-9", "to": TO, "body": BODY, "wait_seconds": 3}
            )
        )
        before = len(phone.commands_run)
        passed = structured(await client.call_tool("reconcile", {}))
        during = phone.commands_run[before:]
        status = structured(await client.call_tool("sms_status", {"action_id": "A-9"}))
        idle = structured(await client.call_tool("reconcile", {}))
    assert early["status"] in ("IN_FLIGHT", "UNKNOWN"), early
    assert "send_sms again with action_id 'A-9'" in early["next_step"]
    assert [phone.serial] == [device["device"] for device in passed["devices"]]
    assert "SUCCEEDED" == passed["changes"][-1]["to_status"]
    assert ("SUCCEEDED", 1) == (status["status"], status["attempts"])
    assert during and not [c for c in during if "am start" in c or "input" in c or "isms" in c]
    assert ([], []) == (idle["devices"], idle["changes"])
    assert [BODY] == sms_out(phone)


async def test_by_default_the_first_sms_to_a_number_waits_for_a_persons_approval(
    phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path, stderr_file: Logs
) -> None:
    """With no policy file the server's approval mode is "new": send_sms to a new number is
    held (PLANNED, policy HOLD, nothing sent) and its next step says a person must approve
    it; no tool approves (not even with --allow-resolve); after `starebrain approve` the same
    call sends once; a second action to that number goes without approval."""
    phone = await phone_factory()
    args = server_args(db_path, adb_key_path, [phone], "--allow-resolve", gate=True)
    call = {"action_id": "A-1", "to": TO, "body": BODY, "wait_seconds": 10}
    async with stdio_session(args, errlog=stderr_file("server.err")) as client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        held = structured(await client.call_tool("send_sms", call))
        approve = await asyncio.create_subprocess_exec(
            *starebrain(), "--db", str(db_path), "approve", "A-1", "--operator", "bo",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        assert 0 == await approve.wait()
        sent = structured(await client.call_tool("send_sms", call))
        second = structured(
            await client.call_tool(
                "send_sms", {"action_id": "A-2", "to": TO, "body": "again", "wait_seconds": 10}
            )
        )
    assert not {name for name in tools if "approve" in name}
    assert ("PLANNED", "HOLD", "recipients.approve") == (
        held["status"],
        held["policy"]["verdict"],
        held["policy"]["rule"],
    )
    assert "a person must approve it" in held["next_step"]
    assert ("SUCCEEDED", None) == (sent["status"], sent["policy"])
    assert "SUCCEEDED" == second["status"]
    assert [BODY, "again"] == sms_out(phone)
