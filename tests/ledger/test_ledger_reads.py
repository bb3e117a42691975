"""Paged reads of summaries: the same answers as deriving every action one by one, and SQL
that finds its rows through indexes (checked with ``EXPLAIN QUERY PLAN``)."""

from __future__ import annotations

import io
import json
import re
import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from starebrain_actions import (
    Ledger,
    MatchVerdict,
    RetryPolicy,
    ReviewReason,
    SmsIntent,
    Status,
    confirm_delivery,
    fail_delivery,
    flag_for_review,
    try_accept,
)
from starebrain_actions.core.exceptions import PolicyRefused
from starebrain_actions.core.model import ActionSummary
from starebrain_actions.core.policy import Policy
from starebrain_actions.orchestration.nightly.report import build_report
from starebrain_actions.render.json_output import emit_json, emit_json_stream
from starebrain_actions.render.output import Output
from starebrain_actions.render.records import render_list, render_review, stream_list, stream_review
from starebrain_actions.render.values import summary_data

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
#: Long after every attempt below: past their grace windows and backoffs.
LATER = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
DEVICE_A = "10.0.0.1:5555"
DEVICE_B = "10.0.0.2:5555"
#: Every shape ``seed`` makes, by action id prefix.
SHAPES = (
    "sent",
    "failed-then-sent",
    "failed",
    "spent",
    "mismatch",
    "duplicate",
    "verifying",
    "unknown",
    "ruled",
    "deadline",
    "planned",
    "denied",
    "failed-denied",
    "expired",
    "failed-expired",
)


async def one_by_one(ledger: Ledger) -> list[ActionSummary]:
    """Every action's summary read alone (``Ledger.summary``), newest first."""
    with closing(sqlite3.connect(ledger.path)) as db:
        ids = [
            row[0]
            for row in db.execute(
                "SELECT action_id FROM actions ORDER BY created_at DESC, action_id"
            )
        ]
    return [await ledger.summary(action_id, now=LATER) for action_id in ids]


async def test_paged_filters_give_what_each_summary_says(ledger_path: Path) -> None:
    """Whatever the filter and the page size (pages breaking inside ties of created_at),
    ``iter_summaries`` yields exactly the actions, in order, that filtering every action's own
    summary keeps; ``summaries`` and ``needing_review`` agree with it."""
    async with Ledger.open(ledger_path) as ledger:
        await seed_spread(ledger)
        everything = await one_by_one(ledger)
        assert {summary.status for summary in everything} == set(Status)
        spent = {s.action.action_id for s in everything if s.review_reasons}
        assert {"spent-000", "deadline-000", "mismatch-000", "duplicate-000"} <= spent
        filters: list[dict[str, object]] = [
            {},
            {"needs_review": True},
            {"needs_review": False},
            {"device": DEVICE_A},
            {"device": DEVICE_A, "needs_review": True},
        ]
        filters += [{"status": status} for status in Status]
        filters += [{"status": Status.SUCCEEDED, "needs_review": True}]
        for page_size in (1, 3, 7, 1000):
            for chosen in filters:
                expected = [s for s in everything if _keeps(s, chosen)]
                found = [
                    s
                    async for s in ledger.iter_summaries(
                        now=LATER,
                        page_size=page_size,
                        **chosen,  # type: ignore[arg-type]
                    )
                ]
                assert expected == found, (page_size, chosen)
                limited = [
                    s
                    async for s in ledger.iter_summaries(
                        now=LATER,
                        page_size=page_size,
                        limit=4,
                        **chosen,  # type: ignore[arg-type]
                    )
                ]
                assert expected[:4] == limited, (page_size, chosen)
        assert [s for s in everything if s.needs_review] == await ledger.needing_review(now=LATER)
        assert everything == await ledger.summaries(now=LATER)
        notable = [s async for s in ledger.iter_summaries(notable_only=True, now=LATER)]
        quiet = [s for s in everything if s not in notable]
        # what notable_only leaves out is SUCCEEDED with nothing to show, or PLANNED, or
        # DENIED or EXPIRED before any attempt
        assert quiet and all(
            (s.status is Status.SUCCEEDED and s.attempts)
            or (s.status in (Status.PLANNED, Status.DENIED, Status.EXPIRED) and not s.attempts)
            for s in quiet
        )
        assert all(not s.review_reasons and not s.superseded_reasons for s in quiet)
        tally = await ledger.ledger_tally(now=LATER)
        assert (
            len(everything),
            sum(s.status is Status.PLANNED for s in everything),
            sum(s.status is Status.DENIED and not s.attempts for s in everything),
            sum(s.status is Status.EXPIRED and not s.attempts for s in everything),
            sum(s.status is Status.SUCCEEDED for s in quiet),
            sum(s.duplicates for s in everything),
        ) == (
            tally.actions,
            tally.planned,
            tally.denied_unattempted,
            tally.expired_unattempted,
            tally.quietly_succeeded,
            tally.duplicates,
        )
        assert tally.duplicates > 0
        assert [DEVICE_A, DEVICE_B, "10.0.0.9:5555"] == await ledger.devices()


def _keeps(summary: ActionSummary, chosen: dict[str, object]) -> bool:
    if "status" in chosen and summary.status is not chosen["status"]:
        return False
    if "needs_review" in chosen and summary.needs_review is not chosen["needs_review"]:
        return False
    return "device" not in chosen or any(
        record.device == chosen["device"] for record in summary.attempts
    )


async def seed_spread(ledger: Ledger) -> None:
    """7 copies of every shape, through the public API, plus one action in flight
    (IN_FLIGHT at ``LATER``) on a device of its own."""
    for copy in range(7):
        await seed_copy(ledger, copy)
    await ledger.create_action(
        "in-flight", SmsIntent(recipient="+12025550199", body="x"), now=LATER
    )
    await ledger.begin_attempt("in-flight", "10.0.0.9:5555", now=LATER)


async def seed_copy(ledger: Ledger, copy: int) -> None:
    """One action of every shape in ``SHAPES``, all created at one time (a tie that pages
    break inside); an unresolved attempt is flagged STUCK, which frees its device's lease."""
    for number, shape in enumerate(SHAPES):
        action_id = f"{shape}-{copy:03d}"
        created = T0 + timedelta(minutes=copy)
        intent = SmsIntent(
            recipient=f"+1202555{number:02d}{copy:02d}",
            body=action_id,
            # its deadline passes before LATER, with nothing sent (EXPIRED)
            not_after=created + timedelta(hours=3) if "expired" in shape else None,
        )
        policy = (
            RetryPolicy(maximum_attempts=5, schedule_to_close=timedelta(hours=2))
            if shape == "deadline"
            else RetryPolicy(maximum_attempts=2)
        )
        await ledger.create_action(action_id, intent, policy, now=created)
        if shape in ("planned", "expired"):
            continue
        if shape == "denied":
            await ledger.deny(action_id, operator="ana", reason="not this one", now=created)
            continue
        device = DEVICE_A if (copy + number) % 2 else DEVICE_B
        at = created + timedelta(seconds=1)
        record = await ledger.begin_attempt(action_id, device, now=at)
        if shape == "unknown":
            await ledger.apply(flag_for_review(record, ReviewReason.STUCK, now=at))
            continue
        if shape in (
            "failed-then-sent", "failed", "spent", "deadline", "failed-denied", "failed-expired"
        ):  # fmt: skip
            record = await ledger.apply(fail_delivery(record, reason="refused", now=at))
            if shape in ("failed", "deadline", "failed-expired"):
                continue
            if shape == "failed-denied":
                # a later gate's rule denies it: final, never sent again
                with pytest.raises(PolicyRefused):
                    await ledger.begin_attempt(
                        action_id, device, now=at + timedelta(hours=1), gate=Policy(deny=("+1*",))
                    )
                continue
            at += timedelta(hours=1)
            record = await ledger.begin_attempt(action_id, device, now=at)
            if shape == "spent":
                await ledger.apply(fail_delivery(record, reason="refused", now=at))
                continue
        record = await ledger.apply(
            confirm_delivery(record, provider_object_id=copy * 100 + number * 2 + 1, now=at)
        )
        if shape == "verifying":
            continue
        verdict = MatchVerdict(matched=shape != "mismatch", reason="body differs")
        record = await ledger.apply(try_accept(record, verdict, now=at))
        if shape == "duplicate":
            await ledger.record_duplicate(
                record.dispatch_id, provider_object_id=copy * 100 + number * 2 + 2, now=at
            )
        if shape == "ruled":
            await ledger.resolve(action_id, as_sent=True, reason="checked", operator="ana", now=at)


async def test_nightly_report_from_notable_actions_and_the_tally(ledger_path: Path) -> None:
    """The nightly report built from the notable actions and the ledger's tally is the report
    built from every action's summary."""
    async with Ledger.open(ledger_path) as ledger:
        await seed_spread(ledger)
        everything = await one_by_one(ledger)
        notable = [s async for s in ledger.iter_summaries(notable_only=True, now=LATER)]
        tally = await ledger.ledger_tally(now=LATER)
    common = {"ledger_path": ledger_path, "now": LATER, "duration_s": 1.0, "devices": ()}
    full = build_report(summaries=everything, **common)  # type: ignore[arg-type]
    paged = build_report(summaries=notable, tally=tally, **common)  # type: ignore[arg-type]
    assert full == paged
    assert full.review and full.mismatches and full.budget_exhausted and full.unresolved


async def test_streamed_list_and_review_print_what_the_whole_list_prints(
    ledger_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``list`` and ``review`` streamed print byte for byte what rendering the whole list at
    once prints, in piped and in terminal-width output; streamed JSON is the whole list's
    data, one element per line."""
    async with Ledger.open(ledger_path) as ledger:
        await seed_spread(ledger)
        for needs_review in (None, True):
            everything = await ledger.summaries(needs_review=needs_review, now=LATER)

            def summaries(flag: bool | None = needs_review) -> AsyncIterator[ActionSummary]:
                return ledger.iter_summaries(needs_review=flag, now=LATER, page_size=4)

            for width in (None, 100):
                whole, streamed = io.StringIO(), io.StringIO()
                if needs_review:
                    render_review(
                        Output(rich=False, stream=whole, width=width),
                        everything,
                        now=LATER,
                        show_private=False,
                    )
                    await stream_review(
                        Output(rich=False, stream=streamed, width=width),
                        summaries,
                        now=LATER,
                        show_private=False,
                    )
                else:
                    render_list(
                        Output(rich=False, stream=whole, width=width),
                        everything,
                        now=LATER,
                        show_private=False,
                    )
                    await stream_list(
                        Output(rich=False, stream=streamed, width=width),
                        summaries,
                        now=LATER,
                        show_private=False,
                    )
                assert whole.getvalue() == streamed.getvalue()
                assert len(everything) < whole.getvalue().count("\n")
            capsys.readouterr()
            emit_json([summary_data(s, show_private=False) for s in everything])
            whole_json = capsys.readouterr().out
            await emit_json_stream(summary_data(s, show_private=False) async for s in summaries())
            streamed_json = capsys.readouterr().out
            assert json.loads(whole_json) == json.loads(streamed_json)
            assert ["[", *(["{"] * len(everything)), "]"] == [
                line[:1] for line in streamed_json.splitlines()
            ]
        empty = ledger.iter_summaries(status=Status.IN_FLIGHT, device="nowhere:1", now=LATER)
        await emit_json_stream(summary_data(s, show_private=False) async for s in empty)
        assert "[]\n" == capsys.readouterr().out


# --------------------------------------------------------------------------- query plans

#: A plan step reading a whole table or index.
_SCAN = re.compile(r"^SCAN (\w+)")


async def traced(ledger: Ledger, work: object) -> list[str]:
    """The statements ``work`` (an awaitable) runs on the ledger's connection."""
    statements: list[str] = []
    raw = ledger._connection._conn  # the sqlite3 connection aiosqlite drives
    raw.set_trace_callback(statements.append)
    try:
        await work  # type: ignore[misc]
    finally:
        raw.set_trace_callback(None)
    return [s for s in statements if s.lstrip().upper().startswith("SELECT")]


def plan(path: Path, statement: str) -> list[str]:
    with closing(sqlite3.connect(path)) as db:
        return [str(row[3]) for row in db.execute("EXPLAIN QUERY PLAN " + statement)]


async def _drain(source: AsyncIterator[object]) -> None:
    async for _item in source:
        pass


async def test_reads_of_nightly_list_and_review_use_indexes(ledger_path: Path) -> None:
    """Every statement the paged reads run (the pages of ``list`` with and without
    ``iter_listed``'s counts, ``list --status``,
    ``list --device``, ``review`` and the nightly job's notable actions, their attempts and
    duplicate counts, an action's duplicates and summary) finds its rows through an index: no
    scan of ``duplicates``, ``history`` or ``attempts``, and actions are walked in order
    through ``actions_by_created`` or looked up by key. What runs once per command over the
    whole ledger (the tally's counts, the devices, the attempts in flight) scans indexes
    only, never a table and never ``history``."""
    async with Ledger.open(ledger_path) as ledger:
        await seed_spread(ledger)
        per_page: list[str] = []
        for chosen in (
            {},
            {"needs_review": True},
            {"notable_only": True},
            {"device": DEVICE_A},
            *({"status": status} for status in Status),
        ):
            source = ledger.iter_summaries(now=LATER, page_size=3, **chosen)  # type: ignore[arg-type]
            per_page += await traced(ledger, _drain(source))
        per_page += await traced(ledger, _drain(ledger.iter_listed(now=LATER, page_size=3)))
        per_page += await traced(ledger, ledger.duplicates("duplicate-000"))
        per_page += await traced(ledger, ledger.summary("duplicate-000"))
        tally = await traced(ledger, ledger.ledger_tally(now=LATER))
        tally += await traced(ledger, ledger.devices())
        tally += await traced(ledger, ledger.in_flight())
    assert any("FROM duplicates" in s or "JOIN duplicates" in s for s in per_page)
    assert any(" LIMIT " in s and "created_at <=" in s for s in per_page)  # a keyset page
    for statement in per_page:
        steps = plan(ledger_path, statement)
        for step in steps:
            scanned = _SCAN.match(step)
            if scanned is None:
                continue
            table = scanned.group(1)
            assert table not in ("duplicates", "history", "attempts", "d", "a"), (
                statement,
                steps,
            )
            if table == "actions":
                assert "actions_by_created" in step, (statement, steps)
    for statement in tally:
        steps = plan(ledger_path, statement)
        for step in steps:
            if step.startswith("SCAN"):
                assert "history" not in step and "USING" in step and "INDEX" in step, (
                    statement,
                    steps,
                )
