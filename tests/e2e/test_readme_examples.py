"""The README's Python examples (and docs/python.md's) run as written, so they cannot drift
from the API; and the README followed from top to bottom sends each message once.

Each ```python block of README.md and docs/python.md runs as a program of its own, in a fresh
directory with a data directory of its own (the default ledger lands there), against a
simulated phone. The only substitution is the device address on the line marked as the
reader's placeholder (``DEVICE = "…"  # your phone's …``); the ADB key comes through the
documented ``STAREBRAIN_ADB_KEY`` variable. Then the README's shell and Python blocks run in
order, as a reader would run them, in one empty home directory, on either backend.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Final

import attrs
import pytest

from android_bridge.simulator import SimulatedPhone
from starebrain_actions import Ledger
from tests.conftest import PhoneFactory
from tests.e2e import _doc_steps

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
#: The pages whose Python examples run here: the README's agent, docs/python.md's ledger.
EXAMPLES = (ROOT / "README.md", ROOT / "docs" / "python.md")
_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)
_PLACEHOLDER = re.compile(r'^DEVICE = "[^"]*"(  # your phone.*)$', re.MULTILINE)
#: ``print(...)  # WORD, ...``: the README's claim of what the line prints first.
_CLAIM = re.compile(r"^\s*print\(.*\)\s+#\s*([A-Z_]+)\b", re.MULTILINE)


def readme_blocks() -> list[str]:
    """The code of every ```python block of the README and docs/python.md, in order."""
    return [block for page in EXAMPLES for block in _BLOCK.findall(page.read_text("utf-8"))]


def test_the_readme_has_runnable_examples() -> None:
    """The README and docs/python.md show the agent and the ledger, each as a complete
    ``asyncio.run`` program, and the agent's device address is the marked placeholder."""
    blocks = readme_blocks()
    agent = [block for block in blocks if "SmsAgent.open" in block]
    assert (True, True) == (len(agent) >= 1, any("Ledger.open" in block for block in blocks))
    assert all("asyncio.run(main())" in block for block in blocks)
    assert all(_PLACEHOLDER.search(block) for block in agent)


@pytest.fixture
async def readme_phone(phone_factory: PhoneFactory) -> SimulatedPhone:
    """The phone the README's agent talks to (a user build: the restricted view)."""
    return await phone_factory()


@pytest.mark.parametrize("index", range(len(readme_blocks())))
async def test_readme_example_runs(
    index: int, readme_phone: SimulatedPhone, adb_key_path: Path, tmp_path: Path
) -> None:
    """The block runs to completion, prints what its comments say, writes nothing on stderr
    (the library stays quiet), and an agent block really sends its message."""
    code = _PLACEHOLDER.sub(
        lambda m: f'DEVICE = "{readme_phone.serial}"{m.group(1)}', readme_blocks()[index]
    )
    program = tmp_path / f"readme_example_{index}.py"
    program.write_text(code, encoding="utf-8")
    env = {
        **os.environ,
        "STAREBRAIN_ADB_KEY": str(adb_key_path),
        "XDG_DATA_HOME": str(tmp_path / "data"),
    }
    for name in ("STAREBRAIN_LOG_SENSITIVE", "STAREBRAIN_DB", "STAREBRAIN_READ_AS_SYSTEM"):
        env.pop(name, None)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(program),
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=120)
    output, errors = stdout.decode(), stderr.decode()
    assert (0, "") == (process.returncode, errors), errors
    claims = _CLAIM.findall(code)
    printed = [line.split()[0] for line in output.splitlines() if line.strip()]
    assert claims == printed
    if "SmsAgent.open" in code:
        sent = [row for row in readme_phone.store.rows() if row.body == "Your code is 4821"]
        assert ["+12025550143"] == [(row.address or "").replace(" ", "") for row in sent]


#: The README's ```sh blocks a reader cannot run against a simulated phone, by their first
#: line, and why. Every other block (shell and Python) runs, in order, in the test below.
README_NOT_RUN: Final = {
    "python3 -m venv .venv && . .venv/bin/activate && pip install . && starebrain demo": (
        "the install is this test's; the demo has tests of its own (tests/agent/test_demo.py)"
    ),
    "python3 -m venv .venv && . .venv/bin/activate && pip install '.[test]' && pytest": (
        "the test suite itself"
    ),
    "adb devices": "Google's adb tool and a phone on USB",
}


def readme_steps() -> list[_doc_steps.Block]:
    """The README's blocks a reader runs, in order (those of ``README_NOT_RUN`` left out)."""
    return [
        block
        for block in _doc_steps.blocks(ROOT / "README.md")
        if not any(block.first_line.startswith(first) for first in README_NOT_RUN)
    ]


def run_readme(reader: _doc_steps.Reader, addresses: dict[str, str]) -> None:
    """The README's blocks run by ``reader`` in order, each phone address the README names
    (``addresses``' keys) given as the simulated phone's."""
    for block in readme_steps():
        code = block.code
        for written, actual in addresses.items():
            code = code.replace(written, actual)
        if block.language == "python":
            output = reader.run_python(code)
            claims = _CLAIM.findall(code)
            assert claims == [line.split()[0] for line in output.splitlines() if line.strip()]
            continue
        for line in _doc_steps.lines(attrs.evolve(block, code=code)):
            reader.run_line(line)


def test_every_readme_block_is_run_or_says_why_not() -> None:
    """Each block ``README_NOT_RUN`` names is still in the README (a stale entry would hide
    a new block), and the README's send and its Python agent are among those run."""
    firsts = [block.first_line for block in _doc_steps.blocks(ROOT / "README.md")]
    assert [] == [
        first for first in README_NOT_RUN if not any(line.startswith(first) for line in firsts)
    ]
    run = "\n".join(block.code for block in readme_steps())
    assert ("starebrain send", "SmsAgent.open(") == tuple(
        word for word in ("starebrain send", "SmsAgent.open(") if word in run
    )


@pytest.mark.long(15)
async def test_the_readme_in_order_sends_each_message_once(
    ledger_target: Path | str,
    readme_phone: SimulatedPhone,
    adb_key_path: Path,
    tmp_path: Path,
) -> None:
    """A reader follows the README from top to bottom in an empty home directory, with the
    simulated phone in place of theirs: the quickstart's `starebrain send` and the Python
    agent share the one default ledger (the data directory's file, or the PostgreSQL
    ledger ``$STAREBRAIN_DB`` names), so the phone's own store holds each intended message
    exactly once, and the ledger every entry point uses holds the action."""
    home = tmp_path / "home"
    home.mkdir()
    env = _doc_steps.fresh_environment(home)
    env["STAREBRAIN_ADB_KEY"] = str(adb_key_path)  # the key the simulated phone authorised
    if isinstance(ledger_target, str):
        env["STAREBRAIN_DB"] = ledger_target
    reader = _doc_steps.Reader(home, env, tmp_path)
    addresses = {"192.168.1.20:5555": readme_phone.serial, "127.0.0.1:5555": readme_phone.serial}

    await asyncio.to_thread(run_readme, reader, addresses)

    stored = Counter(
        ((row.address or "").replace(" ", ""), row.body)
        for row in readme_phone.store.rows(types=[2])
    )
    went_out = Counter(
        (channel.channel, tuple(channel.addresses), channel.body)
        for channel in readme_phone.transmissions
    )
    assert {("+12025550143", "Your code is 4821"): 1} == dict(stored)
    assert 1 == sum(went_out.values()), went_out
    ledger = ledger_target if isinstance(ledger_target, str) else _paths_in(home)
    async with Ledger.open(ledger, create=False) as opened:
        assert "SUCCEEDED" == (await opened.summary("otp-1001")).status.value
    assert any(line.startswith("printf 'Your code is 4821' |") for line in reader.ran)


def _paths_in(home: Path) -> Path:
    """The default ledger of a user whose home is ``home`` (no XDG variables)."""
    return home / ".local" / "share" / "starebrain" / "ledger.db"
