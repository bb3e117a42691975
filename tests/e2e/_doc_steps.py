"""Walking a page of the docs as a reader does: its ```sh and ```python blocks in order, each
command line run as written in a fresh home directory, against a simulated phone.

Conventions of the pages walked (README.md, docs/getting-started.md): a comment ``# exit N``
at the end of a command line says its exit status (else 0); ``export NAME=VALUE`` lines set
the environment of the lines after them; a ``starebrain simulator`` line starts the phone of
"the other terminal" (a later one stops it first, as Ctrl-C would).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parents[2]
#: A fenced block, indented as a list item's may be: its language and its code.
_FENCE = re.compile(r"^( *)```(sh|python)\n(.*?)^\1```$", re.DOTALL | re.MULTILINE)
_EXIT = re.compile(r"\s+#\s*exit (\d+)\s*$")
_COMMENT = re.compile(r"\s+#\s.*$")


@attrs.frozen
class Block:
    """One fenced block of a page, dedented."""

    #: "sh" or "python"
    language: str
    code: str

    @property
    def first_line(self) -> str:
        return self.code.splitlines()[0]


@attrs.frozen
class Line:
    """One command line of a ```sh block, its trailing comment removed."""

    command: str
    #: the exit status the page says (``# exit N``), else 0
    exit_status: int


def blocks(page: Path) -> list[Block]:
    """The ```sh and ```python blocks of ``page``, in order."""
    text = page.read_text(encoding="utf-8")
    return [
        Block(language, textwrap.dedent(code)) for _indent, language, code in _FENCE.findall(text)
    ]


def lines(block: Block) -> list[Line]:
    """The command lines of a ```sh block: comment lines left out, ``# exit N`` read."""
    found = []
    for raw in block.code.splitlines():
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        status = _EXIT.search(raw)
        command = _COMMENT.sub("", raw) if "#" in raw else raw
        found.append(Line(command.rstrip(), int(status.group(1)) if status else 0))
    return found


def fresh_environment(home: Path) -> dict[str, str]:
    """This environment with HOME an empty directory, no starebrain or XDG variables, and this
    interpreter's ``starebrain`` first on PATH: a fresh machine after `pip install`."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("STAREBRAIN_", "XDG_"))
    }
    env["HOME"] = str(home)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


class Simulator:
    """A documented ``starebrain simulator`` line running in the background."""

    def __init__(self, line: str, env: dict[str, str], log: Path) -> None:
        self._log = log.open("w", encoding="utf-8")
        self.process = subprocess.Popen(
            ["bash", "-c", "exec " + line],
            env=env,
            cwd=env["HOME"],
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        assert self.process.stdout is not None
        first = self.process.stdout.readline()
        assert re.search(r"^listening on \S+ serial=\S+ ", first), (
            first,
            log.read_text(encoding="utf-8"),
        )

    def stop(self) -> str:
        """SIGTERM, as Ctrl-C in its terminal; returns what it printed after the first line."""
        self.process.send_signal(signal.SIGTERM)
        rest, _ = self.process.communicate(timeout=60)
        self._log.close()
        return rest


class Reader:
    """Someone following pages in order in one home directory and two terminals: runs each
    line, checks its exit status, keeps the exported variables and the simulated phone."""

    def __init__(self, home: Path, env: dict[str, str], logs: Path) -> None:
        self.home = home
        self.env = env
        self.logs = logs
        self.simulator: Simulator | None = None
        self.ran: list[str] = []
        #: seconds each line run took, in order (a slow step shows in a failure's message)
        self.took: list[tuple[str, float]] = []

    def run(self, argv: list[str], *, timeout: float = 150) -> subprocess.CompletedProcess[str]:
        """``argv`` in the reader's home with the reader's environment, its output captured."""
        return subprocess.run(
            argv,
            env=self.env,
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def run_line(self, line: Line) -> None:
        if line.command.startswith("starebrain simulator "):
            self.stop_simulator()
            log = self.logs / f"simulator-{len(self.ran)}.log"
            self.simulator = Simulator(line.command, self.env, log)
            self.ran.append(line.command)
            return
        if line.command.startswith("export "):
            name, _, value = line.command.removeprefix("export ").partition("=")
            self.env[name] = shlex.split(value)[0] if value else ""
            self.ran.append(line.command)
            return
        started = time.monotonic()
        result = self.run(["bash", "-c", line.command])
        self.ran.append(line.command)
        self.took.append((line.command, round(time.monotonic() - started, 1)))
        assert line.exit_status == result.returncode, (
            line.command,
            result.stdout,
            result.stderr,
        )

    def run_python(self, code: str) -> str:
        """A ```python block as a program of its own, in the home directory; its stdout."""
        program = self.logs / f"example-{len(self.ran)}.py"
        program.write_text(code, encoding="utf-8")
        result = self.run([sys.executable, str(program)])
        self.ran.append(f"python {program.name}")
        assert (0, "") == (result.returncode, result.stderr), result.stderr
        return result.stdout

    def stop_simulator(self) -> None:
        if self.simulator is not None:
            assert "stopped" in self.simulator.stop()
            self.simulator = None


def sent_messages(store: Path) -> Counter[tuple[str, str]]:
    """The messages a simulated phone's own SMS store holds as sent (type 2), by (number,
    text): the ground truth of what went out."""
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT address, body FROM sms WHERE type = 2").fetchall()
    return Counter((str(address).replace(" ", ""), str(body)) for address, body in rows)
