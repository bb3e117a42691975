"""docs/getting-started.md works as written on a fresh machine, and following it, then the
README, sends each intended message exactly once.

Its ```sh blocks run in order, line by line, in an empty home directory with no starebrain
or XDG variables (``_doc_steps``): the ``starebrain simulator`` lines start the phone of the
other terminal, each command exits as the page says (``# exit N``, else 0). The only
substitution is the port: 5555 becomes a free one. Then the README's blocks run in the same
home, with that simulated phone for the README's phone. The ground truth is the simulated
phone's own SMS store.
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import _doc_steps
from tests.e2e.test_readme_examples import run_readme

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform != "linux", reason="the page's paths are Linux's (XDG)"),
]

PAGE = _doc_steps.ROOT / "docs" / "getting-started.md"
#: What the page, then the README, mean to send: (number, text) -> their action id.
INTENDED = {
    ("+12025550143", "Your code is 3907"): "code-1",
    ("+12025550143", "Your table is ready"): "table-7",
    ("+12025550188", "Welcome aboard"): "welcome-1",
    ("+12025550143", "Your code is 4821"): "otp-1001",
}
#: The page's lines a fresh machine does not run here: the install (this interpreter's
#: ``starebrain`` is first on PATH).
_INSTALL = "python3 -m venv .venv"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def page_lines(port: int) -> list[_doc_steps.Line]:
    """The page's command lines in order, its port 5555 given as ``port``."""
    found = []
    for block in _doc_steps.blocks(PAGE):
        assert "sh" == block.language, block.code
        for line in _doc_steps.lines(block):
            if line.command.startswith(_INSTALL):
                continue
            command = line.command.replace("--port 5555", f"--port {port}")
            found.append(_doc_steps.Line(command.replace(":5555", f":{port}"), line.exit_status))
    return found


@pytest.fixture
def reader(tmp_path: Path, ledger_target: Path | str) -> Iterator[_doc_steps.Reader]:
    """A newcomer with an empty home directory (``$STAREBRAIN_DB`` naming the PostgreSQL
    ledger on that backend, nothing on SQLite's: the default ledger); their simulated phone
    is stopped at the end."""
    home = tmp_path / "home"
    home.mkdir()
    env = _doc_steps.fresh_environment(home)
    if isinstance(ledger_target, str):
        env["STAREBRAIN_DB"] = ledger_target
    logs = tmp_path / "logs"
    logs.mkdir()
    reader = _doc_steps.Reader(home, env, logs)
    try:
        yield reader
    finally:
        reader.stop_simulator()


def _status(reader: _doc_steps.Reader, action_id: str) -> str:
    result = reader.run(["starebrain", "status", action_id, "--json"], timeout=60)
    assert 0 == result.returncode, result.stderr
    return str(json.loads(result.stdout)["status"])


def test_the_page_shows_what_it_says() -> None:
    """The page starts the simulator, loses a reply (exit 3) and reconciles it, holds a
    message for approval (exit 8), uses `--body-file -`, and its only non-shell block is the
    MCP client's stdio configuration."""
    lines = [line.command for line in page_lines(5555)]
    statuses = {line.command.split()[1]: line.exit_status for line in page_lines(5555)}
    assert 2 == sum(line.startswith("starebrain simulator ") for line in lines)
    assert any("--fault hang-after-send" in line for line in lines)
    assert (3, 0, 8) == (
        next(line.exit_status for line in page_lines(5555) if "--wait 8" in line.command),
        statuses["reconcile"],
        next(line.exit_status for line in page_lines(5555) if "--policy" in line.command),
    )
    assert any("--body-file -" in line for line in lines)
    text = PAGE.read_text(encoding="utf-8")
    assert '"command":' in text and '"args": ["mcp"' in text


@pytest.mark.long(40)
def test_the_page_then_the_readme_send_each_message_once(
    reader: _doc_steps.Reader, ledger_target: Path | str
) -> None:
    """Every line of the page runs as written and exits as it says; the README followed
    after it, with the same simulated phone, resumes instead of sending again where it
    names an action already sent. The phone's own store holds each intended message
    exactly once, and the ledger every entry point uses says each was sent."""
    port = _free_port()
    for line in page_lines(port):
        reader.run_line(line)
    assert reader.simulator is not None  # the page leaves the phone running: the README's
    address = f"127.0.0.1:{port}"
    run_readme(reader, {"192.168.1.20:5555": address, "127.0.0.1:5555": address})

    assert ("SUCCEEDED", "SUCCEEDED", "SUCCEEDED") == tuple(
        _status(reader, action_id) for action_id in ("code-1", "table-7", "otp-1001")
    )
    assert _status(reader, "welcome-1") in {"VERIFYING", "SUCCEEDED"}
    reader.stop_simulator()
    store = reader.home / ".config" / "starebrain" / "simulator" / "sms.db"
    assert dict.fromkeys(INTENDED, 1) == dict(_doc_steps.sent_messages(store))
    if not isinstance(ledger_target, str):
        assert (reader.home / ".local" / "share" / "starebrain" / "ledger.db").exists()


def test_the_site_starts_here_and_its_index_lists_every_page() -> None:
    """The site's first page is this one (mkdocs.yml's nav), and docs/index.md, which the
    site shows at its root, links every other page: it stands on its own."""
    docs = _doc_steps.ROOT / "docs"
    nav = (_doc_steps.ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:\n", 1)[1]
    assert "  - Getting started: getting-started.md" == nav.splitlines()[0]
    index = (docs / "index.md").read_text(encoding="utf-8")
    pages = sorted(page.name for page in docs.glob("*.md") if page.name != "index.md")
    assert [] == [page for page in pages if f"]({page}" not in index]
