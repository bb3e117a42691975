"""Every sample output in docs/cli.md and docs/nightly.md is produced by this test.

One scenario runs the real CLI against two simulated phones and a dead address; each
documented sample (a fenced block after an ``<!-- sample: NAME -->`` comment) must equal
what the scenario printed, modulo what changes from run to run (dispatch ids, times, ages,
durations, the phones' ports, commit ids, pids, column padding). After a change to the
output, regenerate the samples with::

    STAREBRAIN_UPDATE_DOCS=1 python -m pytest tests/e2e/test_cli_output_docs.py

which rewrites only the sample blocks, then review the diff.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from android_bridge.simulator import SimulatedPhone
from starebrain_actions import AcceptanceState, Ledger, SmsIntent, record_submission
from starebrain_actions.cli.main import main
from starebrain_actions.core.decisions import settle_time
from starebrain_actions.orchestration.nightly.lock import nightly_lock
from tests.conftest import PhoneFactory

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("cli.md", "nightly.md")
UPDATE = os.environ.get("STAREBRAIN_UPDATE_DOCS") == "1"
#: What the samples call the two phones and the dead address. Five digits like any port the
#: test gets, so substituting them keeps columns aligned; in the same order as the test's.
PHONE_A, PHONE_B, DEAD = "127.0.0.1:55557", "127.0.0.1:55558", "127.0.0.1:35931"
#: Where the samples say the files live.
SRV = "/srv/sms"
#: A line of the log on stderr (JSON lines when stderr is not a terminal).
_LOG_LINE = re.compile(r'^\{"[a-z_]+": .*"event": ')
MARKER = re.compile(r"^<!-- sample: ([a-z0-9-]+) -->\n(`{3,})([a-z]*)\n(.*?)^\2$", re.M | re.S)
SENT = 2
#: The environment of a command run with the default settle times (the tests' own are short).
DEFAULT_SETTLING: Mapping[str, str | None] = {
    "STAREBRAIN_SETTLE_AFTER": None,
    "STAREBRAIN_FRAMEWORK_SETTLE_AFTER": None,
}


# --------------------------------------------------------------------------- the scenario


@dataclass
class Scenario:
    """The phones, the key, and how to show the test's values as the samples do."""

    phone_a: SimulatedPhone
    phone_b: SimulatedPhone
    dead_port: int
    key: Path
    workdir: Path
    samples: dict[str, str] = field(default_factory=dict)

    @property
    def shown(self) -> Mapping[str, str]:
        """The test's value -> the sample's."""
        return {
            str(self.phone_a.port): PHONE_A.rsplit(":", 1)[1],
            str(self.phone_b.port): PHONE_B.rsplit(":", 1)[1],
            str(self.dead_port): DEAD.rsplit(":", 1)[1],
        }

    def show(self, text: str) -> str:
        """``text`` with the test's ports and directory as the samples show them."""
        text = text.replace(str(self.workdir), SRV)
        ports = self.shown
        return re.sub(
            r"\b(" + "|".join(map(re.escape, ports)) + r")\b", lambda m: ports[m.group()], text
        )

    def real(self, arg: str) -> str:
        """A sample's argument as the test runs it."""
        return (
            arg.replace(PHONE_A, self.phone_a.serial)
            .replace(PHONE_B, self.phone_b.serial)
            .replace(DEAD, f"127.0.0.1:{self.dead_port}")
        )

    async def run(
        self,
        *args: str,
        phone: bool = False,
        stderr: bool = False,
        status: bool = False,
        head: int | None = None,
        tail: int | None = None,
        env: Mapping[str, str | None] | None = None,
    ) -> tuple[int, str]:
        """Run ``starebrain --db ledger.db ARGS`` (with ``--key`` when it talks to phones);
        return its exit status and the sample text: the command line, what it printed
        (stdout, and stderr too when asked, interleaved as on a terminal, log lines left out;
        ``head``/``tail`` lines), and ``echo $?``."""
        argv = ["--db", "ledger.db", *args]
        real = [self.real(arg) for arg in argv] + (["--key", str(self.key)] if phone else [])
        result = await asyncio.to_thread(
            CliRunner().invoke, main, real, env=env, catch_exceptions=False
        )
        # with stderr, both streams as a terminal shows them, in the order written, without
        # the log's lines (JSON on a pipe: warnings that repeat what the command says)
        lines = [
            line
            for line in (result.output if stderr else result.stdout).splitlines()
            if not (stderr and _LOG_LINE.match(line))
        ]
        shown = "$ starebrain " + shlex.join(argv)
        if tail is not None:
            lines, shown = lines[-tail:], f"{shown} | tail -{tail}"
        if head is not None:
            lines = [*lines[:head], "…"]
        text = "\n".join([shown, *lines])
        if status:
            text += f"\n$ echo $?\n{result.exit_code}"
        return result.exit_code, self.show(text)


async def lost_reply(
    phone: SimulatedPhone,
    action_id: str,
    to: str,
    body: str,
    ago: timedelta = timedelta(0),
) -> None:
    """An attempt, dispatched ``ago``, whose message went out but whose reply was lost: the
    phone's sent box has the row, the ledger still says PENDING. (The default policy: its
    row settles 30 minutes after the dispatch.)"""
    async with Ledger.open(Path("ledger.db")) as ledger:
        then = ledger.now() - ago
        await ledger.create_action(action_id, SmsIntent(recipient=to, body=body), now=then)
        record = await ledger.begin_attempt(action_id, phone.serial, now=then)
        sent_ms = phone.now_ms() - int(ago.total_seconds() * 1000)
        await ledger.apply(
            record_submission(
                record, watermark_id=phone.store.max_id(), device_clock_ms=sent_ms, now=then
            )
        )
    phone.store.insert_outgoing(to, body, date_ms=sent_ms + 200, message_type=SENT)


async def stale_receipt(
    phone: SimulatedPhone, action_id: str, to: str, body: str, ago: timedelta
) -> None:
    """A sender killed after committing its receipt ``ago``, before its send script ran: the
    attempt holds the phone, with the phone's fence epoch, and nothing went out."""
    async with Ledger.open(Path("ledger.db")) as ledger:
        sent = await ledger.attempts("otp-1001")
        epoch = sent[0].evidence["fence_epoch"]  # this phone's, as every send records it
        then = ledger.now() - ago
        await ledger.create_action(action_id, SmsIntent(recipient=to, body=body), now=then)
        await ledger.begin_attempt(
            action_id, phone.serial, now=then, evidence={"fence_epoch": epoch}
        )


async def judged(s: Scenario, action_id: str, device: str) -> None:
    """Read ``device`` (``starebrain reconcile``, output not shown) until the latest attempt
    of ``action_id`` is judged: its acceptance written. A read begun once its row had settled
    (``settles_at``, noted at its confirmation) judges it, so that read is the last."""
    last_read: datetime | None = None
    while True:
        async with Ledger.open(Path("ledger.db")) as ledger:
            latest = (await ledger.summary(action_id)).latest
            now = ledger.now()
        assert latest is not None, action_id
        if latest.acceptance is not AcceptanceState.PENDING:
            return
        due = settle_time(latest)
        assert due is not None, latest  # a confirmed row notes when it settles
        assert last_read is None or last_read < due, f"read after it settled: {latest}"
        last_read = now
        code, text = await s.run("reconcile", "--device", device, phone=True)
        assert 0 == code, text


async def play(s: Scenario) -> None:
    """The story the samples tell, in order; fills ``s.samples``."""
    a, b = PHONE_A, PHONE_B
    send = ("send", "--device")
    code, s.samples["send"] = await s.run(
        *send, a, "--to", "+12025550100", "--body", "Your code is 4821", "--action-id",
        "otp-1001", phone=True, status=True,
    )  # fmt: skip
    assert 0 == code, s.samples["send"]
    code, s.samples["send-again"] = await s.run(
        *send, a, "--to", "+12025550100", "--body", "Your code is 4821", "--action-id",
        "otp-1001", phone=True, head=2,
    )  # fmt: skip
    assert 0 == code, s.samples["send-again"]
    # the default settle time (30 minutes), not the story's: a message the messaging app sent
    # settles long after --wait
    code, s.samples["send-settling"] = await s.run(
        *send, a, "--to", "+12025550107", "--body", "Your room is ready", "--action-id",
        "room-12", "--wait", "1", "--send-path", "ui", phone=True, status=True,
        env=DEFAULT_SETTLING,
    )  # fmt: skip
    assert 6 == code, s.samples["send-settling"]
    # the messaging app's faults: these sends go through the app (their commands are not shown)
    s.phone_a.inject_fault("duplicate-send")
    await s.run(
        *send, a, "--to", "+12025550101", "--body", "Your table is ready", "--action-id",
        "table-17", "--send-path", "ui", phone=True,
    )  # fmt: skip
    # its send stops at the duplicate (a person must rule) before its row settles: judged
    # now, not by a read of the next send among that send's own history rows
    await judged(s, "table-17", a)
    s.phone_a.inject_fault("mangle-body")
    # the default settle time: its resend after `retry` is left settling by `resume`
    await s.run(
        *send, a, "--to", "+12025550102", "--body", "Meeting moved to 3pm", "--action-id",
        "meet-3pm", "--max-attempts", "1", "--send-path", "ui", phone=True,
        env=DEFAULT_SETTLING,
    )  # fmt: skip
    code, s.samples["send-changed-intent"] = await s.run(
        *send, a, "--to", "+12025550102", "--body", "Meeting moved to 4pm", "--action-id",
        "meet-3pm", phone=True, stderr=True, status=True,
    )  # fmt: skip
    assert 2 == code, s.samples["send-changed-intent"]
    s.phone_b.inject_fault("stuck-outbox")
    await s.run(
        *send, b, "--to", "+12025550103", "--body", "Your parcel is on its way", "--action-id",
        "parcel-88", "--wait", "1", "--settle-after", "1800", "--send-path", "ui", phone=True,
    )  # fmt: skip
    await lost_reply(
        s.phone_a, "otp-1004", "+12025550106", "Your code is 6088", ago=timedelta(minutes=40)
    )
    _, s.samples["reconcile"] = await s.run("reconcile", "--device", a, phone=True)
    five_hours_ago = datetime.now(UTC) - timedelta(hours=5)
    async with Ledger.open(Path("ledger.db")) as ledger:
        intent = SmsIntent(recipient="+12025550104", body="Your code is 1945")
        await ledger.create_action("otp-1002", intent, now=five_hours_ago)
        await ledger.begin_attempt(
            "otp-1002", s.real(DEAD), now=five_hours_ago, evidence={"fence_epoch": "5d0e4c1a"}
        )
    await lost_reply(s.phone_a, "otp-1003", "+12025550105", "Your code is 7302")
    _, s.samples["status"] = await s.run("status", "table-17")
    _, s.samples["list"] = await s.run("list")
    _, s.samples["history"] = await s.run("history", "meet-3pm")
    _, s.samples["review"] = await s.run("review")
    async with Ledger.open(Path("ledger.db")) as ledger:  # an agent died before its first try
        intent = SmsIntent(recipient="+12025550108", body="Reminder: dentist at 9")
        await ledger.create_action("rem-9", intent, now=datetime.now(UTC) - timedelta(hours=2))
    await nightly(s)
    _, resolved = await s.run(
        "resolve", "table-17", "--as", "sent", "--reason", "app double-sent; customer told",
        "--operator", "alice", head=1,
    )  # fmt: skip
    _, after = await s.run("history", "table-17", tail=1)
    s.samples["resolve"] = resolved + "\n" + after
    await recovery(s)
    empty = s.workdir / "empty"
    empty.mkdir()
    async with Ledger.open(empty / "ledger.db"):
        pass
    os.chdir(empty)
    try:
        _, s.samples["reconcile-nothing"] = await s.run("reconcile")
    finally:
        os.chdir(s.workdir)


async def recovery(s: Scenario) -> None:
    """What holds a phone, a phone that is not ready or does not answer, an operator's
    retry, and `resume` finishing what was started."""
    a, b = PHONE_A, PHONE_B
    send = ("send", "--device")
    await stale_receipt(
        s.phone_a, "pickup-5", "+12025550109", "Your order is ready", ago=timedelta(minutes=2)
    )
    code, s.samples["send-blocked"] = await s.run(
        *send, a, "--to", "+12025550110", "--body", "Your code is 5150", "--action-id",
        "otp-1006", phone=True, stderr=True, status=True, head=3,
    )  # fmt: skip
    assert 0 == code, s.samples["send-blocked"]
    s.phone_b.inject_fault("rcs-send")
    await s.run(
        *send, b, "--to", "+12025550111", "--body", "See you at 8", "--action-id", "chat-8",
        "--wait", "1", "--send-path", "ui", phone=True,
    )  # fmt: skip
    code, s.samples["send-held"] = await s.run(
        *send, b, "--to", "+12025550112", "--body", "Your code is 2718", "--action-id",
        "otp-1007", "--wait", "2", phone=True, stderr=True, status=True, head=4,
        env=DEFAULT_SETTLING,
    )  # fmt: skip
    assert 3 == code, s.samples["send-held"]
    s.phone_a.screen = "locked"  # the messaging app's send script checks the screen
    code, s.samples["send-not-ready"] = await s.run(
        *send, a, "--to", "+12025550113", "--body", "Your code is 3141", "--action-id",
        "otp-1005", "--wait", "1", "--send-path", "ui", phone=True, stderr=True, status=True,
        env=DEFAULT_SETTLING,
    )  # fmt: skip
    assert 7 == code, s.samples["send-not-ready"]
    s.phone_a.screen = "on"
    code, s.samples["send-unreachable"] = await s.run(
        *send, DEAD, "--to", "+12025550114", "--body", "Your code is 1618", "--wait", "1",
        phone=True, stderr=True, status=True,
    )  # fmt: skip
    assert 7 == code, s.samples["send-unreachable"]
    code, s.samples["retry-refused"] = await s.run(
        "retry", "otp-1002", "--reason", "the phone is lost", "--operator", "alice",
        stderr=True, status=True,
    )  # fmt: skip
    assert 1 == code, s.samples["retry-refused"]
    code, s.samples["retry"] = await s.run(
        "retry", "meet-3pm", "--reason", "the app altered the text; fixed its setting",
        "--operator", "alice", status=True,
    )  # fmt: skip
    assert 0 == code, s.samples["retry"]
    # phone B is still held by the chat message: its PLANNED action waits out --wait there
    code, s.samples["resume"] = await s.run(
        "resume", "--device", a, "--device", b, "--wait", "3", phone=True, status=True
    )
    assert 3 == code, s.samples["resume"]


async def nightly(s: Scenario) -> None:
    """The nightly job on the scenario's ledger: its stdout, report, archive, git log, and
    what a second run prints while the first holds the lock."""
    reports = s.workdir / "reports"
    reports.mkdir()
    git = shutil.which("git")
    assert git is not None
    subprocess.run([git, "init", "-q", str(reports)], check=True)
    code, s.samples["nightly-stdout"] = await s.run(
        "nightly", "--report", "reports/latest.json", "--archive", "reports", phone=True,
        status=True,
    )  # fmt: skip
    assert 1 == code, s.samples["nightly-stdout"]
    s.samples["nightly-report-json"] = s.show(
        (reports / "latest.json").read_text(encoding="utf-8").rstrip("\n")
    )
    archived = next(path for path in reports.iterdir() if path.suffix == ".md")
    s.samples["nightly-archive"] = s.show(archived.read_text(encoding="utf-8").rstrip("\n"))
    log = subprocess.run(
        [git, "-C", str(reports), "log", "--format=%h %an %s"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    s.samples["nightly-git-log"] = s.show(
        f"$ git -C {reports} log --format='%h %an %s'\n{log}\n"
        f"$ diff {reports}/2026-11-28.md {reports}/{archived.name}"
    )
    with nightly_lock(s.workdir / "ledger.db"):
        result = await asyncio.to_thread(
            CliRunner().invoke, main, ["--db", str(s.workdir / "ledger.db"), "nightly"]
        )
    assert 0 == result.exit_code, result.output
    s.samples["nightly-busy"] = s.show(result.stdout.strip())


def free_ports(count: int) -> list[int]:
    """``count`` loopback ports nobody listens on, in increasing order."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return sorted(int(sock.getsockname()[1]) for sock in sockets)
    finally:
        for sock in sockets:
            sock.close()


# --------------------------------------------------------------------------- comparing

_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
_VOLATILE = [
    (re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z"), "<time>"),
    (re.compile(r"\b\d{4}-\d\d-\d\d\b"), "<date>"),
    (re.compile(r"\b1\d{12}\b"), "<epoch-ms>"),
    (re.compile(r"\b\d+\.\d+s\b"), "<duration>"),
    (re.compile(r'("(?:duration_s|age_seconds)": )[0-9.]+'), r"\1<n>"),
    (re.compile(r"\b\d+[smhd]\b"), "<age>"),
    (re.compile(r"(committed as |^)[0-9a-f]{7,40}\b", re.M), r"\1<commit>"),
    (re.compile(r"\(pid \d+\)"), "(pid <pid>)"),
    (re.compile(r"\b(fence_epoch=)[0-9a-f]+"), r"\1<epoch>"),
    (re.compile(r"\b(send_window_ms=)\d+"), r"\1<ms>"),
    (re.compile(r'("(?:TotalTime|WaitTime|ThisTime)": ")\d+'), r"\1<ms>"),
    (re.compile(r" {2,}"), " "),
    (re.compile(r" +$", re.M), ""),
]


def normalised(text: str) -> str:
    """``text`` without what changes from run to run: dispatch ids become ``<id1>``,
    ``<id2>``… by first appearance (so a sample still shows which rows share an attempt);
    times, dates, ages, durations, commits and pids become placeholders; padding goes."""
    numbers: dict[str, str] = {}
    text = _UUID.sub(lambda m: numbers.setdefault(m.group(), f"<id{len(numbers) + 1}>"), text)
    for pattern, replacement in _VOLATILE:
        text = pattern.sub(replacement, text)
    return text.strip("\n")


def doc_samples() -> Iterator[tuple[str, str, re.Match[str]]]:
    """(document, sample name, match) for every marked sample in the docs."""
    for doc in DOCS:
        text = (ROOT / "docs" / doc).read_text(encoding="utf-8")
        for match in MARKER.finditer(text):
            yield doc, match.group(1), match


def rewrite(doc: str, samples: Mapping[str, str]) -> None:
    """Replace the sample blocks of ``doc`` with ``samples`` (only those blocks change)."""
    path = ROOT / "docs" / doc
    text = path.read_text(encoding="utf-8")

    def block(match: re.Match[str]) -> str:
        fence, language = match.group(2), match.group(3)
        body = samples[match.group(1)]
        return f"<!-- sample: {match.group(1)} -->\n{fence}{language}\n{body}\n{fence}"

    path.write_text(MARKER.sub(block, text), encoding="utf-8")


# --------------------------------------------------------------------------- tests


def test_every_sample_block_is_marked() -> None:
    """Every console, JSON and Markdown block in the two documents is either a sample made
    here (``<!-- sample: NAME -->``) or names the test that checks it (``<!-- sample checked
    by PATH::TEST -->``, a test that exists and reads the document), so none can drift."""
    for doc in DOCS:
        text = (ROOT / "docs" / doc).read_text(encoding="utf-8")
        for match in re.finditer(r"^(`{3,})(console|json|markdown)\n", text, re.M):
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            where = (doc, text[match.start() : match.end() + 60])
            if before.startswith("<!-- sample: "):
                continue
            checked = re.fullmatch(r"<!-- sample checked by (\S+)::(\w+) -->", before)
            assert checked is not None, where
            source = (ROOT / checked.group(1)).read_text(encoding="utf-8")
            assert f"def {checked.group(2)}(" in source, where
            assert doc in source, where


def test_normalised_keeps_what_matters() -> None:
    """Normalising keeps ids, states and words, and tells two dispatch ids apart."""
    one, two = "af488380-11a1-4b01-becb-7ab76a9d94a2", "4adc28c0-a1fa-41c6-8e93-c46f46f71360"
    assert "x <id1> <id2> <id1> SUCCEEDED <age> <time>" == normalised(
        f"x  {one} {two}   {one} SUCCEEDED 5h 2026-11-29T12:50:13.598539Z  "
    )
    assert normalised("otp-1001 SUCCEEDED") != normalised("otp-1002 SUCCEEDED")


@pytest.mark.long(12)
@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
async def test_doc_samples_are_what_the_cli_prints(
    phone_factory: PhoneFactory,
    adb_key_path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each marked sample in docs/cli.md and docs/nightly.md is what the CLI printed in the
    scenario (modulo run-to-run values); every sample the scenario makes is in the docs."""
    for name in ("STAREBRAIN_DB", "STAREBRAIN_READ_AS_SYSTEM", "STAREBRAIN_DEVICE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    dead, port_a, port_b = free_ports(3)
    scenario = Scenario(
        phone_a=await phone_factory(port=port_a),
        phone_b=await phone_factory(port=port_b),
        dead_port=dead,
        key=adb_key_path,
        workdir=tmp_path,
    )
    await play(scenario)
    found = list(doc_samples())
    assert sorted(scenario.samples) == sorted(name for _, name, _ in found)
    if UPDATE:
        for doc in DOCS:
            rewrite(doc, scenario.samples)
        return
    for doc, name, match in found:
        assert normalised(scenario.samples[name]) == normalised(match.group(4)), (doc, name)


def test_the_report_sample_is_the_report(tmp_path: Path) -> None:
    """The JSON sample in nightly.md parses, and has the report's schema version."""
    sample = next(m for _, name, m in doc_samples() if name == "nightly-report-json")
    data = json.loads(sample.group(4))
    assert 1 == data["schema_version"]
