"""docs/simulator.md's "Run it" works on a fresh machine: its shell blocks, run as written
in an empty home directory (only the port and the device address are substituted: the
simulated phone listens on a free port), start the phone, send through it and authorise the
key, with the files where the page says."""

from __future__ import annotations

import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e._doc_steps import fresh_environment

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform != "linux", reason="the page's paths are Linux's (XDG)"),
]

DOC = Path(__file__).resolve().parents[2] / "docs" / "simulator.md"
BODY = "Your code is 4821"


def run_it_blocks() -> list[list[str]]:
    """The command lines of each ```sh block of the "Run it" section, comments left out."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("### Run it", 1)[1].split("\n###", 1)[0]
    blocks = re.findall(r"^```sh\n(.*?)^```$", section, re.DOTALL | re.MULTILINE)
    return [
        [line for line in block.splitlines() if line.strip() and not line.startswith("#")]
        for block in blocks
    ]


@pytest.fixture
def fresh_home(tmp_path: Path) -> Iterator[dict[str, str]]:
    """An environment whose HOME is an empty directory, with no starebrain or XDG variables,
    and this interpreter's ``starebrain`` first on PATH."""
    home = tmp_path / "home"
    home.mkdir()
    yield fresh_environment(home)


class Simulator:
    """A documented ``starebrain simulator`` command line running in the background."""

    def __init__(self, line: str, env: dict[str, str], log: Path) -> None:
        assert "--port 5555" in line
        self._log = log.open("w", encoding="utf-8")
        self.process = subprocess.Popen(
            ["bash", "-c", "exec " + line.replace("--port 5555", "--port 0")],
            env=env,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        assert self.process.stdout is not None
        first = self.process.stdout.readline()
        match = re.search(r"^listening on \S+ serial=(\S+) ", first)
        assert match, (first, log.read_text(encoding="utf-8"))
        self.serial = match.group(1)

    def stop(self) -> str:
        """SIGTERM, as the page says; returns what it printed after the first line."""
        self.process.send_signal(signal.SIGTERM)
        rest, _ = self.process.communicate(timeout=30)
        self._log.close()
        return rest


def _shell(line: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", line], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def _sent_rows(home: Path) -> int:
    store = home / ".config" / "starebrain" / "simulator" / "sms.db"
    with sqlite3.connect(store) as db:
        return int(
            db.execute("SELECT count(*) FROM sms WHERE type = 2 AND body = ?", (BODY,)).fetchone()[
                0
            ]
        )


@pytest.mark.long(12)
def test_run_it_works_in_an_empty_home(fresh_home: dict[str, str], tmp_path: Path) -> None:
    """First run with --allow-new-keys, a send that creates the key, then the documented
    copy of adbkey.pub authorises it for a phone started without the flag."""
    home = Path(fresh_home["HOME"])
    config = home / ".config" / "starebrain"
    [first_run], [send], authorise = run_it_blocks()
    *copy_key, second_run = authorise

    phone = Simulator(first_run, fresh_home, tmp_path / "first.log")
    try:
        result = _shell(send.replace("127.0.0.1:5555", phone.serial), fresh_home)
    finally:
        said = phone.stop()
    assert 0 == result.returncode, result.stdout + result.stderr
    assert "stopped" in said
    public_key = (config / "adbkey.pub").read_text(encoding="utf-8").strip()
    assert 0o600 == (config / "adbkey").stat().st_mode & 0o777
    assert [public_key] == (config / "simulator" / "adb_keys").read_text().split("\n")[:1]
    assert not (home / ".android").exists()

    # A new phone (no adb_keys) and a new ledger, so that the second send is a real one.
    (config / "simulator" / "adb_keys").unlink()
    for ledger in (home / ".local" / "share" / "starebrain").glob("ledger.db*"):
        ledger.unlink()
    for line in copy_key:
        assert 0 == _shell(line, fresh_home).returncode, line
    phone = Simulator(second_run, fresh_home, tmp_path / "second.log")
    try:
        result = _shell(send.replace("127.0.0.1:5555", phone.serial), fresh_home)
    finally:
        phone.stop()
    assert 0 == result.returncode, result.stdout + result.stderr
    assert 2 == _sent_rows(home)


def test_without_a_key_file_the_simulator_says_how_to_start(
    fresh_home: dict[str, str],
) -> None:
    """Started without --allow-new-keys on a fresh machine, the simulator refuses with a
    message naming the flag and the copy of starebrain's own public key."""
    result = _shell("starebrain simulator --port 0", fresh_home)
    config = Path(fresh_home["HOME"]) / ".config" / "starebrain"
    assert 2 == result.returncode
    message = " ".join(result.stderr.split())
    assert "--allow-new-keys" in message
    assert f"cp {config / 'adbkey.pub'} {config / 'simulator' / 'adb_keys'}" in message


def test_one_configuration_directory_for_the_key_and_the_simulator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command line's key, the simulator's files and the ledger follow the XDG
    variables on Linux, and the key and the simulator share one configuration directory."""
    from android_bridge import default_key_path
    from android_bridge.simulator.cli import default_directory
    from starebrain_actions.cli.context import default_db_path

    monkeypatch.delenv("STAREBRAIN_ADB_KEY", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    config = tmp_path / "config" / "starebrain"
    assert (config / "adbkey", config / "simulator", tmp_path / "data/starebrain/ledger.db") == (
        default_key_path(),
        default_directory(),
        default_db_path(),
    )
    monkeypatch.setenv("STAREBRAIN_ADB_KEY", str(tmp_path / "elsewhere"))
    assert tmp_path / "elsewhere" == default_key_path()
