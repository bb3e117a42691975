"""The README's Python examples (and docs/python.md's) run as written, so they cannot drift
from the API.

Each ```python block of README.md and docs/python.md runs as a program of its own, in a fresh
directory (its relative ``ledger.db`` lands there), against a simulated phone. The only
substitution is the device address on the line marked as the reader's placeholder
(``DEVICE = "…"  # your phone's …``); the ADB key comes through the documented
``STAREBRAIN_ADB_KEY`` variable.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import pytest

from android_bridge.simulator import SimulatedPhone
from tests.conftest import PhoneFactory

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
    env = {**os.environ, "STAREBRAIN_ADB_KEY": str(adb_key_path)}
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
