"""Ids are never cut: `list`, `review`, `status` and `history` on a real 80-column terminal,
piped output one line per row, and the nightly summary and archive with whole dispatch ids."""

from __future__ import annotations

import asyncio
import fcntl
import io
import json
import os
import pty
import re
import select
import struct
import subprocess
import tempfile
import termios
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import pytest
from rich.cells import cell_len

from starebrain_actions import (
    Ledger,
    MatchVerdict,
    RetryPolicy,
    SmsIntent,
    confirm_delivery,
    fail_delivery,
    try_accept,
)
from starebrain_actions.render.output import Output
from starebrain_actions.render.records import render_history, render_summary
from tests.e2e.conftest import BODY, RECIPIENT, RunCli, starebrain_command

#: A 60-character action id, as an agent that puts its order number in the id writes.
LONG_ID = "order-2026-11-29-customer-0000123456-reminder-second-notice1"
#: A device address as long as an IPv4 one gets.
DEVICE = "192.168.100.200:55555"
#: A proof of absence long enough to need wrapping, with the device inside it.
LONG_REASON = (
    f"the phone {DEVICE} marked the message failed (type 5, error_code 1) after the radio"
    " gave up; nothing went out, so another attempt is safe"
)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


async def seed_long_ids(path: Path) -> list[str]:
    """One action with a 60-character id and two attempts on ``DEVICE``: the first failed
    with a long reason, the second sent the wrong text (MISMATCH, budget spent, review).
    Returns the two dispatch ids."""
    policy = RetryPolicy(
        settle_after=timedelta(milliseconds=300),
        framework_settle_after=timedelta(milliseconds=200),
        maximum_attempts=2,
        initial_interval=timedelta(0),
    )
    async with Ledger.open(path) as ledger:
        await ledger.create_action(LONG_ID, SmsIntent(recipient=RECIPIENT, body=BODY), policy)
        first = await ledger.begin_attempt(LONG_ID, DEVICE)
        await ledger.apply(fail_delivery(first, reason=LONG_REASON, now=ledger.now()))
        second = await ledger.begin_attempt(LONG_ID, DEVICE)
        confirm = confirm_delivery(second, provider_object_id=4242, now=ledger.now())
        await ledger.apply(confirm)
        verdict = MatchVerdict(matched=False, reason="body differs", details={"body": "x"})
        await ledger.apply(try_accept(confirm.after, verdict, now=ledger.now()))
        await ledger.create_action("short-1", SmsIntent(recipient=RECIPIENT, body=BODY))
    return [first.dispatch_id, second.dispatch_id]


@pytest.fixture
def dispatch_ids(ledger_path: Path) -> list[str]:
    """The ledger of ``seed_long_ids``; its dispatch ids."""
    return asyncio.run(seed_long_ids(ledger_path))


def run_in_terminal(args: Sequence[str], *, columns: int = 80, timeout: float = 60) -> str:
    """Run the installed `starebrain ARGS` with stdout on a pseudo-terminal ``columns`` wide,
    as a person at a terminal does; return what the terminal received (with its escape
    codes, ``\\r\\n`` turned into ``\\n``)."""
    main_fd, terminal_fd = pty.openpty()
    fcntl.ioctl(terminal_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "xterm-256color"}
    for name in ("STAREBRAIN_DB", "STAREBRAIN_DEVICE", "NO_COLOR"):
        env.pop(name, None)
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(
            [*starebrain_command(), *args], stdout=terminal_fd, stderr=errors, env=env
        )
        os.close(terminal_fd)
        received = bytearray()
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                ready, _, _ = select.select([main_fd], [], [], 0.5)
                if not ready:
                    if process.poll() is not None:
                        break
                    continue
                try:
                    chunk = os.read(main_fd, 65536)
                except OSError:  # EIO: the command closed the terminal
                    break
                if not chunk:
                    break
                received += chunk
        finally:
            os.close(main_fd)
            code = process.wait(timeout=timeout)
        errors.seek(0)
        assert 0 == code, errors.read().decode(errors="replace")
    return received.decode("utf-8").replace("\r\n", "\n")


def screen_lines(raw: str) -> list[str]:
    """What a person sees: the terminal's lines without escape codes."""
    return ANSI.sub("", raw).splitlines()


def assert_fits(lines: Sequence[str], columns: int = 80) -> None:
    """No line is wider than the terminal."""
    wide = [line for line in lines if cell_len(line) > columns]
    assert [] == wide


def assert_whole(lines: Sequence[str], *ids: str) -> None:
    """Each id appears whole on one line."""
    for value in ids:
        assert any(value in line for line in lines), f"{value} cut or missing:\n" + "\n".join(lines)


def assert_headers(lines: Sequence[str], headers: Sequence[str]) -> None:
    """Every column is shown: each header is on a header line."""
    text = "\n".join(lines)
    for header in headers:
        assert re.search(rf"(^|  ){re.escape(header)}(  |$)", text, re.MULTILINE), header


@pytest.mark.usefixtures("dispatch_ids")
def test_list_at_80_columns_keeps_every_id_and_column(ledger_path: Path) -> None:
    """`list` on an 80-column terminal: rich output (bold headers), no line wider than the
    terminal, the 60-character id and the device whole, every column present."""
    raw = run_in_terminal(["--db", str(ledger_path), "list"])
    assert "\x1b[1m" in raw  # the terminal layout, not the piped one
    lines = screen_lines(raw)
    assert_fits(lines)
    assert_whole(lines, LONG_ID, DEVICE, "short-1")
    assert_headers(lines, ["action", "status", "to", "attempts", "device", "age", "review"])


@pytest.mark.usefixtures("dispatch_ids")
def test_review_at_80_columns_keeps_every_id(ledger_path: Path) -> None:
    """`review` on an 80-column terminal: the id a person copies into `resolve` is whole, the
    reasons are all there, and the hint wraps between words."""
    lines = screen_lines(run_in_terminal(["--db", str(ledger_path), "review"]))
    assert_fits(lines)
    assert_whole(lines, LONG_ID, "BUDGET_EXHAUSTED")
    assert_headers(lines, ["action", "status", "reasons", "to", "attempts", "duplicates", "age"])
    assert "`starebrain resolve ID --as sent|not-sent --reason TEXT`" in " ".join(lines)


def test_status_at_80_columns_keeps_every_id(ledger_path: Path, dispatch_ids: list[str]) -> None:
    """`status` on an 80-column terminal: both dispatch ids, the device and the whole
    fingerprint are on one line each; the long last error wraps, every word kept."""
    lines = screen_lines(run_in_terminal(["--db", str(ledger_path), "status", LONG_ID]))
    assert_fits(lines)
    assert_whole(lines, LONG_ID, DEVICE, *dispatch_ids)
    fingerprint = SmsIntent(recipient=RECIPIENT, body=BODY).fingerprint
    assert_whole(lines, fingerprint)
    assert_headers(lines, ["#", "v", "dispatch id", "device", "delivery", "acceptance"])
    assert_headers(lines, ["sms _id", "dispatched", "review", "last error"])
    assert " ".join(LONG_REASON.split()) in " ".join(" ".join(lines).split())
    assert not any(LONG_REASON in line for line in lines)  # it did wrap


def test_history_at_80_columns_keeps_every_id(ledger_path: Path, dispatch_ids: list[str]) -> None:
    """`history` on an 80-column terminal: every dispatch id whole (never its first 8
    characters only), the device inside the evidence whole."""
    lines = screen_lines(run_in_terminal(["--db", str(ledger_path), "history", LONG_ID]))
    assert_fits(lines)
    assert_whole(lines, *dispatch_ids)
    assert_whole(lines, f"device={DEVICE}")
    text = "\n".join(lines)
    assert (2, 3) == (text.count(dispatch_ids[0]), text.count(dispatch_ids[1]))
    assert_headers(lines, ["#", "at", "dispatch id", "event", "delivery", "acceptance"])
    assert_headers(lines, ["actor", "evidence"])


def test_piped_output_is_one_line_per_row(run_cli: RunCli, dispatch_ids: list[str]) -> None:
    """Piped (not a terminal), nothing wraps and no escape code is written: each row is one
    line holding its whole id, for grep and awk."""
    listed = run_cli("list")
    assert 0 == listed.exit_code, listed.output
    assert "\x1b" not in listed.stdout
    row = next(line for line in listed.stdout.splitlines() if line.startswith(LONG_ID))
    assert ["MISMATCH", DEVICE] == [word for word in row.split() if word in ("MISMATCH", DEVICE)]
    history = run_cli("history", LONG_ID).stdout.splitlines()
    assert 6 == len(history)  # the header and five transitions
    assert all(line == line.rstrip() for line in history)
    status = run_cli("status", LONG_ID).stdout
    failed_row = next(line for line in status.splitlines() if dispatch_ids[0] in line)
    assert failed_row.endswith(LONG_REASON)


async def test_narrow_output_never_cuts_an_id(ledger_path: Path, dispatch_ids: list[str]) -> None:
    """However narrow the width, a table never cuts an id: a column too wide for any line
    turns the rows into blocks, an id wider than the line stands alone on its own line."""
    async with Ledger.open(ledger_path) as ledger:
        summary = await ledger.summary(LONG_ID)
        entries = await ledger.history(LONG_ID)
    for width in (40, 60, 80, 100, 200):
        stream = io.StringIO()
        out = Output(rich=True, stream=stream, width=width)
        render_summary(out, summary, show_private=False)
        render_history(out, entries, show_private=False)
        lines = stream.getvalue().splitlines()
        assert_whole(lines, LONG_ID, DEVICE, *dispatch_ids)
        assert [] == [line for line in lines if cell_len(line) > width and len(line.split()) > 1], (
            width
        )


def test_nightly_summary_and_archive_keep_whole_dispatch_ids(
    seeded_ledger: Path, run_cli: RunCli, tmp_path: Path
) -> None:
    """The nightly summary and its Markdown archive name attempts by their whole dispatch
    ids (a short prefix copied into `resolve --dispatch-id` names nothing)."""
    asyncio.run(seed_long_ids(seeded_ledger))
    archive = tmp_path / "archive"
    result = run_cli("nightly", "--archive", str(archive), "--report", str(tmp_path / "r.json"))
    assert 1 == result.exit_code, result.output
    report = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    named = {line["dispatch_id"] for line in report["unresolved"]}
    named |= {line["dispatch_id"] for line in report["duplicate_rows"]}
    assert named  # the seeded ledger has an unresolved attempt and a duplicate
    markdown = next(archive.iterdir()).read_text(encoding="utf-8")
    for dispatch_id in named:
        assert dispatch_id in result.stdout
        assert dispatch_id in markdown
    assert LONG_ID in result.stdout and LONG_ID in markdown
