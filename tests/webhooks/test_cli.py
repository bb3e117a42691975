"""``starebrain webhook add|list|remove|enable|test`` and ``starebrain deliver`` end to end,
through click's runner on a real ledger (both backends) and a real receiver on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from click.testing import CliRunner, Result

from starebrain_actions import Ledger
from starebrain_actions.cli.main import main
from tests.webhooks.conftest import Receiver, make_events


async def cli(db: str, *args: str) -> Result:
    """``starebrain --db DB ARGS`` on a worker thread (it runs its own event loop)."""
    argv = ["--db", db, *args]
    return await asyncio.to_thread(CliRunner().invoke, main, argv, catch_exceptions=False)


async def added(db: str, receiver: Receiver, *more: str) -> dict[str, Any]:
    result = await cli(db, "webhook", "add", receiver.url, "--allow-private", "--json", *more)
    assert 0 == result.exit_code, result.output
    data: dict[str, Any] = json.loads(result.output)
    receiver.secret = data["secret"]
    return data


async def test_add_prints_the_secret_once_and_list_never_shows_it(
    db: str, receiver: Receiver
) -> None:
    """``add`` prints the endpoint's id and its whsec_ secret; ``list`` (text and JSON) shows
    the endpoint, its types, state and pending events, never the secret; ``remove`` ends it."""
    async with Ledger.open(db) as ledger:
        await make_events(ledger, 1)
    result = await cli(
        db, "webhook", "add", receiver.url, "--allow-private", "--event", "action.*", "--from-start"
    )
    assert 0 == result.exit_code, result.output
    secret = next(w for w in result.output.split() if w.startswith("whsec_"))
    endpoint_id = next(w for w in result.output.split() if w.startswith("whk_"))
    shown = await cli(db, "webhook", "list")
    assert 0 == shown.exit_code, shown.output
    assert endpoint_id in shown.output and receiver.url in shown.output
    assert "1 after position 0" in shown.output
    assert secret not in shown.output and "whsec_" not in shown.output
    listed = await cli(db, "webhook", "list", "--json")
    data = json.loads(listed.output)
    assert [endpoint_id] == [item["endpoint_id"] for item in data]
    assert (["action.*"], "ENABLED", 1) == (data[0]["types"], data[0]["state"], data[0]["pending"])
    assert "secret" not in data[0] and secret not in listed.output
    removed = await cli(db, "webhook", "remove", endpoint_id)
    assert 0 == removed.exit_code and endpoint_id in removed.output
    assert "no webhook endpoints" in (await cli(db, "webhook", "list")).output
    again = await cli(db, "webhook", "remove", endpoint_id)
    assert 1 == again.exit_code and "no webhook endpoint" in again.output


async def test_bad_input_is_refused_with_exit_2(db: str, receiver: Receiver) -> None:
    """A URL that is not http(s), an unknown event type, and a loopback host without
    ``--allow-private`` are usage errors (exit 2), each saying why; nothing is added."""
    async with Ledger.open(db):
        pass
    cases = [
        (["ftp://example.com/x"], "http:// or https://"),
        (["https://example.com/x", "--event", "action.nope"], "unknown event type"),
        ([receiver.url], "--allow-private"),
        (["http://localhost:9/x"], "loopback"),
        ([receiver.url, "--allow-private", "--from-start", "--after", "3"], "not both"),
    ]
    for args, why in cases:
        result = await cli(db, "webhook", "add", *args)
        assert 2 == result.exit_code, (args, result.output)
        assert why in result.output, (args, result.output)
    assert "no webhook endpoints" in (await cli(db, "webhook", "list")).output


async def test_deliver_test_and_enable_end_to_end(db: str, receiver: Receiver) -> None:
    """``webhook test`` reports the status (exit 0 on 2xx, 4 otherwise); ``deliver`` sends
    what is due, signed, exit 0, or 4 when a try failed; an endpoint turned off shows in
    ``list`` with why and the command that turns it back on; ``enable`` does."""
    data = await added(db, receiver)
    endpoint_id = data["endpoint_id"]
    tested = await cli(db, "webhook", "test", endpoint_id)
    assert 0 == tested.exit_code and "HTTP 200" in tested.output, tested.output
    assert "webhook.test" == receiver.verified()[0]["type"]
    async with Ledger.open(db) as ledger:
        await make_events(ledger, 2)
    delivered = await cli(db, "deliver", "--json")
    assert 0 == delivered.exit_code, delivered.output
    lines = [json.loads(line) for line in delivered.output.splitlines()]
    assert 4 == len(lines) and all(line["status"] == 200 for line in lines)
    assert ["action.created", "attempt.created"] * 2 == [p["type"] for p in receiver.verified()[1:]]
    receiver.default = "500"
    receiver.received.clear()
    assert 4 == (await cli(db, "webhook", "test", endpoint_id)).exit_code
    async with Ledger.open(db) as ledger:
        await make_events(ledger, 1, prefix="b")
    failed = await cli(db, "deliver", "--once")
    assert 4 == failed.exit_code and "failed: HTTP 500" in failed.output
    async with Ledger.open(db) as ledger:
        # its schedule spent (the deliverer's last failure, as tests/webhooks/test_delivery
        # waits for it): turned off
        await ledger.claim_webhook(endpoint_id, "test", until=ledger.now(), now=ledger.now())
        stored = await ledger.webhook(endpoint_id)
        assert await ledger.webhook_failed(
            endpoint_id,
            "test",
            cursor=stored.cursor,
            position=stored.head_position or 0,
            failures=8,
            status=500,
            error="HTTP 500",
            now=ledger.now(),
            next_try_at=None,
        )
    listed = await cli(db, "webhook", "list")
    assert "OFF since" in listed.output and f"webhook enable {endpoint_id}" in listed.output
    receiver.default = "200"
    assert 0 == (await cli(db, "webhook", "enable", endpoint_id)).exit_code
    assert 0 == (await cli(db, "deliver")).exit_code
    # the stuck event first, then the rest in order: its own webhook.disabled among them
    assert ["action.created", "attempt.created", "webhook.disabled"] == [
        p["type"] for p in receiver.verified()
    ]
    assert "ENABLED" == json.loads((await cli(db, "webhook", "list", "--json")).output)[0]["state"]


async def test_every_command_has_help() -> None:
    """Each webhook command and ``deliver`` explains itself with --help."""
    for args in (
        ["webhook"],
        ["webhook", "add"],
        ["webhook", "list"],
        ["webhook", "remove"],
        ["webhook", "enable"],
        ["webhook", "test"],
        ["deliver"],
    ):
        result = await asyncio.to_thread(CliRunner().invoke, main, [*args, "--help"])
        assert 0 == result.exit_code and "Usage:" in result.output, args
