"""``starebrain events`` (issue 34): JSON lines for scripts, a line per event for people,
filters, and a follower that streams new events and says where to resume."""

from __future__ import annotations

import asyncio
import json
import signal
from typing import Any

from starebrain_actions import Ledger, SmsIntent

from .conftest import RECIPIENT, RunCli, Target, starebrain_command


def _lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


async def test_json_lines_list_every_change_with_what_answers_it(
    seeded_ledger: Target, run_cli: RunCli
) -> None:
    """One JSON object per line, positions 1, 2, 3...; the spent action's last failure is
    action.failed with the command that grants more; the wrong text is action.needs_person
    (MISMATCH); numbers are redacted unless --show-private."""
    result = await asyncio.to_thread(run_cli, "events", "--after", "0", "--json")
    assert 0 == result.exit_code, result.output
    events = _lines(result.stdout)
    assert list(range(1, len(events) + 1)) == [event["position"] for event in events]
    kinds = {(event["action_id"], event["type"]) for event in events}
    assert ("spent", "action.failed") in kinds
    assert ("ok-1", "action.succeeded") in kinds
    assert ("planned", "action.created") in kinds
    failed = next(e for e in events if e["type"] == "action.failed")
    assert "starebrain retry spent --reason TEXT" == failed["data"]["command"]
    mismatch = next(e for e in events if e["action_id"] == "bad-text" and "needs" in e["type"])
    assert "MISMATCH" == mismatch["data"]["review_reason"]
    assert RECIPIENT.replace(" ", "") not in result.stdout
    private = await asyncio.to_thread(run_cli, "events", "--after", "0", "--json", "--show-private")
    assert "Your cod 4821" in private.stdout


async def test_text_lines_filters_and_the_newest_by_default(
    seeded_ledger: Target, run_cli: RunCli
) -> None:
    """A header, then one line per event starting with its position; --type and --action
    keep to theirs; without --after the newest --limit events are shown."""
    result = await asyncio.to_thread(run_cli, "events", "--type", "action.failed")
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["position", "at", "type"]
    assert 2 == len(lines) and "spent" in lines[1] and "starebrain retry spent" in lines[1]
    one = await asyncio.to_thread(run_cli, "events", "--action", "ok-1", "--json", "--after", "0")
    assert {"ok-1"} == {event["action_id"] for event in _lines(one.stdout)}
    everything = _lines(
        (await asyncio.to_thread(run_cli, "events", "--json", "--after", "0")).stdout
    )
    last = _lines((await asyncio.to_thread(run_cli, "events", "--json", "--limit", "3")).stdout)
    assert everything[-3:] == last
    family = _lines(
        (await asyncio.to_thread(run_cli, "events", "--json", "--type", "attempt.*")).stdout
    )
    assert family and all(event["type"].startswith("attempt.") for event in family)


async def test_an_unknown_type_is_a_usage_error(seeded_ledger: Target, run_cli: RunCli) -> None:
    result = await asyncio.to_thread(run_cli, "events", "--type", "action.sentt")
    assert 2 == result.exit_code
    assert "unknown event type 'action.sentt'" in result.output
    assert "action.sent" in result.output


async def test_follow_streams_new_events_and_says_where_to_resume(
    seeded_ledger: Target,
) -> None:
    """A follower prints each new event as it is committed; SIGTERM ends it (exit 0) with the
    --after that resumes exactly after the last event it printed."""
    async with Ledger.open(seeded_ledger) as ledger:
        newest = await ledger.last_event_position()
    process = await asyncio.create_subprocess_exec(
        *starebrain_command(),
        "--db",
        str(seeded_ledger),
        "events",
        "--follow",
        "--json",
        "--after",
        str(newest),
        "--poll",
        "0.1",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        for n, position in ((1, newest + 1), (2, newest + 2)):
            # the second is created once the follower has printed the first: it follows
            async with Ledger.open(seeded_ledger) as ledger:
                await ledger.create_action(f"late-{n}", SmsIntent(recipient=RECIPIENT, body="hi"))
            line = await asyncio.wait_for(process.stdout.readline(), 20)
            event = json.loads(line)
            assert (f"late-{n}", "action.created", position) == (
                event["action_id"],
                event["type"],
                event["position"],
            )
    finally:
        process.send_signal(signal.SIGTERM)
        _out, err = await asyncio.wait_for(process.communicate(), 20)
    assert 0 == process.returncode
    assert f"resume with: starebrain events --after {newest + 2} --follow" in err.decode()
