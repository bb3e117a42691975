"""docs/events.md's receiver example runs as written: it verifies the deliverer's signatures
and handles each ``webhook-id`` once."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

from starebrain_actions import Ledger, SmsIntent
from starebrain_actions.orchestration.webhooks import WebhookDeliverer, body_of

ROOT = Path(__file__).resolve().parents[2]


def receiver_example() -> str:
    """The ```python block of docs/events.md's webhooks part."""
    text = (ROOT / "docs" / "events.md").read_text(encoding="utf-8")
    webhooks = text[text.index("## Webhooks") :]
    found = re.search(r"^```python\n(.*?)^```$", webhooks, re.DOTALL | re.MULTILINE)
    assert found is not None, "docs/events.md has no receiver example"
    return found.group(1)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_the_documented_receiver_verifies_and_drops_repeats(tmp_path: Path) -> None:
    """The example receiver, run as a program, takes the deliverer's signed events (204), a
    repeat of one (the same ``webhook-id``) only once, and refuses a wrong signature (400)."""
    script = tmp_path / "receiver.py"
    script.write_text(receiver_example(), encoding="utf-8")
    port = free_port()
    async with Ledger.open(tmp_path / "ledger.db") as ledger:
        endpoint = await ledger.add_webhook(f"http://127.0.0.1:{port}/", allow_private=True)
        env = {**os.environ, "WEBHOOK_SECRET": endpoint.secret, "PORT": str(port)}
        process = subprocess.Popen(
            [sys.executable, str(script)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            for _ in range(100):
                with socket.socket() as probe:
                    if probe.connect_ex(("127.0.0.1", port)) == 0:
                        break
                await asyncio.sleep(0.05)
            await ledger.create_action("doc-1", SmsIntent(recipient="+12025550100", body="x"))
            async with WebhookDeliverer(ledger) as sender:
                done = await sender.drain()
                assert [204] == [result.status for result in done.results]
                event = (await ledger.events(after=endpoint.cursor))[0]
                body = body_of(event, show_private=False)
                repeat = await sender.request(endpoint, event.event_id, body)
                assert 204 == repeat[0]
                forged = await ledger.add_webhook(f"http://127.0.0.1:{port}/", allow_private=True)
                assert 400 == (await sender.request(forged, event.event_id, body))[0]
        finally:
            process.terminate()
            out, _ = process.communicate(timeout=10)
    assert ["action.created doc-1"] == out.splitlines()
