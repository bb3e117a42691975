"""``starebrain mcp --http``: streamable HTTP on 127.0.0.1, driven by the SDK's own client
from several sessions at once, against a simulated phone."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .conftest import (
    BODY,
    TO,
    error_text,
    http_client,
    http_server,
    sent_once,
    server_args,
    sms_out,
    structured,
)

pytestmark = pytest.mark.slow

PhoneFactory = Callable[..., Any]


async def test_http_sessions_repeating_a_send_after_a_timeout_produce_one_sms(
    phone_factory: PhoneFactory, db_path: Path, adb_key_path: Path
) -> None:
    """Over streamable HTTP: the phone sends through the messaging app and never answers, one
    session gives up on the call, then two sessions repeat it at once: all answer SUCCEEDED, one
    SMS went out; a changed body is a tool error; the server stops cleanly on SIGTERM and wrote
    nothing to stdout."""
    phone = await phone_factory(faults=["hang-after-send"])
    call = {"action_id": "A-17", "to": TO, "body": BODY, "wait_seconds": 30}
    args = server_args(
        db_path, adb_key_path, [phone], "--command-timeout", "2.5", "--send-path", "ui"
    )
    async with http_server(args) as (url, process):
        assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
        async with http_client(url) as first, http_client(url) as second:
            names = sorted(tool.name for tool in (await first.list_tools()).tools)
            # the first session gives up once the send is under way (the SMS left the phone,
            # whose send command hangs), not after a second: a call given up before the
            # server started the send is cancelled there, and nothing would be sending
            given_up = asyncio.create_task(first.call_tool("send_sms", call))
            await sent_once(phone)  # the repeats come while the send command hangs
            assert not given_up.done()
            given_up.cancel()
            with pytest.raises(asyncio.CancelledError):
                await given_up
            results = await asyncio.gather(
                *(client.call_tool("send_sms", call) for client in (first, second, second))
            )
            changed = await second.call_tool(
                "send_sms", {**call, "body": "Your code is 9999", "wait_seconds": 5}
            )
        process.terminate()
        assert 0 == await asyncio.wait_for(process.wait(), timeout=30)
        assert process.stdout is not None
        assert b"" == await process.stdout.read()
    assert [
        "get_events",
        "get_replies",
        "list_review",
        "reconcile",
        "send_sms",
        "sms_status",
    ] == names
    for result in results:
        data = structured(result)
        assert ("A-17", "SUCCEEDED", 1) == (data["action_id"], data["status"], data["attempts"])
    assert "changed intent, nothing sent" in error_text(changed)
    assert [BODY] == sms_out(phone)
