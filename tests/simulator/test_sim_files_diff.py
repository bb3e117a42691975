"""The simulated file tools against a real shell on a real filesystem: generated scripts of
mkdir, ln, rm, rmdir, touch, readlink, ls and test over a few names end with the same exit
statuses and the same tree.

The host runs real ``mksh`` (Android's shell, so ``test``/``[`` are the same builtin on both
sides) in an empty temporary directory; the simulator runs the same script in its shell with
the working directory set to a fresh directory of its tree, as the shell user who owns it. The
host's tools are GNU coreutils, not toybox, so error messages are not compared (every command's
stderr goes to ``/dev/null``), only what both must agree on: each command's exit status
(``ls``: zero or not, since GNU says 2 where toybox says 1), what ``readlink`` and ``test``
print, and the resulting tree (names, kinds, symlink targets). Nothing depends on permissions:
the host may run as root, the simulated shell owns everything it touches.

Known differences between GNU and toybox are left out of the generated scripts, each with its
source: ``mkdir -p`` of a dangling symlink (toybox ``mkpathat`` ignores ``EEXIST``: exit 0; GNU
exit 1), ``rm -f`` of a name below a file (toybox reports ``ENOTDIR``, exit 1; GNU's
``ignorable_missing`` takes it for a missing name), ``ln -f`` of a name onto itself (toybox
``ln.c`` links to a temporary name and renames it over, exit 0; GNU refuses "are the same
file", exit 1) and paths with a trailing slash (toybox
takes ``basename`` from bionic, which never changes its argument; glibc's may). Exact toybox
messages and layouts are pinned in ``test_sim_files.py``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from android_bridge.simulator._files import (
    ROOT,
    Credentials,
    FileCommands,
    FileTree,
    toybox_release,
)
from android_bridge.simulator._shell import Shell

MKSH = shutil.which("mksh")

pytestmark = pytest.mark.skipif(
    MKSH is None and os.environ.get("CI") != "true",
    reason="mksh is not installed (.ci/run installs it; in CI its absence fails)",
)

WORK = "/data/local/tmp/w"
SHELL = Credentials(uid=2000, gid=2000)
NAMES = ("a", "b", "c", "a/b", "a/c", "b/a", "l", "l/x", "a/b/c")
TARGETS = ("void", "a", "b", "a/b", "../a", "l", "void/.", ".")

Tree = set[tuple[str, str, str | None]]


def _quiet(command: str) -> str:
    return f'{command} >/dev/null 2>&1; echo "s=$?"'


@st.composite
def _command(draw: st.DrawFn) -> str:
    # Mostly the same two names, so that commands meet on them.
    name = draw(st.one_of(st.sampled_from(NAMES[:2]), st.sampled_from(NAMES)))
    target = draw(st.sampled_from(TARGETS))
    kind = draw(
        st.sampled_from(
            [
                "mkdir",
                "mkdir-p",
                "ln-s",
                "ln-sf",
                "ln-sn",
                "rm",
                "rm-r",
                "rm-rf",
                "rm-f",
                "rmdir",
                "touch",
                "readlink",
                "ls",
                "test",
            ]
        )
    )
    if kind == "mkdir":
        return _quiet(f"mkdir {name}")
    if kind == "mkdir-p":
        # mkdir -p of a dangling symlink: toybox exits 0, GNU 1 (see the module docstring).
        return f'[ -L {name} ] && echo s=skip || mkdir -p {name} >/dev/null 2>&1; echo "s=$?"'
    if kind.startswith("ln"):
        flags = kind[2:]
        if "f" in flags and target == name:
            # ln -f of a name onto itself: toybox replaces it through a temporary name and
            # rename(2), with no same-file check (exit 0); GNU refuses "are the same file"
            return 'echo "s=skip"'
        return _quiet(f"ln {flags} {target} {name}")
    if kind.startswith("rm"):
        command = _quiet(f"rm {kind[2:]} {name}".replace("  ", " "))
        parts = name.split("/")
        ancestors = ["/".join(parts[:index]) for index in range(1, len(parts))]
        if "f" not in kind or not ancestors:
            return command
        # rm -f below a file: toybox says ENOTDIR (exit 1), GNU ignores it (exit 0).
        below_a_file = " -o ".join(f"-e {path} -a ! -d {path}" for path in ancestors)
        return f"[ {below_a_file} ] && echo s=skip || {command}"
    if kind in ("rmdir", "touch"):
        return _quiet(f"{kind} {name}")
    if kind == "readlink":
        return f'readlink {name} 2>/dev/null; echo "s=$?"'
    if kind == "ls":
        flags = draw(st.sampled_from(["", "-1", "-a", "-d", "-l", "-1a"]))
        return f"ls {flags} {name} >/dev/null 2>&1 && echo s=0 || echo s=1"
    operator = draw(st.sampled_from(["-e", "-d", "-L", "-f", "-h", "! -e", "-s"]))
    bracket = draw(st.booleans())
    test = f"[ {operator} {name} ]" if bracket else f"test {operator} {name}"
    return f'{test}; echo "t=$?"'


@st.composite
def _script(draw: st.DrawFn) -> str:
    return "\n".join(draw(st.lists(_command(), min_size=1, max_size=6)))


def run_simulated(script: str, store: Path) -> tuple[str, int, Tree]:
    """Run ``script`` in the simulated shell, in a fresh directory of a fresh tree."""
    tree = FileTree(store, clock_ns=time.time_ns)
    try:
        tree.boot()
        tree.mkdir(ROOT, "/", WORK, 0o777)
        commands = FileCommands(
            tree, cred=SHELL, toybox=toybox_release(15), zone=lambda: ZoneInfo("UTC"), cwd=WORK
        )
        output, status = asyncio.run(Shell(commands.commands()).run(script))
        entries: Tree = {
            (entry.path.removeprefix(WORK + "/"), entry.kind, entry.target)
            for entry in tree.entries()
            if entry.path.startswith(WORK + "/")
        }
    finally:
        tree.close()
    return output, status, entries


def run_host(script: str, directory: Path) -> tuple[str, int, Tree]:
    """Run ``script`` in real mksh in ``directory``, with the host's tools."""
    assert MKSH is not None, "mksh is missing: install the Debian package mksh"
    completed = subprocess.run(
        ["/system/bin/sh", "-c", script],
        executable=MKSH,
        capture_output=True,
        cwd=directory,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "HOME": str(directory)},
        timeout=10,
        check=False,
    )
    entries: Tree = set()
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            path = Path(root, name)
            relative = str(path.relative_to(directory))
            if path.is_symlink():
                entries.add((relative, "symlink", os.readlink(path)))
            elif path.is_dir():
                entries.add((relative, "dir", None))
            else:
                entries.add((relative, "file", None))
    return completed.stdout.decode("utf-8", "replace"), completed.returncode, entries


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=_script())
def test_generated_file_scripts_agree_with_a_real_shell(
    script: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Statuses, readlink and test output, and the final tree agree with real mksh on a real
    filesystem (toybox toys/posix/*.c and mksh funcs.c c_test; Linux namei semantics)."""
    base = tmp_path_factory.mktemp("files-diff")
    host_dir = base / "host"
    host_dir.mkdir()
    expected = run_host(script, host_dir)
    actual = run_simulated(script, base / "sim.db")
    assert expected == actual


@pytest.mark.parametrize(
    "script",
    [
        pytest.param(
            _quiet("mkdir a") + "\n" + _quiet("ln -s void a") + "\n" + _quiet("readlink a"),
            id="ln-into-a-directory",
        ),
        pytest.param(
            _quiet("ln -s void a") + "\n" + _quiet("mkdir a") + "\n" + _quiet("mkdir a/go"),
            id="void-blocks-mkdir",
        ),
        pytest.param(
            _quiet("mkdir a") + "\n" + _quiet("ln -s void/. a") + "\n" + _quiet("ls -1 a/"),
            id="dot-target-refuses-a-directory",
        ),
        pytest.param(
            _quiet("mkdir -p a/b/c") + "\n" + _quiet("rm -r a") + "\n" + '[ -e a ]; echo "t=$?"',
            id="recursive-remove",
        ),
        pytest.param(
            _quiet("ln -s l l") + "\n" + _quiet("mkdir l/x") + "\n" + '[ -e l ]; echo "t=$?"',
            id="symlink-loop",
        ),
        pytest.param(
            _quiet("touch a") + "\n" + _quiet("mkdir a/b") + "\n" + _quiet("rmdir a"),
            id="file-in-the-way",
        ),
    ],
)
def test_pinned_file_scripts_agree_with_a_real_shell(script: str, tmp_path: Path) -> None:
    """The fence's corner cases agree with real mksh on a real filesystem (toybox ln.c,
    mkdir.c, rm.c, rmdir.c; Linux symlink(2), mkdir(2): EEXIST whatever holds the name)."""
    host_dir = tmp_path / "host"
    host_dir.mkdir()
    assert run_host(script, host_dir) == run_simulated(script, tmp_path / "sim.db")
