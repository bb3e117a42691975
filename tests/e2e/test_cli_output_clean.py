"""Hostile text in the ledger (bodies, errors, operator names, action ids) is shown, never
obeyed: text output shows escape and control characters as their escapes (``\\x1b``, never
the raw character, never silently dropped), the Markdown archive escapes its syntax, and
JSON keeps the data exact with nothing raw a terminal could act on."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from starebrain_actions import Ledger, RetryPolicy, SmsIntent, fail_delivery, note_error
from starebrain_actions.orchestration.nightly.archive import archive_report, write_json_atomic
from starebrain_actions.orchestration.nightly.report import DeviceLine, NightlyReport, build_report
from starebrain_actions.orchestration.nightly.text import report_markdown
from starebrain_actions.render.sanitize import clean_text, md_code, md_text
from tests.e2e.conftest import RECIPIENT, RunCli, json_of

#: A body that clears the screen, retitles the window, rings the bell, forges a line and
#: reverses the text after it (8-bit CSI at the end).
HOSTILE_BODY = "Your code\x1b[2J\x1b]0;owned\x07 is 4821\r\nstatus: SUCCEEDED\u202etxt\x9b31m"
#: What a person is shown of it: every control character as its escape, inert and visible.
SHOWN_BODY = "Your code\\x1b[2J\\x1b]0;owned\\x07 is 4821↵status: SUCCEEDED\\u202etxt\\x9b31m"
#: A phone's error text carrying a hyperlink (OSC 8) and a cursor move.
HOSTILE_ERROR = "read failed: \x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\ \x1b[1Ahere"
SHOWN_ERROR = "read failed: \\x1b]8;;http://evil.example\\x1b\\click\\x1b]8;;\\x1b\\ \\x1b[1Ahere"
HOSTILE_OPERATOR = "mal\x1b[31mlory\x07"
#: An action id (printable ASCII, no spaces, so allowed) full of Markdown syntax.
MARKDOWN_ID = "[click](http://evil.example)<img/src=x>|`x`*y*"
#: An error with Markdown and HTML in it.
MARKDOWN_ERROR = "timeout | <b>bold</b> [x](y) &#x202e;"
#: Anything a terminal may act on (line feeds aside).
CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


async def seed_hostile(path: Path, device: str) -> None:
    """An in-flight action with a hostile body and error, and one whose id is Markdown."""
    async with Ledger.open(path) as ledger:
        await ledger.create_action("hostile-1", SmsIntent(recipient=RECIPIENT, body=HOSTILE_BODY))
        record = await ledger.begin_attempt("hostile-1", device)
        await ledger.apply(note_error(record, HOSTILE_ERROR, now=ledger.now()))
        await ledger.create_action(
            MARKDOWN_ID,
            SmsIntent(recipient=RECIPIENT, body="hi"),
            RetryPolicy(
                settle_after=timedelta(milliseconds=300),
                framework_settle_after=timedelta(milliseconds=200),
                maximum_attempts=1,
            ),
        )
        other = await ledger.begin_attempt(MARKDOWN_ID, "10.0.0.9:5555")
        await ledger.apply(fail_delivery(other, reason=MARKDOWN_ERROR, now=ledger.now()))


@pytest.fixture
def hostile_ledger(ledger_path: Path, closed_port: int) -> Path:
    """The ledger of ``seed_hostile``, its in-flight attempt on a dead port."""
    asyncio.run(seed_hostile(ledger_path, f"127.0.0.1:{closed_port}"))
    return ledger_path


def test_clean_text_shows_what_a_terminal_would_obey() -> None:
    """Escape sequences (7- and 8-bit), C0/C1 controls and bidi overrides are shown as their
    escapes (issue 36: they were dropped, so a reviewer saw "esc red" where the phone got
    escape codes); line breaks become ``↵``; printable text, emoji and right-to-left letters
    stay."""
    assert SHOWN_BODY == clean_text(HOSTILE_BODY)
    assert SHOWN_ERROR == clean_text(HOSTILE_ERROR)
    assert "mal\\x1b[31mlory\\x07" == clean_text(HOSTILE_OPERATOR)
    assert "esc \\x1b[31mred\\x1b[0m bell\\x07" == clean_text("esc \x1b[31mred\x1b[0m bell\x07")
    assert "a b↵c↵d" == clean_text("a\tb\nc\rd")
    assert "ok 👍 שלום" == clean_text("ok 👍 שלום")
    assert "\\x1bPq#0;2;0;0;0\\x1b\\x" == clean_text("\x1bPq#0;2;0;0;0\x1b\\x")  # DCS (sixel)
    assert None is CONTROL.search(clean_text(HOSTILE_BODY + HOSTILE_ERROR + HOSTILE_OPERATOR))


@pytest.mark.parametrize("unit", ["\x1b]", "\x9d", "\x90", "\x1bP", "\x9b", "\x1b[0", "\x1b"])
def test_clean_text_is_linear_on_hostile_input(unit: str) -> None:
    """A body as long as a send allows (128 KiB) made of unterminated escape introducers is
    cleaned in well under a second (no quadratic backtracking)."""
    text = unit * (131_072 // len(unit))
    started = time.perf_counter()
    assert None is CONTROL.search(clean_text(text))
    assert time.perf_counter() - started < 1.0


def test_status_and_history_show_hostile_text_inertly(
    hostile_ledger: Path, run_cli: RunCli
) -> None:
    """`status --show-private`, `history --show-private`, `list` and `review` print the
    hostile values without one control character; the body cannot forge a line."""
    status = run_cli("status", "hostile-1", "--show-private")
    assert 0 == status.exit_code, status.output
    assert SHOWN_BODY in status.stdout and SHOWN_ERROR in status.stdout
    assert not any(line.startswith("status: SUCCEEDED") for line in status.stdout.splitlines())
    for args in (
        ["status", "hostile-1", "--show-private"],
        ["history", "hostile-1", "--show-private"],
        ["status", MARKDOWN_ID],
        ["list"],
        ["review"],
    ):
        result = run_cli(*args)
        assert 0 == result.exit_code, result.output
        assert None is CONTROL.search(result.stdout), (args, result.stdout)
    assert MARKDOWN_ID in run_cli("list").stdout  # text output shows ids as they are


def test_operator_and_reason_are_shown_inertly(hostile_ledger: Path, run_cli: RunCli) -> None:
    """An operator name and a reason with escape codes are kept exactly in the ledger (JSON)
    and shown as their escapes, inert, in `history` and `status`."""
    result = run_cli(
        "resolve", "hostile-1", "--as", "not-sent", "--reason", "phone\x1b[8m off\x07",
        "--operator", HOSTILE_OPERATOR,
    )  # fmt: skip
    assert 0 == result.exit_code, result.output
    assert None is CONTROL.search(result.stdout)
    history = run_cli("history", "hostile-1")
    assert "operator:mal\\x1b[31mlory\\x07" in history.stdout
    assert "reason=phone\\x1b[8m off\\x07" in history.stdout
    assert None is CONTROL.search(history.stdout)
    entries = json_of(run_cli("history", "hostile-1", "--json"))
    assert f"operator:{HOSTILE_OPERATOR}" == entries[-1]["actor"]
    assert "phone\x1b[8m off\x07" == entries[-1]["evidence"]["reason"]


def test_json_keeps_data_exact_and_escaped(hostile_ledger: Path, run_cli: RunCli) -> None:
    """`--json` decodes to exactly what the ledger holds, while its text carries no raw
    control, C1 or bidi character (all are ``\\u`` escapes)."""
    result = run_cli("status", "hostile-1", "--json", "--show-private")
    assert 0 == result.exit_code, result.output
    assert None is CONTROL.search(result.stdout.replace("\n", ""))
    data = json_of(result)
    assert HOSTILE_BODY == data["action"]["intent"]["body"]
    assert HOSTILE_ERROR == data["latest"]["last_error"]
    assert "\\u009b" in result.stdout and "\\u202e" in result.stdout


def test_markdown_escaping_makes_values_literal() -> None:
    """`md_text` turns links, images, HTML, entities, emphasis, code and cell breaks into
    literal text; `md_code` survives backticks inside."""
    markdown = MarkdownIt("commonmark").enable("table")
    for value in (MARKDOWN_ID, "&#x202e;evil", "# heading", "- item", "1. item", "**b** _i_"):
        html = markdown.render(md_text(value, block_start=True))
        assert re.fullmatch(r"<p>[^<]*</p>\n", html), (value, html)
        item = markdown.render("- " + md_text(value, block_start=True))
        assert re.fullmatch(r"<ul>\n<li>[^<]*</li>\n</ul>\n", item), (value, item)
    assert "127.0.0.1:5555 | -" == md_text("127.0.0.1:5555 | -").replace("\\|", "|")
    assert "a `b` c" == _code_text(markdown.render(md_code("a `b` c")))
    assert "IN_FLIGHT" == md_text("IN_FLIGHT")  # nothing to escape inside a word


def _code_text(html: str) -> str:
    match = re.fullmatch(r"<p><code>(.*)</code></p>\n", html)
    assert match is not None, html
    return match.group(1).replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")


def test_nightly_archive_and_summary_are_inert(
    hostile_ledger: Path, run_cli: RunCli, tmp_path: Path
) -> None:
    """The nightly Markdown archive renders the hostile id and errors as plain text (no
    link, image or HTML; every table row keeps its columns); the text summary has no
    control character."""
    archive = tmp_path / "archive"
    result = run_cli("nightly", "--archive", str(archive))
    assert 1 == result.exit_code, result.output
    assert None is CONTROL.search(result.stdout)
    assert MARKDOWN_ID in result.stdout
    text = next(archive.iterdir()).read_text(encoding="utf-8")
    assert None is CONTROL.search(text.replace("\n", ""))
    html = MarkdownIt("commonmark").enable("table").render(text)
    assert "<a " not in html and "<img" not in html and "<b>" not in html
    assert "[click](http://evil.example)&lt;img/src=x&gt;|<code>" not in html
    assert "[click](http://evil.example)&lt;img/src=x&gt;|`x`*y*" in html
    assert_tables_keep_their_columns(html)


def assert_tables_keep_their_columns(html: str) -> None:
    """Every row of every table has as many cells as its header."""
    for table in re.findall(r"<table>.*?</table>", html, re.DOTALL):
        header = len(re.findall(r"<th>", table.split("</thead>")[0]))
        for row in re.findall(r"<tr>(.*?)</tr>", table.split("</thead>")[1], re.DOTALL):
            assert header == len(re.findall(r"<td>", row)), row


def unreachable_report(device: str, error: str, ledger_path: Path) -> NightlyReport:
    """A nightly report of one unreachable device with an attempt in flight."""
    line = DeviceLine(
        device=device,
        reachable=False,
        error=error,
        mode=None,
        round_trips=0,
        changes=(),
        duplicates_recorded=0,
        in_flight_after=1,
    )
    return build_report(
        ledger_path=ledger_path,
        now=datetime.now(UTC),
        duration_s=0.1,
        devices=[line],
        summaries=[],
    )


def test_report_markdown_escapes_every_field(tmp_path: Path) -> None:
    """Every value the report shows (ledger path, device, errors, ids, attention) renders as
    the literal text it holds: no link, no HTML, no entity, no extra cell."""
    report = unreachable_report(
        "[dev](http://x)|", MARKDOWN_ERROR + HOSTILE_ERROR, tmp_path / "led`ger <x>.db"
    )
    html = MarkdownIt("commonmark").enable("table").render(report_markdown(report))
    assert "<a " not in html and "<b>" not in html and "&#x202e;" not in html
    assert "timeout | &lt;b&gt;bold&lt;/b&gt; [x](y) &amp;#x202e;read failed: \\x1b]8;;" in html
    assert "[dev](http://x)|" in html
    assert "led`ger &lt;x&gt;.db</code>" in html
    assert_tables_keep_their_columns(html)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_report_file_and_archive_commit_message_are_inert(tmp_path: Path) -> None:
    """A device name holding an escape sequence and a bidi override (names come from users)
    reaches the JSON report file only as ``\\u`` escapes, and the archive's git commit
    message (the attention line) without them."""
    report = unreachable_report("dev\u202e\x1b[31m", HOSTILE_ERROR, tmp_path / "ledger.db")
    assert report.needs_person
    written = tmp_path / "report.json"
    write_json_atomic(written, {"attention": list(report.attention), "error": HOSTILE_ERROR})
    text = written.read_text(encoding="utf-8")
    assert None is CONTROL.search(text.replace("\n", ""))
    assert "\\u202e" in text and "\\u001b" in text
    archive = tmp_path / "archive"
    archive.mkdir()
    subprocess.run(["git", "init", "-q", str(archive)], check=True)
    result = archive_report(archive, report)
    assert result.commit is not None, result
    message = subprocess.run(
        ["git", "-C", str(archive), "log", "-1", "--format=%B"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert "unreachable with 1 attempt(s) in flight" in message
    assert None is CONTROL.search(message.replace("\n", ""))
