"""``starebrain nightly`` delivers the webhooks due and reports the endpoints turned off."""

from __future__ import annotations

from datetime import timedelta

from starebrain_actions import Ledger, SmsIntent
from starebrain_actions.orchestration.nightly.report import report_data
from starebrain_actions.orchestration.nightly.run import run_nightly
from starebrain_actions.orchestration.nightly.text import report_markdown, summary_lines
from tests.webhooks.conftest import Receiver


async def test_nightly_delivers_what_is_due_and_reports_endpoints_turned_off(
    db: str, receiver: Receiver
) -> None:
    """The nightly run sends the due events (counted in its report), and an endpoint turned
    off is in its text, Markdown and JSON with the command that turns it back on, and is an
    attention item (exit 1)."""
    async with Ledger.open(db) as ledger:
        on = await ledger.add_webhook(receiver.url, allow_private=True)
        receiver.secret = on.secret
        off = await ledger.add_webhook("https://hooks.example.com/x", after=0)
        at = ledger.now()
        assert await ledger.claim_webhook(
            off.endpoint_id, "x", until=at + timedelta(minutes=1), now=at
        )
        await ledger.create_action("n-1", SmsIntent(recipient="+12025550100", body="hi"))
        assert await ledger.webhook_failed(
            off.endpoint_id,
            "x",
            cursor=0,
            position=1,
            failures=8,
            status=None,
            error="ConnectError",
            now=at,
            next_try_at=None,
        )
    report = await run_nightly(db)
    # n-1's action.created and the other endpoint's webhook.disabled
    assert ["action.created", "webhook.disabled"] == [p["type"] for p in receiver.verified()]
    assert (2, 0) == (report.webhooks_delivered, report.webhooks_failed)
    assert [off.endpoint_id] == [line.endpoint_id for line in report.webhooks_off]
    assert 1 == report.exit_code
    command = f"starebrain webhook enable {off.endpoint_id}"
    assert command in "\n".join(summary_lines(report))
    assert command in report_markdown(report)
    data = report_data(report)
    assert command == data["webhooks_off"][0]["command"]
    assert 2 == data["webhooks_off"][0]["pending"]
    assert any("webhook" in item for item in data["attention"])
